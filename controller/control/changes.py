"""How many visible threshold changes the guard may make: a token bucket.

Every change of the applied threshold is a row in the decision history and a moment when
routing moves under running requests. At constant load the policy keeps finding reasons
to move (exploration probes, noise at the crossover); the bucket lets `per_min` of them
through on average and `burst` at once, so a real shift is still followed at once.
"""
from __future__ import annotations


class ChangeBudget:
    def __init__(self, per_min: float, burst: float):
        self.per_min = per_min
        self.burst = burst
        self.tokens = burst
        self._t: float | None = None

    def available(self, now: float) -> float:
        if self._t is not None and now > self._t:
            self.tokens = min(self.burst, self.tokens + (now - self._t) * self.per_min / 60.0)
        if self._t is None or now > self._t:
            self._t = now
        return self.tokens

    def take(self, now: float, n: float = 1.0, force: bool = False, reserve: float = 0.0) -> bool:
        """Spend n tokens if there are that many and `reserve` more left over; a forced change is let
        through for free (it must not starve the discretionary ones that follow)."""
        if force:
            return True
        if self.available(now) >= n + reserve:
            self.tokens -= n
            return True
        return False
