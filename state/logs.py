"""Rate-limited log lines: a fault that repeats (a full disk, a bad sample stream, a failing job)
is logged once, then at most once per interval with the count of what was held back, instead of
once per occurrence. Counting is the caller's business; this only decides what reaches the log."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, message: str, *args) -> bool:
        """Log `message` unless `key` was logged less than interval_s ago; True if it was logged."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            self._last[key] = now
            held = self._held.pop(key, 0)
        suffix = f" ({held} more like it in the last {now - last:.0f} s)" if held and last is not None else ""
        self.logger.log(level, message + suffix, *args)
        return True

    def error(self, key: str, message: str, *args) -> bool:
        return self.log(logging.ERROR, key, message, *args)

    def warning(self, key: str, message: str, *args) -> bool:
        return self.log(logging.WARNING, key, message, *args)

    def reset(self, key: str) -> None:
        """The fault is over: its next occurrence is logged at once."""
        with self._lock:
            self._last.pop(key, None)
            self._held.pop(key, None)
