"""Baseline: the behaviour of SGLang's built-in adaptive rule with candidate steps {0, K}.

Re-written from its description (DESIGN.md §2; SGLang's AdaptiveStepSlot): per
batch-size slot, an EMA of accepted draft tokens, a warm-up, an update every
`update_interval` batches, and hysteresis. From steps 0 it always probes K at
the next update (the EMA is not fed while off); at K it drops to 0 when the EMA
falls to 0.5 + down_hysteresis. Acceptance only: it never looks at step time.
"""
from __future__ import annotations

import bisect
from typing import Any, Mapping

from controller.numtext import INT64

from .base import Policy
from .params import ParamSpec
from .summary import monotone_threshold
from .types import Decision, PolicyError, Sample, Snapshot, check_finite, is_number

SLOT_KEYS = (1, 8, 32, 64)   # SGLang's default slot boundaries


class SGLangEMAPolicy(Policy):
    name = "sglang-ema"
    summary = "SGLang's adaptive rule: EMA of accept length per batch-size slot, with hysteresis"
    PARAMS = (
        ParamSpec("ema_alpha", float, 0.2, 0.0, 1.0, "EMA weight of the newest batch"),
        ParamSpec("update_interval", int, 5, 1, 100000, "batches between re-decisions"),
        ParamSpec("warmup_batches", int, 10, 0, 100000, "batches before the first decision"),
        ParamSpec("down_hysteresis", float, -0.25, -10.0, 10.0, "added to the drop threshold 0.5"),
        ParamSpec("up_hysteresis", float, 0.0, -10.0, 10.0, "added to the rise threshold"),
    )

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        # Each slot: [speculating (0/1), ema of accepted drafts, batch count]; starts at K,
        # the EMA at K - 1 as SGLang does (K is learned from the first spec sample).
        self.slots = [[1, 1.0, 0] for _ in SLOT_KEYS]
        self.live = 0

    def slot_of(self, batch_size: int) -> int:
        return max(0, bisect.bisect_right(SLOT_KEYS, batch_size) - 1)

    def observe(self, sample: Sample) -> None:
        if sample.batch_size <= 0:
            return
        i = self.live = self.slot_of(sample.batch_size)
        slot = self.slots[i]
        p = self.params
        if slot[0] and sample.steps > 0:
            accepted = sample.tokens / sample.batch_size - 1.0
            slot[1] = (1 - p["ema_alpha"]) * slot[1] + p["ema_alpha"] * accepted
        slot[2] += 1
        if slot[2] <= p["warmup_batches"] or (slot[2] - p["warmup_batches"]) % p["update_interval"]:
            return
        if not slot[0]:
            slot[0] = 1                          # probe K after an off interval
        elif slot[1] <= 0.5 + p["down_hysteresis"]:
            slot[0] = 0

    def decide(self, snap: Snapshot) -> Decision:
        gains = []
        for b in range(len(self.buckets)):
            i = self.slot_of(self.buckets.high(b))
            weight = 1000.0 if i == self.live else 1.0   # the live slot's state always holds
            gains.append(weight if self.slots[i][0] else -weight)
        t = monotone_threshold(gains, self.buckets, snap.exploit_threshold)
        on = [SLOT_KEYS[i] for i, s in enumerate(self.slots) if s[0]]
        return Decision(t, t, f"EMA slots speculating: {on or 'none'}")

    def state(self) -> dict:
        return {"slots": [list(s) for s in self.slots], "live": self.live}

    def load_state(self, state: Mapping[str, Any]) -> None:
        check_finite(self.name, state)
        slots = state.get("slots")
        if not isinstance(slots, list) or len(slots) != len(SLOT_KEYS) or any(len(s) != 3 for s in slots):
            raise PolicyError(f"policy {self.name}: saved state has {len(slots or [])} slots, expected {len(SLOT_KEYS)}")
        # numbers only (float() read "nan" as text: a NaN EMA, and every later checkpoint refused as non-finite); the
        # switch 0 or 1 and the count integers in range (int() took 1e40 and 2.7 for both)
        if not all(is_number(s[1]) and type(s[0]) is int and s[0] in (0, 1) and type(s[2]) is int and
                   0 <= s[2] <= INT64[1] for s in slots) or type(live := state.get("live", 0)) is not int:
            raise PolicyError(f"policy {self.name}: saved state holds a slot or live slot that is not numbers (a slot: "
                              f"[0 or 1, a number, a count 0 .. {INT64[1]}])")
        self.slots = [[s[0], float(s[1]), s[2]] for s in slots]
        self.live = live % len(SLOT_KEYS)
