"""Model-based: fit step time against batch size for each mode, predict the crossover."""
from __future__ import annotations

from . import trend
from .base import OFF, SPEC
from .learner import BucketLearner
from .params import ParamSpec


class ModelPolicy(BucketLearner):
    """Per mode, step_s = a + b * batch_size (non-negative a, b, weighted least squares
    over the buckets seen, recent ones weighing more: policies.trend); with the current accept
    length this predicts tokens/s of both modes at every batch size, visited or not.
    """

    name = "model"
    summary = "fits step time vs batch size per mode (scipy), predicts the crossover"
    PARAMS = BucketLearner.BASE_PARAMS + (
        ParamSpec("min_buckets", int, 2, 1, 64, "buckets with data a mode needs before its fit is used"),
    )

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        self._fit: list[trend.Line | None] = [None, None]

    def refit(self, now: float) -> None:
        self._fit = trend.fit_lines(self, now, self.params["min_buckets"])[0]

    def mean(self, arm: int, b: int) -> float:
        fit = self._fit[arm]
        if fit is None or (arm == SPEC and not self.accept.w):
            return super().mean(arm, b)
        r = trend.rate(fit, trend.mid(self, b))
        return r * self.accept.mean if arm == SPEC else r

    def estimable(self, b: int) -> bool:
        """With both fits, every bucket has an estimate (visited or not)."""
        if self._fit[OFF] is not None and self._fit[SPEC] is not None and self.accept.w:
            return True
        return super().estimable(b)

    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        return SPEC if self.mean(SPEC, b) > self.mean(OFF, b) else OFF
