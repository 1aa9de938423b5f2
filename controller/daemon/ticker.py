"""A job that runs every N seconds on its own thread and never overlaps itself.

Why not an APScheduler interval job for the retune: APScheduler starts a run every interval
whether or not the previous one has finished; with max_instances=1 it then skips the new run
and logs "maximum number of running instances reached". The retune interval is tick_s / speed
(50 ms at --speed 10) and a retune waits for the service lock, which the ingest thread holds
while it folds a batch of samples and which a command (policy switch: a checkpoint and a
writer flush) or an actuation blocked on a full writer queue (database locked by another
process) can hold for seconds: every such wait skipped runs and logged a warning for each,
thousands under a database lock. Here the next run is timed from the end of the previous one:
a slow run delays the next, and nothing is skipped or logged.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("spec_controller")


class Ticker:
    def __init__(self, name: str, interval_s: float, fn: Callable[[], None]):
        self.name, self.interval_s, self.fn = name, float(interval_s), fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> "Ticker":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.fn()
            except Exception:            # the job keeps running; RepeatFilter limits the log
                log.exception("%s failed", self.name)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
