"""What every threshold above 0 costs at each prefill, and when threshold 0 beats the bandit's best one.

An engine whose off path writes no draft KV (off path `fast`) runs the draft's pass over every prefill's prompt
at any threshold above 0 (controller.contract.prefill_skips_draft), in whichever mode the batch it joins runs.
Every bucket's two modes pay it alike, so no per-bucket comparison sees it: on h200-7b-open-tl2 at 12 req/s it
was 5 % of median TPOT while speculation gained ~1 % (bench/results/open-loop-sim.md, sections 6c-6e).

The measurement compares like with like: a prefill interval's excess is its step over the decode-only step of
the same bucket, in plain decoding (the only mode that runs at 0), under the same regime (threshold 0, or above
0). The excess above 0 (the last RECENT_S) minus the excess during a stretch at 0 is what the draft's pass adds
to a prefill interval. Comparing across modes instead (a stretch at 0 runs every batch plain, one above 0 runs
the small ones speculatively) read the shorter plain steps as a surcharge (crossover-b closed loop C=4, 6d).
Intervals that held an idle gap (a light load's batch runs dry) are outliers of seconds, left out (ROBUST x the
median); an engine that chains extends puts one to five in an interval, so the pass's cost is read from the lean
intervals (one extend: `lean`) less Z standard errors, times the extends an interval holds (`pass_cost`). A
measurement holds for COST_HALF_LIVES x half_life_s (the pass is the engine's), but only near the prefill rate it
was taken at (RATE_RATIO: more arrivals per interval chain more extends into it). Times the prefill intervals per
second, it is the surcharge of every threshold above 0, weighed against speculation's gain from the decode-only
steps (`decode_gain`: the learner's estimates hold prefills and idle gaps). Where there is no measurement at this
rate and the prefills' whole excess could outweigh that gain, the policy tries threshold 0 (a trial the guard
bounds like any other) until it has seen PROBE prefill intervals there. Where the off path skips the pass (`kv`)
the difference is ~0 and the bandit's threshold stands. Functions of the learner, called with the time."""
from __future__ import annotations

import math
import statistics
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

from .base import OFF, SPEC
from .params import ParamSpec
from .stats import Discounted, stat_row
from .types import Decision, Sample, Snapshot, is_number

if TYPE_CHECKING:
    from .learner import BucketLearner

RECENT_S = 10.0         # the excess above 0 a stretch at 0 is compared with: the last RECENT_S (the current load)
COST_HALF_LIVES = 10.0  # the measured difference is the engine's: it outlives the traffic's statistics
PROBE = 24              # prefill intervals a stretch at 0 (and the recent ones above 0) must hold to be a measurement
ROBUST = 6.0            # an excess over ROBUST x the regime's median held an idle gap: not counted
LEAN = 1.5              # the leanest prefill intervals: an excess within LEAN x the regime's 10th percentile
Z = 2.0                 # the measured difference counts from Z standard errors above 0 (its lower bound)
RATE_RATIO = 1.5        # a measurement stands while the prefill rate is within this factor of the one it was taken at
KEEP = 512              # prefill intervals kept per regime
PROBE_S = 10.0          # a trial at 0 that has not seen PROBE prefill intervals by then ends unmeasured ...
PROBE_GAP_S = 60.0      # ... and the next one waits this long (a trial the guard cut short: its rows are kept)
ZERO_KEEP_S = 180.0     # how long plain prefill intervals at 0 are kept for a measurement

PARAMS = (
    ParamSpec("zero_margin", float, 0.01, 0.0, 10.0,
              "threshold 0 when the prefill surcharge of thresholds above 0 exceeds speculation's gain by this (10: never)"),
)


def robust_mean(values: list[float]) -> float:
    """The mean of the values within ROBUST x their median (all of them when the median is not positive)."""
    med = statistics.median(values)
    return statistics.fmean([v for v in values if med <= 0 or v <= ROBUST * med])


def lean(values: list[float]) -> tuple[float, float]:
    """The mean of the leanest values (within LEAN x their 10th percentile: intervals that held one extend) and its
    squared standard error. Others held two or more (an engine that takes arrivals during an extend into another
    before the next decode: profile key chained_extends), and how many is the load's noise, not the threshold's."""
    low = sorted(values)[len(values) // 10]
    kept = [v for v in values if low <= 0 or v <= LEAN * low]
    return statistics.fmean(kept), (statistics.variance(kept) / len(kept) if len(kept) > 1 else 0.0)


def pass_cost(above: list[float], zero: list[float]) -> float:
    """Seconds the draft's pass adds to a prefill interval above 0: the lean intervals' difference (one extend
    each), less Z standard errors (where it is noise, it reads <= 0), times the extends an interval above 0 holds
    (its mean excess over a lean one's)."""
    (a, se_a), (z, se_z) = lean(above), lean(zero)
    return (a - z - Z * math.sqrt(se_a + se_z)) * (robust_mean(above) / a if a > 0 else 1.0)


class PrefillCost:
    """Per regime (0 / above 0): plain decode-only steps per bucket, the plain prefill intervals (time, bucket,
    step); the measured difference, the prefill rate it was taken at, and prefill intervals per second lately."""

    def __init__(self, half_life_s: float, n_buckets: int):
        self.decode = tuple([Discounted(half_life_s) for _ in range(n_buckets)] for _ in range(2))  # [zero?][b]
        self.steps = tuple([Discounted(half_life_s) for _ in range(n_buckets)] for _ in range(2))   # [arm][b]
        self.above: deque[tuple[float, int, float]] = deque(maxlen=KEEP)
        self.at_zero: deque[tuple[float, int, float]] = deque(maxlen=KEEP)  # stretches at 0 since the last measurement
        self.cost = Discounted(COST_HALF_LIVES * half_life_s)   # above minus at 0, seconds per prefill interval
        self.cost_rate = 0.0                      # the prefill rate the last measurement was taken at
        self.rate = Discounted(RECENT_S)          # prefill intervals per second (weight: seconds), lately
        self.zero = False                         # the threshold in force is 0
        self.measured = False                     # the current stretch at 0 made its measurement
        self.since: float | None = None           # when the current stretch at 0 ran its first batch
        self.last_t = 0.0                         # the last sample's time
        self.unmeasured_t = -PROBE_GAP_S          # when a stretch at 0 last ended without a measurement

    def in_force(self, threshold: int) -> None:
        """The threshold the engine runs from now on: a stretch at 0 starts or ends."""
        if (threshold == 0) != self.zero:
            self.zero = threshold == 0
            if not self.zero and not self.measured:
                self.unmeasured_t = self.last_t
            self.measured, self.since = False, None

    def observe(self, sample: Sample, arm: int, b: int) -> None:
        prefill = not sample.decode_only
        self.last_t = sample.t
        if self.zero and self.since is None:
            self.since = sample.t
        self.rate.add(sample.t, (1.0 / sample.step_s) if prefill else 0.0, sample.step_s)
        if not prefill:
            self.steps[arm][b].add(sample.t, sample.step_s)
        if arm != OFF:
            return
        if not prefill:
            self.decode[self.zero][b].add(sample.t, sample.step_s)
        elif not self.zero:
            self.above.append((sample.t, b, sample.step_s))
        elif not self.measured:
            self.at_zero.append((sample.t, b, sample.step_s))
            self._measure(sample.t)

    def excess(self, rows: list[tuple[float, int, float]] | deque, zero: bool) -> list[float]:
        """Each prefill interval's step over its bucket's plain decode-only step in the same regime."""
        decode = self.decode[zero]
        return [step - decode[b].mean for _, b, step in rows if decode[b].w >= 1.0]

    def recent_above(self, now: float) -> list[float]:
        while self.above and self.above[0][0] < now - RECENT_S:
            self.above.popleft()
        return self.excess(self.above, False)

    def _measure(self, now: float) -> None:
        while self.at_zero and self.at_zero[0][0] < now - ZERO_KEEP_S:
            self.at_zero.popleft()
        zero = self.excess(self.at_zero, True)
        above = self.recent_above(now) if len(zero) >= PROBE else []
        if len(above) >= PROBE:     # the stretch's first PROBE intervals are one measurement
            self.cost.add(now, pass_cost(above, zero))
            self.cost_rate, self.measured = self.rate.mean, True
            self.at_zero.clear()

    def surcharge(self, now: float) -> float | None:
        """Share of the time every threshold above 0 loses to the draft's prompt pass (None: not measured at
        this prefill rate lately)."""
        rate = self.rate.mean
        if self.cost.weight(now) < 0.5 or not self.cost_rate / RATE_RATIO <= rate <= self.cost_rate * RATE_RATIO:
            return None
        return max(self.cost.mean, 0.0) * rate

    def bound(self, now: float) -> float | None:
        """The surcharge were all of a prefill's excess the draft's (None: too few plain prefill intervals lately)."""
        above = self.recent_above(now)
        return max(robust_mean(above), 0.0) * self.rate.mean if len(above) >= PROBE else None

    def state(self) -> dict:
        """What a restart resumes from: the measurement, and the decode-only steps speculation's gain and every
        excess are read against (without them the verdict waits for a bucket's new samples after a restart)."""
        return {"cost": self.cost.to_list(), "cost_rate": self.cost_rate, "rate": self.rate.to_list(),
                **{key: [[d.to_list() for d in row] for row in getattr(self, key)] for key in ("decode", "steps")}}

    def load_state(self, state: Any) -> None:
        """Each part that matches (an older or another-sized state's other parts start empty)."""
        if not isinstance(state, Mapping):
            return
        for key in ("cost", "rate"):
            if stat_row(state.get(key)):
                getattr(self, key).load(state[key])
        if is_number(state.get("cost_rate")):
            self.cost_rate = float(state["cost_rate"])
        for key in ("decode", "steps"):
            rows, mine = state.get(key), getattr(self, key)
            if isinstance(rows, list) and len(rows) == 2 and all(
                    isinstance(r, list) and len(r) == len(m) and all(map(stat_row, r)) for r, m in zip(rows, mine)):
                for r, m in zip(rows, mine):
                    for row, d in zip(r, m):
                        d.load(row)


def decode_gain(learner: "BucketLearner", b: int) -> float | None:
    """Bucket b's gain of speculating from its decode-only steps (accept length x plain step / speculative step,
    minus 1): what speculation itself adds, the prefills' part of each mode aside. The learner's estimates hold
    the prefill intervals and, after a light load, its idle gaps (-tl2 at 2 req/s: +612 % at batch 12)."""
    plain, spec = learner.prefill.steps[OFF][b], learner.prefill.steps[SPEC][b]
    # (a step's mean is never 0 but in a state edited by hand, restored: every retune's ZeroDivisionError; helper-151)
    if not (plain.w and spec.w and learner.accept.w) or not spec.mean > 0.0:
        return None
    gain = learner.accept.mean * plain.mean / spec.mean - 1.0
    return gain if math.isfinite(gain) else None


def verdict(learner: "BucketLearner", snap: Snapshot, exploit: int, bandit: Decision) -> Decision | None:
    """Threshold 0 instead of the bandit's `exploit` when the surcharge outweighs speculation's gain there by
    zero_margin (staying at 0 while it outweighs it at all: hysteresis), or a trial at 0 when the surcharge is
    unknown and the prefills' whole excess could outweigh that gain (a shift trial: kept at once when it shows
    that 0 pays); else None (the bandit's decision). At 0 the bandit's trials go on (exploit 0): without them it
    would never see a bucket where speculation pays more than the pass costs."""
    cost, margin, at = learner.prefill, learner.params["zero_margin"], snap.exploit_threshold
    # Where off batches' prefills skip the pass (off path kv) a stretch at 0 differs from one above it only by
    # noise: on the H200 at constant load it read +1.5 % then <= 0 and flipped 0 <-> 23 (h200-2026-12-03c).
    if exploit == 0 or margin >= 10.0 or not snap.prefills_pay_draft:
        return None
    trial = cost.zero and at > 0                        # a trial at 0 is in force
    if trial and not cost.measured:
        return _probe(learner, snap, exploit) if cost.since is None or snap.now - cost.since < PROBE_S else None
    gain = learner.move_gain(snap.now, 0, exploit, lambda b: decode_gain(learner, b))
    surcharge = cost.surcharge(snap.now)
    if surcharge is None:
        bound = cost.bound(snap.now)
        wait = snap.now - cost.unmeasured_t < PROBE_GAP_S
        return _probe(learner, snap, exploit) if not (trial or wait) and bound is not None and bound > gain + margin \
            else None
    if surcharge <= gain + (0.0 if at == 0 else margin):
        return None
    if at == 0 and bandit.exploratory:
        return Decision(bandit.threshold, 0, bandit.reason, 0.0, bandit.untried, bandit.shift)
    gain_now = learner.move_gain(snap.now, 0, at, lambda b: decode_gain(learner, b)) if at else 0.0
    return Decision(0, 0, _why(surcharge, gain), surcharge - gain_now, whole=True)


def _probe(learner: "BucketLearner", snap: Snapshot, exploit: int) -> Decision:
    return Decision(0, exploit, f"trial: threshold 0 to measure what every prefill pays above it ({_why(None, None)})",
                    learner.move_gain(snap.now, snap.exploit_threshold, exploit), False, True, True)


def _why(surcharge: float | None, gain: float | None) -> str:
    if surcharge is None or gain is None:
        return "the draft's prompt pass, not measured at this prefill rate lately"
    return (f"above 0 every prefill also runs the draft's prompt pass, {surcharge:.1%} of the time; "
            f"speculation gains {gain:+.1%} tok/s")
