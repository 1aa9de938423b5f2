"""The per-bucket learner the bandit policies share (ucb, thompson, model)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, ClassVar, Mapping

from controller.contract import speculates

from . import learner_state, prefill_cost, reasons, reward, staleness, trend
from .base import OFF, SPEC, Policy, relative_gain
from .params import ParamSpec
from .freshrun import FreshRun
from .stats import Discounted
from .summary import flip_threshold, monotone_threshold
from .types import Decision, Sample, Snapshot

HOLD_Z = 1.0           # see BucketLearner._best_threshold
ACCEPT_HIGH_HALF_LIVES = 10.0
SETTLES = 2.5    # the batches (weight at their last run) both modes of a bucket need before it settles another (dominated):
# on the H200 (12-03) two speculative batches at batch 1, the first right after the switch, settled batch 24


class BucketLearner(Policy):
    """Learns, per batch-size bucket, the tokens/s of each mode *at that batch size*.

    Spec throughput is factored as (requests per second of a spec step in this
    bucket) x (current accept length): step time depends on the batch size,
    acceptance on the traffic, so an acceptance shift seen in any bucket moves
    every bucket's estimate at once. Subclasses choose the arm for the live bucket.
    """

    BASE_PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("half_life_s", float, 60.0, 0.5, 3600.0, "forgetting of step-time statistics"),
        ParamSpec("accept_half_life_s", float, 4.0, 0.1, 3600.0, "forgetting of the accept-length estimate"),
        ParamSpec("min_samples", float, 0.01, 0.0, 1000.0, "an arm with less weight than this is tried"),
        ParamSpec("dominance", float, 0.03, 0.0, 10.0,
                  "skip trying spec above (off below) a bucket where it lost (won) by this relative margin"),
        ParamSpec("indifference", float, 0.02, 0.0, 1.0,
                  "probe the other mode of a bucket only if it looks better by this relative margin"),
        ParamSpec("prefill", int, reward.MEASURED, reward.DROP, reward.CORRECTED,
                  "intervals holding a prefill: 0 dropped, 1 rewards as measured, 2 minus the learned prefill cost"),
        ParamSpec("guess", float, 0.1, 0.0, 10.0,
                  "guess a bucket's unmeasured mode from the step-time trend where speculation wins (loses) by this (10: never)"),
    ) + prefill_cost.PARAMS

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        n = len(self.buckets)
        hl = self.params["half_life_s"]
        self.q = ([Discounted(hl) for _ in range(n)], [Discounted(hl) for _ in range(n)])
        # Acceptance moves with the traffic: weighted by requests, its estimate never
        # outweighs the last ~256 requests' accept lengths.
        self.accept = Discounted(self.params["accept_half_life_s"], max_weight=256.0)
        self.tried = ([-math.inf] * n, [-math.inf] * n)   # last time each arm ran in each bucket
        self.max_steps = 1          # K, learned from the samples
        self.prefill_s = Discounted(hl)   # seconds a prefill adds to an interval (prefill=CORRECTED)
        self.accept_hi = (0.0, 0.0)       # (highest accept length lately, when), see accept_high()
        self.arrived = [-math.inf] * n    # when the load came back to each bucket after half_life_s away
        self.run = FreshRun()             # see staleness.probe_goes_on
        self.hold = staleness.TrialHold(n)  # uncertainty trials of a clear loss, spaced out (not saved: transient)
        self.lines: tuple[list, list] = ([None, None], [(0.0, 0.0), (0.0, 0.0)])   # trend.fit_lines, each decision
        self.prefill = prefill_cost.PrefillCost(hl, n)   # what thresholds above 0 cost at each prefill

    def observe(self, sample: Sample) -> None:
        if sample.step_s <= 0 or sample.batch_size <= 0:
            return
        b = self.buckets.of(sample.batch_size)
        arm = SPEC if sample.steps > 0 else OFF
        if sample.t - max(self.tried[OFF][b], self.tried[SPEC][b]) >= self.params["half_life_s"]:
            self.arrived[b] = sample.t
            self.hold.start_over(b)
        if arm == SPEC and sample.t - self.tried[SPEC][b] >= self.params["half_life_s"]:
            self.run.start(b, sample.t)
        # Even an interval that is no reward shows the arm was tried: re-trying costs a batch.
        self.tried[arm][b] = sample.t
        self.prefill.observe(sample, arm, b)
        rate = self.reward(arm, b, sample)
        if rate is None:
            return
        # Weighted by the step's length (relative to the bucket's step), the mean of the rates
        # is total requests over total time: a long interval does not count as one short one.
        q = self.q[arm][b]
        weight = min(max(q.mean / rate, 1.0 / reward.LONG), reward.LONG) if q.w else 1.0
        q.add(sample.t, rate, weight)
        if sample.steps > 0:
            self.accept.add(sample.t, sample.tokens / sample.batch_size, sample.batch_size)
            self.run.add(sample.batch_size, sample.tokens)
            self.accept_hi = (max(self.accept_high(sample.t), self.accept.mean), sample.t)
            if sample.steps > self.max_steps:
                self.max_steps = sample.steps

    def reward(self, arm: int, b: int, sample: Sample) -> float | None:
        return reward.interval_reward(self, arm, b, sample)

    def in_force(self, threshold: int) -> None:
        self.prefill.in_force(threshold)

    def accept_high(self, now: float) -> float:
        """The highest accept length estimated lately: it falls back to the current estimate
        with half-life ACCEPT_HIGH_HALF_LIVES x half_life_s."""
        high, t = self.accept_hi
        if high <= self.accept.mean:
            return self.accept.mean
        h = ACCEPT_HIGH_HALF_LIVES * self.params["half_life_s"]
        return self.accept.mean + (high - self.accept.mean) * 0.5 ** (max(0.0, now - t) / h)

    def accept_stale(self, now: float) -> bool:
        """No speculative batch for accept_half_life_s: the accept length may have moved since."""
        return now - self.accept.t > self.params["accept_half_life_s"]

    # --- estimates -------------------------------------------------------
    def mean(self, arm: int, b: int) -> float:
        q = self.q[arm][b].mean
        return q * self.accept.mean if arm == SPEC else q

    def rel_uncertainty(self, arm: int, b: int, now: float) -> float:
        """Relative sd of the arm's mean estimate. For spec it adds the accept-length
        estimate's own uncertainty, which grows as that estimate goes stale."""
        q = self.q[arm][b]
        var = max(q.rel_sd, 0.02) ** 2 / max(q.weight(now), 1e-9)
        if arm == SPEC:
            var += max(self.accept.rel_sd, 0.02) ** 2 / max(self.accept.weight(now), 1e-9)
        return math.sqrt(var)

    def known(self, arm: int, b: int, now: float) -> bool:
        """Has data, or was tried recently (its samples may all have held a prefill)."""
        return (self.q[arm][b].weight(now) >= max(self.params["min_samples"], 1e-9)
                or now - self.tried[arm][b] < self.params["half_life_s"])

    def estimable(self, b: int) -> bool:
        """Both modes have an estimate in bucket b."""
        return bool(self.q[OFF][b].w and self.q[SPEC][b].w and self.accept.w)

    def gains(self, now: float) -> list[float]:
        """Traffic-weighted relative gain of speculating, per bucket (0 where unknown)."""
        out = []
        for b in range(len(self.buckets)):
            gain = self.gain_at(b, now)
            traffic = self.q[OFF][b].weight(now) + self.q[SPEC][b].weight(now)
            # a guessed bucket without traffic weighs one batch: the threshold goes ahead of the load there
            out.append(0.0 if gain is None else gain * (traffic if self.estimable(b) else max(traffic, 1.0)))
        return out

    def gain_at(self, b: int, now: float) -> float | None:
        """Relative gain of speculating in bucket b: measured, else guessed from the trend (policies.trend), else None."""
        return self.relative(b) if self.estimable(b) else trend.guessed_gain(self, self.lines, b, now)

    def refit(self, now: float) -> None:
        """The step-time lines (policies.trend), a cache of the statistics decide() reads."""
        self.lines = trend.fit_lines(self, now, 2, trend.GUESS_WEIGHT)

    def dominated(self, arm: int, b: int, now: float) -> bool:
        """True when a neighbouring bucket already settles an untried arm: the gain of
        speculating falls as batches grow, so a clear loss below (a clear win above)
        carries over without paying for the trial."""
        margin = self.params["dominance"]
        # A stale accept length may have risen since: then only a loss that would hold even
        # at the longest accept length seen lately (traffic mixes recur) settles it.
        stale = self.accept_stale(now)
        accept = self.accept.mean
        if stale and arm == SPEC:
            accept = max(accept, self.accept_high(now))
        others = range(b) if arm == SPEC else range(b + 1, len(self.buckets))
        for o in others:
            off, spec = self.q[OFF][o], self.q[SPEC][o]
            if min(off.w, spec.w) < SETTLES or min(off.weight(now), spec.weight(now)) < 1e-3:
                continue
            gain = relative_gain(self.q[SPEC][o].mean * accept, self.mean(OFF, o))
            if (arm == SPEC and gain < -margin) or (arm == OFF and gain > margin and not stale):
                return True
        return False

    # --- decision --------------------------------------------------------
    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        """The arm to run in bucket b; the other arm than `incumbent` (the exploit mode there)
        must look better by the indifference margin."""
        raise NotImplementedError

    def relative(self, b: int) -> float | None:
        """Measured relative gain of speculating in bucket b (None without both estimates)."""
        return relative_gain(self.mean(SPEC, b), self.mean(OFF, b)) if self.estimable(b) else None

    def span(self, b: int) -> str:
        return reasons.batches(self.buckets.low(b), self.buckets.high(b))

    def _exploit_reason(self, exploit: int, before: int, b: int, now: float) -> str:
        # the bucket at the edge that moved: the highest now speculated, or the lowest no longer
        edge = self.buckets.index_of_threshold(max(exploit, before)) - 1 if exploit > before else \
            self.buckets.index_of_threshold(exploit)
        edge = min(max(edge, 0), len(self.buckets) - 1)
        return reasons.exploit(exploit, before, self.span(edge), self.gain_at(edge, now), self.span(b),
                               self.gain_at(b, now), (not self.estimable(edge), not self.estimable(b)),
                               b < self.buckets.index_of_threshold(exploit))

    def _best_threshold(self, now: float, current: int, b: int) -> int:
        """The monotone summary of the gains, held at `current` when the move would not change the
        live bucket b's mode and no bucket it crosses tells the modes apart (|relative gain| under
        HOLD_Z standard deviations of its estimate): near a tie in a bucket without live traffic,
        estimation noise otherwise flips the threshold back and forth (94 <-> 105 every few
        seconds in the demo) without changing the mode of any batch that runs."""
        best = monotone_threshold(self.gains(now), self.buckets, current)
        live = self.buckets.high(b)
        if best == current or speculates(live, best) != speculates(live, current):
            return best
        lo, hi = sorted((self.buckets.index_of_threshold(best), self.buckets.index_of_threshold(current)))
        for k in range(lo, hi):
            gain = self.relative(k)
            sd = math.hypot(self.rel_uncertainty(SPEC, k, now), self.rel_uncertainty(OFF, k, now))
            if gain is not None and abs(gain) >= HOLD_Z * sd:
                return best
        return current

    def recent_traffic(self, b: int, now: float) -> float:
        """The batches behind bucket b's estimates, faded by how long ago the bucket last ran
        (half-life accept_half_life_s, the traffic's time scale): where the load is now."""
        tau = self.params["accept_half_life_s"]
        return sum(d.w * 0.5 ** (max(0.0, now - d.t) / tau) for d in (self.q[OFF][b], self.q[SPEC][b]))

    def move_gain(self, now: float, current: int, new: int, gain_of: Callable[[int], float | None] | None = None) -> float:
        """Expected relative throughput gain of moving the threshold from current to new, over the traffic where
        the load is now (> 0: the move pays); gain_of(b): each bucket's gain (default gain_at, guesses included)."""
        a, z = self.buckets.index_of_threshold(current), self.buckets.index_of_threshold(new)
        recent = [self.recent_traffic(b, now) for b in range(len(self.buckets))]
        total = sum(recent)
        if a == z or not total:
            return 0.0
        gain_of = gain_of or (lambda b: self.gain_at(b, now))
        moved = sum(recent[b] * gain for b in range(min(a, z), max(a, z)) if (gain := gain_of(b)) is not None)
        return (moved if z > a else -moved) / total

    def decide(self, snap: Snapshot) -> Decision:
        # A threshold inside a bucket (an operator's initial or fixed one, carried over) runs part of the bucket each
        # way, which the per-bucket arms cannot tell apart (its mode read as the upper edge's: a move to the edge
        # under it looked like no move, and the bucket was never left): decided from the edge under it, the move
        # off it not estimated (the guard's tolerance band would hold it: per bucket it gains nothing)
        edge = self.buckets.edge_at_or_under(snap.exploit_threshold)
        if edge != snap.exploit_threshold:
            return dataclasses.replace(self._decide(dataclasses.replace(snap, exploit_threshold=edge)), gain=None)
        return self._decide(snap)

    def _decide(self, snap: Snapshot) -> Decision:
        self.refit(snap.now)
        b = self.buckets.of(snap.live_batch_size or 1)
        exploit = self._best_threshold(snap.now, snap.exploit_threshold, b)
        decision = self._bandit(snap, exploit, b)      # made every tick (its draws of chance too), then
        zero = prefill_cost.verdict(self, snap, exploit, decision)
        return decision if zero is None else zero       # 0 (or a trial of it): the prefills' draft pass outweighs it

    def _bandit(self, snap: Snapshot, exploit: int, b: int) -> Decision:
        guess = trend.guess_trial(self, snap, exploit, b)
        if guess is not None:       # a trial of the guessed threshold, exploit unchanged: shift trial (guard)
            return Decision(exploit, snap.exploit_threshold, guess, 0.0, True, True)
        threshold, reason, untried, shift = self._arm(snap, exploit, b)
        gain = self.move_gain(snap.now, snap.exploit_threshold, exploit)
        return Decision(threshold, exploit, reason, gain, untried, shift)

    def _arm(self, snap: Snapshot, exploit: int, b: int) -> tuple[int, str, bool, bool]:
        """(threshold, reason, untried?, shift?): exploit, or flip the live bucket b to the arm it wants."""
        in_spec = speculates(self.buckets.high(b), exploit)
        untried = [a for a in (OFF, SPEC) if not self.known(a, b, snap.now)]
        probe = shift = False                  # a trial of an arm never measured here / the load's move calls for
        guess = trend.guessed_gain(self, self.lines, b, snap.now) if len(untried) == 1 else None
        if len(untried) == 1 and self.dominated(untried[0], b, snap.now):
            want = 1 - untried[0]
            why = reasons.settled(want == SPEC)
        elif guess is not None and (guess > 0) == (untried[0] == OFF) and \
                snap.now - self.arrived[b] <= self.params["half_life_s"]:
            want, why = 1 - untried[0], reasons.guessed(guess)       # the trend settles it until measured
        elif untried:
            want, probe = untried[0], True
            why = reasons.unmeasured(self.tried[want][b], snap.now)
        elif not in_spec and ((going := staleness.probe_goes_on(self, b, snap.now)) is not None
                              or (stale := staleness.stale_gain(self, b, snap.now)) is not None):
            # Not marked untried: its learning window doubled changes per minute in the open loop.
            want, shift = SPEC, snap.now - self.arrived[b] <= staleness.HALF_LIVES * self.params["accept_half_life_s"]
            why = (reasons.probe_goes_on(self.accept.mean, self.run.accept, going) if going is not None
                   else reasons.stale_accept(self.accept_high(snap.now), self.accept.mean, stale))
        else:
            want, measured = self.choose_arm(b, snap.now, SPEC if in_spec else OFF), self.relative(b)
            why = reasons.uncertain(measured)
            if (want == SPEC) != in_spec and not self.hold.allows(b, snap.now, measured, want == SPEC):
                want = SPEC if in_spec else OFF
        if (want == SPEC) == in_spec:
            return exploit, self._exploit_reason(exploit, snap.exploit_threshold, b, snap.now), False, False
        explore = flip_threshold(exploit, self.buckets, b, want == SPEC)
        return explore, reasons.trial(want == SPEC, self.span(b), why), probe, shift

    def state(self) -> dict:
        return learner_state.save(self)

    def load_state(self, state: Mapping[str, Any]) -> None:
        learner_state.load(self, state)
