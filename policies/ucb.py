"""Discounted UCB per batch-size bucket (Garivier & Moulines' D-UCB, relative bonus)."""
from __future__ import annotations

import math

from .base import OFF, SPEC
from .learner import BucketLearner
from .params import ParamSpec


class UCBPolicy(BucketLearner):
    name = "ucb"
    summary = "discounted UCB on tokens/s of each mode at the live batch size"
    PARAMS = BucketLearner.BASE_PARAMS + (
        ParamSpec("c", float, 1.0, 0.0, 100.0, "width of the confidence bonus"),
    )

    def index(self, arm: int, b: int, now: float, total: float) -> float:
        bonus = self.params["c"] * math.sqrt(2.0 * math.log(max(total, math.e))) * self.rel_uncertainty(arm, b, now)
        return self.mean(arm, b) * (1.0 + bonus)

    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        total = self.q[OFF][b].weight(now) + self.q[SPEC][b].weight(now)
        index = [self.index(OFF, b, now, total), self.index(SPEC, b, now, total)]
        index[incumbent] *= 1.0 + self.params["indifference"]
        return SPEC if index[SPEC] > index[OFF] else OFF
