"""Gaussian Thompson sampling with forgetting, per batch-size bucket."""
from __future__ import annotations

import random
from typing import Any, Mapping

from .base import OFF, SPEC
from .learner import BucketLearner
from .params import ParamSpec, shown
from .types import PolicyError


class ThompsonPolicy(BucketLearner):
    name = "thompson"
    summary = "Gaussian Thompson sampling with forgetting on tokens/s per mode"
    PARAMS = BucketLearner.BASE_PARAMS + (
        ParamSpec("scale", float, 1.0, 0.0, 100.0, "posterior width multiplier"),
    )

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        self.rng = random.Random(self.seed)

    def draw(self, arm: int, b: int, now: float) -> float:
        mean = self.mean(arm, b)
        sd = self.params["scale"] * mean * self.rel_uncertainty(arm, b, now)
        return self.rng.gauss(mean, sd)

    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        draws = [self.draw(OFF, b, now), self.draw(SPEC, b, now)]
        draws[incumbent] *= 1.0 + self.params["indifference"]
        return SPEC if draws[SPEC] > draws[OFF] else OFF

    def state(self) -> dict:
        out = super().state()
        version, internal, gauss_next = self.rng.getstate()
        out["rng"] = [version, list(internal), gauss_next]
        return out

    def load_state(self, state: Mapping[str, Any]) -> None:
        super().load_state(state)
        if "rng" in state:
            try:
                version, internal, gauss_next = state["rng"]
                if gauss_next is not None and (isinstance(gauss_next, bool) or not isinstance(gauss_next, float)):
                    raise TypeError(f"its next draw is {shown(gauss_next)}, no number")   # (setstate took any: the
                self.rng.setstate((version, tuple(internal), gauss_next))                  # first draw's TypeError)
            except (TypeError, ValueError) as e:
                raise PolicyError(f"policy {self.name}: saved random state is unreadable ({e})") from None
