"""Telemetry in: from the engine's thread (one sample at a time) through the boundary check to the
control loop, the live figures and the writer.

The engine's thread only checks the sample and appends it to a deque (no lock, no wake-up); the
ingest thread wakes every `interval_s`, feeds what arrived to the loop in one go, and hands the
writer groups of rows (one transaction per `group_s` or `group_rows`), not one per decode batch:
at 500 batches/s that is the difference between 500 commits a second and two."""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from state.logs import RateLimitedLog
from state.writer import Writer

from ..contract import Sample
from ..control.loop import ControlLoop
from .intake import SampleGate
from .livestats import LiveStats

log = logging.getLogger("spec_controller")


class Ingest:
    def __init__(self, lock: threading.RLock, loop: ControlLoop, stats: LiveStats, writer: Writer, gate: SampleGate,
                 maxsize: int, interval_s: float = 0.05, group_s: float = 0.5, group_rows: int = 512,
                 clock: Callable[[], float] = time.monotonic):
        self.lock, self.loop, self.stats, self.writer, self.gate = lock, loop, stats, writer, gate
        self.maxsize = maxsize
        self.interval_s, self.group_s, self.group_rows = interval_s, group_s, group_rows
        self.clock = clock
        self.dropped = 0              # sound samples dropped because ingest fell behind
        self.errors = 0               # samples whose processing raised (counted, skipped)
        self._last_error: tuple[float, str] | None = None
        self._q: collections.deque[Sample] = collections.deque()
        self._rows: list[tuple] = []
        self._rows_since: float | None = None     # when the oldest row not yet handed over came
        self._stop = threading.Event()
        self._logs = RateLimitedLog(log)

    # --- the engine's thread --------------------------------------------------------------
    def on_sample(self, sample: Sample) -> None:
        """Never blocks: rejects (counted by kind) what fails the boundary check, drops when full."""
        why, sample = self.gate.admit(sample)
        if why is not None:
            self._logs.warning(f"reject:{why}", "telemetry: sample rejected (%s): %r", why, sample)
            return
        self.loop.heard_t = sample.t        # the engine is not quiet, whether this one is folded in soon or dropped
        if len(self._q) >= self.maxsize:
            self.dropped += 1
            return
        self._q.append(sample)

    # --- the ingest thread ----------------------------------------------------------------
    def run(self) -> None:
        while True:
            stopping = self._stop.wait(self.interval_s)
            self.step(stopping)
            if stopping and not self._q:
                return

    def step(self, final: bool = False) -> None:
        """One pass: feed what arrived to the loop; hand the writer a group when one is due (or final)."""
        batch = self._take()
        if batch:
            self._observe(batch)
        self._hand_over(final)

    def _take(self) -> list[Sample]:
        q, batch = self._q, []
        while q and len(batch) < 4096:
            batch.append(q.popleft())
        return batch

    def _observe(self, batch: list[Sample]) -> None:
        with self.lock:
            for s in batch:
                try:
                    self.loop.observe(s)
                    self.stats.add(s)
                except Exception as e:          # one sample must not stop the loop: count, log, go on
                    self.errors += 1
                    self._last_error = (time.monotonic(), f"{type(e).__name__}: {e}")
                    self._logs.error("observe", "ingest: a sample could not be processed (%s: %s): %r",
                                     type(e).__name__, e, s)
                    continue
                self._rows.append(s.as_tuple())
            self.stats.arrived(len(batch), time.monotonic())     # the arrival rate, per real second
        if self._rows and self._rows_since is None:
            self._rows_since = self.clock()

    def _hand_over(self, now_anyway: bool) -> None:
        if not self._rows:
            return
        if now_anyway or len(self._rows) >= self.group_rows or self.clock() - self._rows_since >= self.group_s:
            rows, self._rows, self._rows_since = self._rows, [], None
            self.writer.samples(rows)

    @property
    def failing(self) -> str | None:
        """The newest processing error, while it is less than a minute old."""
        if self._last_error and time.monotonic() - self._last_error[0] < 60.0:
            return f"{self.errors} samples failed, the newest: {self._last_error[1]}"
        return None

    def stop(self) -> None:
        self._stop.set()
