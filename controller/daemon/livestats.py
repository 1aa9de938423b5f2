"""Rolling live statistics for `specctl status` and the metrics (engine clock, last N seconds),
summarised by the same function as the offline figures (controller.status.summarise), and the
rate samples arrive at in real seconds (the simulator's engine clock runs at --speed)."""
from __future__ import annotations

from collections import deque

from ..contract import Sample
from ..status import summarise


class LiveStats:
    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self._rows: deque[tuple[float, int, int, int, float]] = deque()
        self._sums = {"batches": 0, "tokens": 0, "spec_batches": 0, "busy_s": 0.0, "spec_tokens": 0,
                      "spec_requests": 0}
        self.total = 0
        self.max_steps = 0
        self.last_spec: tuple[float, float] | None = None   # (t, accept length) of the newest spec batch
        self._arrivals: deque[tuple[float, int]] = deque()  # (real time, samples) per ingested batch

    def _count(self, tokens: int, bs: int, spec: int, step_s: float, sign: int) -> None:
        sums = self._sums
        sums["batches"] += sign
        sums["tokens"] += sign * tokens
        sums["spec_batches"] += sign * spec
        sums["busy_s"] += sign * step_s
        if spec:
            sums["spec_tokens"] += sign * tokens
            sums["spec_requests"] += sign * bs

    def add(self, s: Sample) -> None:
        spec = int(s.steps > 0)
        self._rows.append((s.t, s.tokens, s.batch_size, spec, s.step_s))
        self._count(s.tokens, s.batch_size, spec, s.step_s, 1)
        if spec:
            self.max_steps = max(self.max_steps, s.steps)
            self.last_spec = (s.t, s.tokens / s.batch_size)
        self.total += 1
        self._trim(s.t)

    def _trim(self, now: float) -> None:
        rows = self._rows
        while rows and rows[0][0] < now - self.window_s:
            _, tokens, bs, spec, step_s = rows.popleft()
            self._count(tokens, bs, spec, step_s, -1)

    def arrived(self, n: int, real_now: float) -> None:
        """n samples ingested at real_now (a monotonic clock)."""
        self._arrivals.append((real_now, n))
        while self._arrivals and self._arrivals[0][0] < real_now - self.window_s:
            self._arrivals.popleft()

    def arrival_rate(self, real_now: float) -> float | None:
        """Samples per real second over the window (None before two batches arrived)."""
        rows = self._arrivals
        while rows and rows[0][0] < real_now - self.window_s:
            rows.popleft()
        if len(rows) < 2:
            return 0.0 if self.total else None
        span = real_now - rows[0][0]
        return round(sum(n for _, n in list(rows)[1:]) / span, 2) if span > 0 else None

    def snapshot(self, now: float | None = None, speed: float = 1.0) -> dict:
        """The window's figures; ages in real seconds (engine seconds / speed, the sim's clock rate)."""
        span = (self._rows[-1][0] - self._rows[0][0]) if len(self._rows) > 1 else 0.0
        out = summarise({**self._sums, "max_steps": self.max_steps}, span)
        out.update(
            window_s=self.window_s,
            # when the window holds no speculative batch: the newest one seen, and how long ago
            last_accept_length=round(self.last_spec[1], 4) if self.last_spec else None,
            last_accept_age_s=round((now - self.last_spec[0]) / speed, 1) if self.last_spec and now is not None
            else None,
            # how old the newest sample is (an idle engine sends none: the figures are that old)
            figures_age_s=round(max(0.0, now - self._rows[-1][0]) / speed, 1) if now is not None and self._rows
            else 0.0,
        )
        return out
