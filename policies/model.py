"""Model-based: fit step time against batch size for each mode, predict the crossover."""
from __future__ import annotations

import numpy as np

from .base import OFF, SPEC
from .learner import BucketLearner
from .params import ParamSpec
from .types import Decision, Snapshot


class ModelPolicy(BucketLearner):
    """Per mode, step_s = a + b * batch_size (non-negative a, b, weighted least squares
    over the buckets seen, recent ones weighing more); with the current accept
    length this predicts tokens/s of both modes at every batch size, visited or not.
    """

    name = "model"
    summary = "fits step time vs batch size per mode (scipy), predicts the crossover"
    PARAMS = BucketLearner.BASE_PARAMS + (
        ParamSpec("min_buckets", int, 2, 1, 64, "buckets with data a mode needs before its fit is used"),
    )

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        n = len(self.buckets)
        self._bs = np.array([(self.buckets.low(i) + self.buckets.high(i)) / 2.0 for i in range(n)])
        self._fit: list[np.ndarray | None] = [None, None]

    def refit(self, now: float) -> None:
        from scipy.optimize import (
            lsq_linear,  # here, not at import: specctl starts in a blink
        )
        for arm in (OFF, SPEC):
            w = np.array([d.weight(now) for d in self.q[arm]])
            q = np.array([d.mean for d in self.q[arm]])
            seen = (w > 1e-6) & (q > 0)
            if seen.sum() < self.params["min_buckets"]:
                self._fit[arm] = None
                continue
            bs = self._bs[seen]
            sw = np.sqrt(w[seen])
            design = np.stack([np.ones_like(bs), bs], axis=1) * sw[:, None]
            target = (bs / q[seen]) * sw            # step seconds at that batch size
            self._fit[arm] = lsq_linear(design, target, bounds=(0.0, np.inf)).x

    def mean(self, arm: int, b: int) -> float:
        fit = self._fit[arm]
        if fit is None or (arm == SPEC and not self.accept.w):
            return super().mean(arm, b)
        step_s = fit[0] + fit[1] * self._bs[b]
        rate = self._bs[b] / step_s if step_s > 0 else 0.0
        return rate * self.accept.mean if arm == SPEC else rate

    def estimable(self, b: int) -> bool:
        """With both fits, every bucket has an estimate (visited or not)."""
        if self._fit[OFF] is not None and self._fit[SPEC] is not None and self.accept.w:
            return True
        return super().estimable(b)

    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        return SPEC if self.mean(SPEC, b) > self.mean(OFF, b) else OFF

    def decide(self, snap: Snapshot) -> Decision:
        self.refit(snap.now)
        return super().decide(snap)
