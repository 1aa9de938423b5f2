"""When the bandit learners' accept-length estimate is stale for a bucket, and a trial there is worth making
(BucketLearner._arm's shift trials): acceptance is only measured while speculating, so a load that moved into a
bucket left plain at a lower acceptance, or a probe whose batches measure the new traffic while the estimate still
holds the old, would go unseen until the bandit's own uncertainty grew. Functions of the learner (its estimates,
parameters and what it tried when), called with the time."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import OFF, SPEC, relative_gain

if TYPE_CHECKING:
    from .learner import BucketLearner

HALF_LIVES = 2.0   # a stale-acceptance trial only this many accept half-lives after the last measurement


def stale_gain(learner: "BucketLearner", b: int, now: float) -> float | None:
    """Relative gain of speculating in bucket b judged at the highest accept length seen lately, when that calls for
    a trial (else None): the accept-length estimate has just gone stale (its last speculative batch 1 to
    HALF_LIVES accept_half_life_s ago), it was last measured in another bucket after b last speculated
    (the load moved here), b has not speculated for half_life_s, no smaller bucket settles it (dominated) and
    speculation there would pay by the indifference margin at that accept length. Acceptance is only measured
    while speculating: without this trial a move of the load into a bucket left plain at a lower acceptance went
    unseen until the estimate's uncertainty grew (35-48 engine s for thompson on the looped mixed-shift trace's
    later C=96 phases; never for model). Later than the window, or in a bucket tried within half_life_s, the
    bandit's own uncertainty decides as before: open-loop batch sizes wander between buckets, and trials there at
    every staleness raised changes per minute (bench/open_loop_study.py decisions). A shift (Decision.shift) when
    the load came to b in that window after half_life_s without a batch there (no open-loop wander)."""
    accept, hl = learner.accept.mean, learner.params["accept_half_life_s"]
    if (accept <= 0 or not hl < now - learner.accept.t <= HALF_LIVES * hl
            or learner.tried[SPEC][b] >= learner.accept.t or now - learner.tried[SPEC][b] < learner.params["half_life_s"]
            or not learner.estimable(b)):
        return None
    off = learner.mean(OFF, b)
    if off <= 0:
        return None
    gain = relative_gain(learner.mean(SPEC, b) / accept * learner.accept_high(now), off)
    if gain <= learner.params["indifference"] or learner.dominated(SPEC, b, now):
        return None
    return gain


def probe_goes_on(learner: "BucketLearner", b: int, now: float) -> float | None:
    """Relative gain of speculating in b at the acceptance measured since speculation came back there (FreshRun),
    if that probe should go on (else None): begun at most HALF_LIVES accept half-lives ago, no plain
    batch in b since, the estimate still under that acceptance by the indifference margin (it holds the traffic
    before: one tick at batch 12 took chat's 1.7 to 2.19, not coding's 2.6) and at it speculation pays."""
    run, accept, margin, age = learner.run, learner.accept.mean, learner.params["indifference"], now - learner.run.since
    if (run.bucket != b or learner.tried[OFF][b] >= run.since or not 0 < accept * (1.0 + margin) < run.accept
            or not learner.estimable(b) or not 0 <= age <= HALF_LIVES * learner.accept.half_life_s):
        return None
    gain = relative_gain(learner.mean(SPEC, b) / accept * run.accept, learner.mean(OFF, b))
    return gain if gain > margin else None


CLEAR_LOSS = 0.10      # an uncertainty trial of a mode measured this much worse than the other is held back ...
HOLD_FIRST_S = 60.0    # ... this long after the last one in its bucket, twice as long after each (up to HOLD_MAX_S)
HOLD_MAX_S = 960.0


class TrialHold:
    """Per bucket: when the bandit's own uncertainty (not a stale-acceptance trial, nor a probe that goes on) draws a
    trial of the mode measured worse by CLEAR_LOSS, the next such trial there waits HOLD_FIRST_S, then twice as long
    after each, up to HOLD_MAX_S; the load's return to the bucket after half_life_s away starts over. Why: above the
    crossover at constant load nothing speculates, the accept estimate (half-life 4 s) goes stale, and its growing
    uncertainty drew a trial of the live bucket about once a minute even at -26 % to -46 % (H200 12-03d call 3,
    simulator 1.8-2.0 changes a minute at C = 64 / 128): two visible changes each, for a loss confirmed every time.
    A near tie (under CLEAR_LOSS) is never held: that is where the open loop's wandering batch sizes learn."""

    def __init__(self, n: int):
        self.until = [float("-inf")] * n
        self.wait = [HOLD_FIRST_S] * n
        self.spec = [False] * n         # the mode the spacing is for: a loss that changes sides starts over

    def allows(self, b: int, now: float, gain: float | None, want_spec: bool) -> bool:
        """May a trial of the mode `want_spec` names run in b now, given the measured relative gain of speculating
        there? Counts it when it may (the next one then waits): counted when proposed, so a trial the guard or the
        prefill verdict then leaves out counts too (the policy's decide() keeps this as it keeps its random draws)."""
        if gain is None or abs(gain) < CLEAR_LOSS or (gain > 0) == want_spec:
            return True
        if want_spec != self.spec[b]:
            self.start_over(b)
            self.spec[b] = want_spec
        if now < self.until[b]:
            return False
        self.until[b], self.wait[b] = now + self.wait[b], min(2.0 * self.wait[b], HOLD_MAX_S)
        return True

    def start_over(self, b: int) -> None:
        self.until[b], self.wait[b] = float("-inf"), HOLD_FIRST_S
