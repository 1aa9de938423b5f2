"""Mechanism around every policy: bounds, stabilisation, rate cap, exploration budget, fallback.

Like Kubernetes' HPA and Ray Serve's autoscaler, the policy only recommends;
this wrapper decides how far and how fast the applied threshold may follow.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields
from typing import Any, Mapping

from policies.buckets import Buckets
from policies.types import Decision, PolicyError


class GuardConfigError(ValueError):
    pass


@dataclass(frozen=True)
class GuardConfig:
    min_threshold: int = 0
    max_threshold: int = 65536          # clipped to the engine's max batch size
    stabilisation_s: float = 0.5        # a move must be backed by every proposal this long
    max_step_buckets: int = 8           # cap on buckets crossed per decision (exploit moves)
    explore_share: float = 0.05         # at most this share of batches under exploratory thresholds
    explore_window_s: float = 120.0     # ... measured over a window this long (half-life)
    fallback_after_s: float = 10.0      # no samples for this long -> fallback threshold
    fallback_threshold: int = 0

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> "GuardConfig":
        known = {f.name: f for f in fields(cls)}
        out = {}
        for key, raw in (values or {}).items():
            if key not in known:
                raise GuardConfigError(f"unknown guard setting {key!r} (known: {', '.join(known)})")
            kind = int if known[key].type in ("int", int) else float
            try:
                out[key] = kind(raw)
            except (TypeError, ValueError):
                raise GuardConfigError(f"guard setting {key}={raw!r} is not a valid {kind.__name__}") from None
        cfg = cls(**out)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        checks = [
            ("min_threshold", 0 <= self.min_threshold <= self.max_threshold, "0 .. max_threshold"),
            ("stabilisation_s", 0 <= self.stabilisation_s <= 3600, "0 .. 3600"),
            ("max_step_buckets", 1 <= self.max_step_buckets <= 1000, "1 .. 1000"),
            ("explore_share", 0 <= self.explore_share <= 1, "0 .. 1"),
            ("explore_window_s", 1 <= self.explore_window_s <= 86400, "1 .. 86400"),
            ("fallback_after_s", 0.1 <= self.fallback_after_s <= 86400, "0.1 .. 86400"),
            ("fallback_threshold", self.fallback_threshold >= 0, ">= 0"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise GuardConfigError(f"guard setting {name}={getattr(self, name)!r} out of range (allowed {allowed})")


class Guard:
    """Turns a policy's Decision into the threshold actually applied."""

    def __init__(self, config: GuardConfig, buckets: Buckets, initial: int):
        if isinstance(initial, bool) or not isinstance(initial, int) or initial < 0:
            raise PolicyError(f"guard: initial threshold {initial!r} is not a batch size")   # e.g. a NaN restored
        self.cfg = config
        self.buckets = buckets
        self.hi = min(config.max_threshold, buckets.edges[-1])
        self.exploit = self.clamp(initial)
        self._proposals: deque[tuple[float, int]] = deque()
        self._batches = 0.0          # discounted batch counts, for the exploration budget
        self._explored = 0.0
        self._t = None

    def clamp(self, t: int) -> int:
        return max(self.cfg.min_threshold, min(self.hi, int(t)))

    def account(self, now: float, batches: int, exploratory: bool) -> None:
        """Count the batches run since the last decision and whether they were exploratory."""
        if self._t is not None and now > self._t:
            f = 0.5 ** ((now - self._t) / self.cfg.explore_window_s)
            self._batches *= f
            self._explored *= f
        self._t = now
        self._batches += batches
        if exploratory:
            self._explored += batches

    @property
    def explore_used(self) -> float:
        return self._explored / self._batches if self._batches else 0.0

    def _stabilised(self, now: float, proposal: int) -> int:
        self._proposals.append((now, proposal))
        while self._proposals and self._proposals[0][0] < now - self.cfg.stabilisation_s:
            self._proposals.popleft()
        values = [p for _, p in self._proposals]
        if all(v > self.exploit for v in values):
            return min(values)
        if all(v < self.exploit for v in values):
            return max(values)
        return self.exploit

    def _rate_capped(self, target: int) -> int:
        cur_k = self.buckets.index_of_threshold(self.exploit)
        tgt_k = self.buckets.index_of_threshold(target)
        step = self.cfg.max_step_buckets
        if abs(tgt_k - cur_k) <= step:
            return target
        k = cur_k + step if tgt_k > cur_k else cur_k - step
        return 0 if k <= 0 else self.buckets.high(k - 1)

    def apply(self, now: float, decision: Decision, last_sample_t: float | None) -> tuple[int, str, bool]:
        """(threshold to apply, reason, exploratory?) for this decision tick."""
        if last_sample_t is None or now - last_sample_t > self.cfg.fallback_after_s:
            quiet = "no samples yet" if last_sample_t is None else f"no samples for {now - last_sample_t:.1f}s"
            return self.clamp(self.cfg.fallback_threshold), f"fallback: {quiet}", False
        wanted = self.clamp(decision.exploit_threshold)
        self.exploit = self.clamp(self._rate_capped(self._stabilised(now, wanted)))
        if decision.exploratory:
            if self.explore_used < self.cfg.explore_share:
                return self.clamp(decision.threshold), decision.reason, True
            return self.exploit, f"exploit (exploration budget {self.cfg.explore_share:.0%} spent)", False
        held = f" (guard: on the way to {wanted})" if self.exploit != wanted else ""
        return self.exploit, decision.reason + held, False
