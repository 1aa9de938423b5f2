"""Time-discounted running statistics (exponential forgetting by half-life in seconds)."""
from __future__ import annotations

import math
from typing import Any, Mapping

from .types import PolicyError, check_finite, is_number


class Discounted:
    """Weighted mean and variance whose weights halve every half_life_s seconds."""

    __slots__ = ("w", "s", "s2", "t", "half_life_s", "max_weight")

    def __init__(self, half_life_s: float, max_weight: float = float("inf")):
        self.half_life_s = half_life_s
        self.max_weight = max_weight
        self.w = self.s = self.s2 = 0.0
        self.t = 0.0

    def add(self, t: float, x: float, weight: float = 1.0) -> None:
        if self.w and t > self.t:
            f = 0.5 ** ((t - self.t) / self.half_life_s)
            self.w *= f
            self.s *= f
            self.s2 *= f
        if t > self.t:
            self.t = t
        if self.w + weight > self.max_weight:   # cap the effective sample size: an EMA floor
            f = max(self.max_weight - weight, 0.0) / self.w
            self.w *= f
            self.s *= f
            self.s2 *= f
        self.w += weight
        self.s += weight * x
        self.s2 += weight * x * x

    def weight(self, now: float) -> float:
        if not self.w or now <= self.t:
            return self.w
        return self.w * 0.5 ** ((now - self.t) / self.half_life_s)

    @property
    def mean(self) -> float:
        return self.s / self.w if self.w else 0.0

    @property
    def rel_sd(self) -> float:
        """Relative standard deviation of one unit of weight (0 when unknown)."""
        if self.w < 2.0 or self.s <= 0.0:
            return 0.0
        m = self.s / self.w
        var = max(self.s2 / self.w - m * m, 0.0)
        return math.sqrt(var) / m

    def to_list(self) -> list[float]:
        return [self.w, self.s, self.s2, self.t]

    def load(self, values: list[float]) -> None:
        self.w, self.s, self.s2, self.t = (float(v) for v in values)


def check_state(policy: str, state: Mapping[str, Any], n_buckets: int) -> None:
    """PolicyError unless a bucket learner's saved state holds Discounted rows for its buckets and the acceptance."""
    check_finite(policy, state)
    for key in ("q_off", "q_spec"):
        rows = state.get(key)
        if not isinstance(rows, list) or len(rows) != n_buckets or any(not stat_row(r) for r in rows):
            raise PolicyError(f"policy {policy}: saved state does not match {n_buckets} buckets ({key})")
    if not stat_row(state.get("accept")):
        raise PolicyError(f"policy {policy}: saved state has no acceptance record")


def stat_row(row: Any) -> bool:
    """A Discounted's [weight, sum, sum of squares, time]: numbers, the weight not negative."""
    return isinstance(row, list) and len(row) == 4 and all(map(is_number, row)) and row[0] >= 0
