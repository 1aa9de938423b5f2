"""What one decode interval is worth to a bucket learner (requests per second of its step), or why it is none.

At high load almost every interval holds a prefill. Used as measured (the default), a mode is charged with the
prefills that join its batches: how often they come and what they cost with it (a longer step gathers more
arrivals into one extend batch) is part of its throughput; the simulator's open loop shows the difference
(bench/results/open-loop-sim.md). Intervals far longer than the bucket's step held an idle gap and are dropped."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import SPEC
from .types import Sample

if TYPE_CHECKING:
    from .learner import BucketLearner

DROP, MEASURED, CORRECTED = 0, 1, 2      # what an interval that held a prefill is worth (param `prefill`)
LONG = 4.0       # a prefill interval this many times the bucket's decode step held an idle gap: no reward


def interval_reward(learner: "BucketLearner", arm: int, b: int, sample: Sample) -> float | None:
    """Requests per second of this batch's step in bucket b, or None when the interval is no reward."""
    rate = sample.batch_size / sample.step_s
    mode, q = learner.params["prefill"], learner.q[arm][b]
    if sample.decode_only:
        return rate
    if mode == DROP or rate * LONG < usual_rate(learner, arm, b, sample.steps):
        return None
    if mode == MEASURED:
        return rate
    if not q.w:
        return None
    decode_s = sample.batch_size / q.mean
    learner.prefill_s.add(sample.t, sample.step_s - decode_s)
    return sample.batch_size / max(sample.step_s - learner.prefill_s.mean, decode_s / LONG)


def usual_rate(learner: "BucketLearner", arm: int, b: int, steps: int) -> float:
    """The rate an interval of this arm in bucket b is checked against for an idle gap: its own estimate; before it
    has one, the other mode's (a speculative step of K drafts and a verify takes at most K + 1 plain steps, a plain
    step no longer than a speculative one); 0 (nothing to check against) without either. Without it, the first
    interval of a mode that held an idle gap was its whole estimate (the H200, 12-03: 4.9 s at batch 1 made
    speculation 90 % worse there and settled every larger batch size as a loss without a trial)."""
    if learner.q[arm][b].w:
        return learner.q[arm][b].mean
    other = learner.q[1 - arm][b]
    if not other.w:
        return 0.0
    return other.mean / (max(learner.max_steps, steps) + 1) if arm == SPEC else other.mean
