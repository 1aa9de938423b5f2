"""Records that flow into and out of a policy. Immutable, cheap, JSON-friendly."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from controller.contract import Sample  # noqa: F401  (the record both processes share, re-exported)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a policy is told at decision time (time is injected, never read).

    exploit_threshold: the threshold the guard holds as the best one so far (after its bounds,
    stabilisation and rate cap; never an exploratory one): ties break toward it.
    live_batch_size: a batch size in the bucket most decode batches fell in since the last
    decision (the control loop counts them), or None before any was seen.
    prefills_pay_draft: prefills that join a batch which will not speculate run the draft's pass over their
    prompts at thresholds above 0 and skip it at 0 (lean prefill on an off path that writes no draft KV: the
    engine says which), so threshold 0 saves every prefill that pass; False: 0 saves none (with the KV writer
    the pass is skipped at any threshold, without lean prefill it runs at 0 too).
    """

    now: float
    exploit_threshold: int
    max_batch_size: int
    live_batch_size: int | None = None
    prefills_pay_draft: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: the threshold to apply now and the one it believes best.

    threshold != exploit_threshold marks an exploratory decision; the guard
    outside the policy may veto it when the exploration budget is spent.
    gain: what moving from the snapshot's exploit threshold to exploit_threshold is expected
    to add to throughput, relative and weighted by the recent traffic per batch size (None:
    the policy does not estimate it); the guard holds moves that gain too little.
    untried: an exploratory decision for an arm with no data at the live batch size (a cold
    start, a new load): learning, which the guard's change budget does not hold back (it has a small
    bucket of its own at constant load, no limit while the live batch sizes move: controller.control.shift).
    shift: an exploratory decision the load's move calls for: the load came to the live bucket
    lately, after no batch ran there for a while, and its estimate is stale (a stale-acceptance
    trial, policies.staleness stale_gain, or a probe that goes on, probe_goes_on). The guard's
    change budget, there for the noise at constant load, holds neither the trial nor the move to
    its threshold that follows it (the threshold stays when the trial shows it pays); unlike
    untried, no learning window opens.
    whole: a move (or trial) to threshold 0 made for the prefills (policies.prefill_cost: at any threshold above 0
    every prefill pays the draft's pass on an engine whose off path writes no draft KV). It changes every prefill,
    not only the batch sizes it crosses: the guard neither coalesces it nor the end of such a trial, and its cap
    on buckets crossed per decision does not split it (a threshold on the way pays the pass still).
    command: the operator's own threshold (policies fixed / always / never), not an estimate: the guard applies it as
    it is, without stabilisation, rate cap, coalescing or change budget (`policy set fixed --param threshold=12`
    stood at 26 for minutes when no live batch size lay between them: an operator who sets 12 expects 12).
    """

    threshold: int
    exploit_threshold: int
    reason: str
    gain: float | None = None
    untried: bool = False
    shift: bool = False
    whole: bool = False
    command: bool = False

    @property
    def exploratory(self) -> bool:
        return self.threshold != self.exploit_threshold


class PolicyError(ValueError):
    """A bad policy name, parameter or state; the message is one line for the operator."""


# No measurement a state keeps comes near it (a sum of squared tokens/s at the intake's extremes, weighted over the
# longest half-life: < 1e30), and the learners' arithmetic on one far past it overflowed: a state restored with 1e200
# in a bucket's row passed, then every retune raised ('min() arg is an empty sequence': inf - inf), the threshold
# held where a trial had left it, and each checkpoint saved it again (helper-151).
MAX_STATE_NUMBER = 1e50
# The most speculative steps (K) an engine here runs (the daemon's bound of [sglang] speculative_num_steps; a simulator
# profile's spec_steps stays under it): a saved state's step count past it is no measurement.
MAX_SPEC_STEPS = 64


def is_number(value: Any) -> bool:
    """A JSON number as a saved state holds one (True and False are no numbers there)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_finite(policy: str, state: Any, where: str = "state") -> None:
    """PolicyError if a saved state holds a NaN, an infinity or a number past MAX_STATE_NUMBER anywhere: restoring one
    would poison every later decision (and every later checkpoint)."""
    if isinstance(state, float) and not math.isfinite(state):
        raise PolicyError(f"policy {policy}: saved {where} holds a non-finite number ({state})")
    if is_number(state) and not abs(state) <= MAX_STATE_NUMBER:
        raise PolicyError(f"policy {policy}: saved {where} holds a number past {MAX_STATE_NUMBER:g}: no measurement")
    if isinstance(state, dict):
        for key, value in state.items():
            check_finite(policy, value, f"{where}.{key}")
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            check_finite(policy, value, f"{where}[{i}]")
