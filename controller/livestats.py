"""Rolling live statistics for `specctl status` and the metrics (engine clock, last N seconds)."""
from __future__ import annotations

from collections import deque

from policies.types import Sample


class LiveStats:
    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self._rows: deque[tuple[float, int, int, int, float]] = deque()
        self._sums = [0, 0, 0, 0.0, 0, 0]   # batches, tokens, spec batches, busy s, spec tokens, spec requests
        self.total = 0
        self.max_steps = 0
        self.last_spec: tuple[float, float] | None = None   # (t, accept length) of the newest spec batch

    def add(self, s: Sample) -> None:
        spec = s.steps > 0
        self._rows.append((s.t, s.tokens, s.batch_size, int(spec), s.step_s))
        sums = self._sums
        sums[0] += 1
        sums[1] += s.tokens
        sums[2] += spec
        sums[3] += s.step_s
        if spec:
            sums[4] += s.tokens
            sums[5] += s.batch_size
            self.max_steps = max(self.max_steps, s.steps)
            self.last_spec = (s.t, s.tokens / s.batch_size)
        self.total += 1
        self._trim(s.t)

    def _trim(self, now: float) -> None:
        rows, sums = self._rows, self._sums
        while rows and rows[0][0] < now - self.window_s:
            t, tokens, bs, spec, step_s = rows.popleft()
            sums[0] -= 1
            sums[1] -= tokens
            sums[2] -= spec
            sums[3] -= step_s
            if spec:
                sums[4] -= tokens
                sums[5] -= bs

    def snapshot(self, now: float | None = None) -> dict:
        batches, tokens, spec, busy, spec_tokens, spec_reqs = self._sums
        span = (self._rows[-1][0] - self._rows[0][0]) if len(self._rows) > 1 else 0.0
        accept = spec_tokens / spec_reqs if spec_reqs else None
        return {
            "window_s": self.window_s,
            "batches": batches,
            "tok_per_s": round(tokens / busy, 2) if busy > 0 else None,
            "spec_share": round(spec / batches, 4) if batches else None,
            "mean_accept_length": round(accept, 4) if accept else None,
            "acceptance_rate": round((accept - 1) / self.max_steps, 4) if accept and self.max_steps else None,
            "batches_per_s": round(batches / span, 2) if span > 0 else None,
            # when the window holds no speculative batch: the newest one seen, and how long ago
            "last_accept_length": round(self.last_spec[1], 4) if self.last_spec else None,
            "last_accept_age_s": round(now - self.last_spec[0], 1) if self.last_spec and now is not None else None,
        }
