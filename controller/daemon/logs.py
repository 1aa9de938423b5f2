"""The daemon's log: one format, and repeated warnings and errors rate-limited."""
from __future__ import annotations

import logging
import sys
import time
from typing import Callable

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RepeatFilter(logging.Filter):
    """A warning or error with the same logger, level, format string and text arguments passes at most once per
    interval_s; the next one that passes says how many were held back. Lower levels pass. The text arguments are
    the key's (a number or an exception is not): "%s failed" for one job held back another job's failure, and every
    log.warning("%s", ...) the next different one."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 1000):
        super().__init__()
        self.interval_s, self.clock, self.max_keys = interval_s, clock, max_keys
        self._seen: dict[tuple, list] = {}      # key -> [time it last passed, held back since]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = (record.name, record.levelno, str(record.msg), tuple(a[:200] for a in args if isinstance(a, str)))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            record.msg = f"{record.getMessage()} (repeated {seen[1]} more times in the last {now - seen[0]:.0f} s)"
            record.args = ()
        if len(self._seen) >= self.max_keys and key not in self._seen:
            self._seen.clear()
        self._seen[key] = [now, 0]
        return True


def setup(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter())
    logging.getLogger("apscheduler").setLevel(logging.WARNING)   # it logs every job run at INFO
