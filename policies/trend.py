"""The step-time trend of each mode across the buckets, and what it says about a bucket's unmeasured mode.

Per mode, step_s = a + c * batch_size (non-negative a, c; weighted least squares over the buckets with data,
recent ones weighing more). The model policy predicts every bucket from these lines. The bandit learners use
them only to guess (BucketLearner.guessed): where a bucket lacks one mode's measurement or both, the lines stand
in for what is missing, and a guess counts only where it says speculation wins (or loses) by the `guess` margin.
That is the climb after a load step (crossover-b at 4 -> 28 req/s: batch sizes 10 -> 83 in ~4 s, every bucket
above the threshold never measured): without the guess each new bucket ran plain first and was probed with
speculation a tick later, which lagged the climb (bench/results/open-loop-sim.md, section 6). Functions of the
learner (its statistics and parameters), called with the time."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from controller.contract import speculates

from . import reasons
from .base import OFF, SPEC, relative_gain
from .types import Snapshot

if TYPE_CHECKING:
    from .learner import BucketLearner

Line = np.ndarray      # [a, c]: step seconds = a + c * batch size
# What a guess rests on: buckets holding more than this many batches' weight of a mode. Fewer are often one
# interval that held a prefill or an idle gap (h200-7b-open at 2 req/s: a plain probe's single batch at 0.76 s),
# and a line through them made plain decoding look 3x slower than it is.
GUESS_WEIGHT = 5.0
# A guess that speculation pays reaches no further than this many times the largest batch size the line rests
# on (one that it loses reaches anywhere: plain decoding is the safe mode). Further out, lines through a few
# small batch sizes went wrong: h200-7b-open-tl2-kv at 2 req/s, speculation measured at batch
# 1-3 only (nearly flat there, it jumps at 5 and 9), guessed +10 % or more up to batch 29, where it loses 33 %.
# A guess that speculation loses reaches no lower than the smallest batch size its line rests on: below the
# data the intercept (the fixed cost of a step) is unconstrained, and speculation only gains towards batch 1.
# On the H200 (12-02f, a closed loop of 24: both modes measured at 11-26 only) the lines guessed -55 % at
# batch 1, where speculation wins ~+80 %, and the bandit fell 23 -> 11 "heading for 0" twice a minute.
REACH = 4.0


def mid(learner: "BucketLearner", b: int) -> float:
    """The batch size standing for bucket b on the lines: its middle."""
    return (learner.buckets.low(b) + learner.buckets.high(b)) / 2.0


def fit_lines(learner: "BucketLearner", now: float, min_buckets: int,
              min_weight: float = 1e-6) -> tuple[list[Line | None], list[tuple[float, float]]]:
    """([off line, spec line], [the smallest and largest batch size each rests on]) through the buckets holding
    at least min_weight of a mode; no line (None, (0, 0)) for a mode with fewer than min_buckets of them. The
    spec line is the step time of a speculative step, whatever it accepts (the accept length multiplies its rate
    apart)."""
    from scipy.optimize import lsq_linear  # here, not at import: specctl starts in a blink
    n = len(learner.buckets)
    bs = np.array([mid(learner, i) for i in range(n)])
    out: list[Line | None] = []
    spans: list[tuple[float, float]] = []
    for arm in (OFF, SPEC):
        w = np.array([d.weight(now) for d in learner.q[arm]])
        q = np.array([d.mean for d in learner.q[arm]])
        seen = (w > min_weight) & (q > 0)
        if seen.sum() < min_buckets:
            out.append(None)
            spans.append((0.0, 0.0))
            continue
        sw = np.sqrt(w[seen])
        design = np.stack([np.ones(int(seen.sum())), bs[seen]], axis=1) * sw[:, None]
        target = (bs[seen] / q[seen]) * sw            # step seconds at that batch size
        out.append(lsq_linear(design, target, bounds=(0.0, np.inf)).x)
        held = np.flatnonzero(seen)
        spans.append((float(learner.buckets.low(int(held[0]))), float(learner.buckets.high(int(held[-1])))))
    return out, spans


def rate(line: Line, batch_size: float) -> float:
    """Requests per second of a step at this batch size on the line (0 where the line gives no time)."""
    step_s = line[0] + line[1] * batch_size
    return batch_size / step_s if step_s > 0 else 0.0


def guessed_gain(learner: "BucketLearner", fit: tuple[list[Line | None], list[tuple[float, float]]], b: int,
                 now: float) -> float | None:
    """Relative gain of speculating in bucket b with the lines (fit_lines at GUESS_WEIGHT) standing in for the
    mode(s) b has no data for, or no more than GUESS_WEIGHT, when that says speculation wins or loses by the
    learner's `guess` margin (else None). With the accept length stale, as in BucketLearner.dominated: a loss
    must hold at the highest accept length seen lately and a win is not guessed (a plain guess measures no
    acceptance: on the mixed-shift trace the C=96 phase at accept 3.4 stayed plain, guessed at the 2.0 before). None where b has both estimates (measured), where a line it needs
    is missing, or without an accept length; a gain > 0 only where the lines reach b (REACH), a gain < 0 only
    at or above the smallest batch size of each line it uses."""
    if learner.estimable(b) or not learner.accept.w:
        return None
    lines, spans = fit
    rates, far, below = [], False, False
    for arm in (OFF, SPEC):
        q, line = learner.q[arm][b], lines[arm]
        if q.weight(now) > GUESS_WEIGHT:
            rates.append(q.mean)
        elif line is None:
            return None
        else:
            rates.append(rate(line, mid(learner, b)))
            far = far or learner.buckets.low(b) > REACH * spans[arm][1]
            below = below or learner.buckets.high(b) < spans[arm][0]
    stale = learner.accept_stale(now)
    gain = relative_gain(rates[SPEC] * learner.accept.mean, rates[OFF])
    if gain < 0 and stale:
        gain = relative_gain(rates[SPEC] * max(learner.accept.mean, learner.accept_high(now)), rates[OFF])
    if rates[OFF] <= 0 or abs(gain) < learner.params["guess"] or (gain > 0 and (far or stale)) \
            or (gain < 0 and below):
        return None
    return gain


def guess_trial(learner: "BucketLearner", snap: Snapshot, exploit: int, b: int) -> str | None:
    """The reason for a trial of `exploit` when the guess alone moves the live bucket b to the other mode than
    the snapshot's exploit threshold puts it in (a mode never measured there), else None: the threshold goes
    ahead of a climbing load at once, not bucket by bucket through the guard's stabilisation window and rate
    cap; a tick later the measured gain makes it the exploit threshold (the guard's shift trial that pays)."""
    live = learner.buckets.high(b)
    if speculates(live, exploit) == speculates(live, snap.exploit_threshold):
        return None
    gain = guessed_gain(learner, learner.lines, b, snap.now)
    if gain is None or (gain > 0) != speculates(live, exploit) or learner.known(SPEC if gain > 0 else OFF, b, snap.now):
        return None
    lo, hi = sorted((exploit, snap.exploit_threshold))
    return reasons.trial(gain > 0, reasons.batches(lo + 1, hi), reasons.guessed(gain))
