"""Rolling live statistics for `specctl status` and the metrics (engine clock, last N seconds),
summarised by the same function as the offline figures (controller.status.summarise)."""
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

    def snapshot(self, now: float | None = None) -> dict:
        span = (self._rows[-1][0] - self._rows[0][0]) if len(self._rows) > 1 else 0.0
        out = summarise({**self._sums, "max_steps": self.max_steps}, span)
        out.update(
            window_s=self.window_s,
            # when the window holds no speculative batch: the newest one seen, and how long ago
            last_accept_length=round(self.last_spec[1], 4) if self.last_spec else None,
            last_accept_age_s=round(now - self.last_spec[0], 1) if self.last_spec and now is not None else None,
            figures_age_s=0.0,
        )
        return out
