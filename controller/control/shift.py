"""Has the load moved? The guard's own view of a load shift, from the batch sizes it sees.

At constant load the change budget is kept for the noise and probes of untried arms draw on a
small bucket of their own; after a real shift the policy probes one never-measured arm after
another as the load walks into new buckets (crossover-b at 4 -> 28 req/s: nine probes within
30 s), and each is worth making. The median of the batch sizes seen in the coalescing window is
compared with its own average over a half-life of HALF_LIFE_S (in log space): when they are
`ratio` apart, either way, the load has moved, and it is taken to be moving for `hold_s` after.
Noise at constant load stays well inside 2x (seeds 0-13 at h200-2b6 40 req/s: 1.28-1.43x;
crossover-b at 4 and 28 req/s, seeds 0-3: at most 1.83x).
"""
from __future__ import annotations

import math
from statistics import median
from typing import Collection

HALF_LIFE_S = 30.0


class LoadLevel:
    def __init__(self, ratio: float, hold_s: float):
        self.log_ratio = math.log(ratio) if ratio > 1 else None     # None: off
        self.hold_s = hold_s
        self._ref: float | None = None
        self._t = 0.0
        self.until = -math.inf

    def update(self, now: float, live: Collection[int]) -> bool:
        """Note the batch sizes live now; is the load moving (or did it move within hold_s)? The
        first batch sizes seen count as a move: at a start every arm is untried."""
        if self.log_ratio is not None and live:
            level = math.log(max(1.0, median(live)))
            if self._ref is None:
                moved, self._ref = True, level
            else:
                moved = abs(level - self._ref) > self.log_ratio
                f = 0.5 ** (max(0.0, now - self._t) / HALF_LIFE_S)
                self._ref = f * self._ref + (1 - f) * level
            self._t = now
            if moved:
                self.until = now + self.hold_s
        return now < self.until
