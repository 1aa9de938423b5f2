"""The guard's settings ([guard] in the daemon's config): what each mechanism around a policy may do, checked
in one place (GuardConfig.from_mapping: unknown keys, types, ranges)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from ..closename import close_hint
from ..contract import MAX_BATCH
from ..numtext import a_kind, not_a_number, plain, shown


class GuardConfigError(ValueError):
    pass


HOLD = -1       # fallback_threshold: keep the learned (exploit) threshold while no samples come


@dataclass(frozen=True)
class GuardConfig:
    min_threshold: int = 0
    max_threshold: int = MAX_BATCH          # clipped to the engine's max batch size
    stabilisation_s: float = 0.5        # a move must be backed by every proposal this long
    max_step_buckets: int = 8           # cap on buckets crossed per decision (exploit moves)
    explore_share: float = 0.05         # at most this share of batches under exploratory thresholds
    explore_window_s: float = 120.0     # ... measured over a window this long (half-life)
    fallback_after_s: float = 10.0      # no samples for this long -> fallback threshold ...
    fallback_threshold: int = HOLD      # ... or, HOLD (-1), the learned threshold without any trial: an idle
                                        # engine sends none, and a fixed fallback ran the next quiet request's
                                        # first batches in the wrong mode (bandit at 0.05 req/s: 37 % speculated)
    min_gain: float = 0.003             # an exploit move the policy expects to gain less is not made
    coalesce_window_s: float = 10.0     # a change that moves no batch size seen this long is not made (0: off)
    changes_per_min: float = 1.0        # visible changes allowed on average (token bucket; 0: no limit) ...
    changes_burst: float = 6.0          # ... and at once
    trial_reserve: float = 1.0          # a charged trial (two tokens) must leave this many for the exploit move it
                                        # calls for (at most changes_burst - 2: a burst of 2 still allows one trial)
    urgent_gain: float = 0.05           # an exploit move expected to gain this much is never held back
    learning_s: float = 20.0            # ... nor any change this long after a probe of an untried arm
    flap_s: float = 60.0                # ... nor a move reversing one this recent, nor a probe repeating one
    untried_per_min: float = 0.25       # probes of an untried arm let through free of the change budget (bucket) ...
    untried_burst: float = 2.0          # ... and at once; past it a probe is charged like any trial
    shift_ratio: float = 2.0            # ... except while the live batch sizes move this far (controller.control.shift)

    @property
    def trial_reserve_used(self) -> float:
        """trial_reserve as the guard applies it: at most what the burst leaves over a trial's two tokens."""
        return min(self.trial_reserve, max(0.0, self.changes_burst - 2.0))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None,
                     homes: Mapping[str, Iterable[str]] | None = None) -> "GuardConfig":
        """homes: the other sections' keys (the daemon's config), for one of theirs given here."""
        known = {f.name: f for f in fields(cls)}
        out = {}
        for key, raw in (values or {}).items():
            if key not in known:
                hint = close_hint(key, known, homes, sections=homes or ())    # (stabilization_s: US spelling;
                # [guard] storage = 1: '[storage] is a section of its own', as every other section's refusal says)
                raise GuardConfigError(f"unknown guard setting {key!r} ({hint}known: {', '.join(known)})")
            kind = int if known[key].type in ("int", int) else float
            # a number, taken as it is: int() and float() turned true into 1, "5" into 5, 1.7 into 1, and raised
            # OverflowError (a traceback, not a config error) for an integer setting of inf; an integer setting's a
            # TOML integer, as every other section's (5.0 was taken here and refused in [sim] and the API)
            why = not_a_number(key, raw, kind)      # (the config's one number check: every section's words)
            if why is None:
                try:
                    out[key] = kind(raw)
                except OverflowError:               # (an integer past a float's range)
                    why = f"must be {a_kind(kind)}"
            if why:
                raise GuardConfigError(f"guard setting {key}={shown(raw)} {why}")
        cfg = cls(**out)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        checks = [
            # (thresholds: at most MAX_BATCH, what every other boundary and the plugin take; a min_threshold of 1e20
            # was applied, its history rows failed to write, and SGLang's plugin refused every threshold)
            ("max_threshold", 0 <= self.max_threshold <= MAX_BATCH, f"0 .. {MAX_BATCH}"),
            ("min_threshold", 0 <= self.min_threshold <= self.max_threshold,      # (its value: 'max_threshold' alone
             f"0 .. max_threshold, {self.max_threshold}"),                       # did not say what it was set to)
            ("stabilisation_s", 0 <= self.stabilisation_s <= 3600, "0 .. 3600"),
            ("max_step_buckets", 1 <= self.max_step_buckets <= 1000, "1 .. 1000"),
            ("explore_share", 0 <= self.explore_share <= 1, "0 .. 1"),
            ("explore_window_s", 1 <= self.explore_window_s <= 86400, "1 .. 86400"),
            ("fallback_after_s", 0.1 <= self.fallback_after_s <= 86400, "0.1 .. 86400"),
            ("fallback_threshold", HOLD <= self.fallback_threshold <= MAX_BATCH,
             f"{HOLD} (hold the learned threshold) or 0 .. {MAX_BATCH}"),
            ("coalesce_window_s", 0 <= self.coalesce_window_s <= 86400, "0 .. 86400"),
            ("min_gain", 0 <= self.min_gain <= 1, "0 .. 1"),
            ("changes_per_min", 0 <= self.changes_per_min <= 6000, "0 .. 6000"),
            ("changes_burst", 2 <= self.changes_burst <= 1000, "2 .. 1000"),
            ("trial_reserve", 0 <= self.trial_reserve <= 1000, "0 .. 1000"),
            ("urgent_gain", 0 <= self.urgent_gain <= 10, "0 .. 10"),
            ("learning_s", 0 <= self.learning_s <= 3600, "0 .. 3600"),
            ("flap_s", 0 <= self.flap_s <= 86400, "0 .. 86400"),
            ("untried_per_min", 0 <= self.untried_per_min <= 6000, "0 .. 6000"),
            ("untried_burst", 1 <= self.untried_burst <= 1000, "1 .. 1000"),
            ("shift_ratio", self.shift_ratio == 0 or 1 < self.shift_ratio <= 1000, "0 (off) or > 1 .. 1000"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise GuardConfigError(f"guard setting {name}={plain(getattr(self, name))} out of range (allowed {allowed})")
