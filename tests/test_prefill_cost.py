"""Threshold 0 against the bandit's best threshold (policies.prefill_cost): on an engine whose off path runs the
draft's pass over every prefill's prompt at any threshold above 0, the plain prefill intervals at 0 are shorter,
and where that surcharge outweighs speculation's gain the decision is 0; where the prefills cost the same at 0
(off path kv), or only the modes that run differ, the bandit's threshold stands."""
from __future__ import annotations

import pytest

from controller.contract import speculates
from controller.control.guard import Guard, moves_any
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import Decision, Sample, Snapshot, make_policy
from policies.prefill_cost import PROBE_GAP_S, lean, pass_cost, robust_mean

OFF_S, EVERY = 0.010, 7              # the plain step; every 7th interval holds a prefill
PREFILL_S, PASS_S = 0.012, 0.004     # a prefill's excess at 0, and what the draft's pass adds above 0
SMALL = (0.93, 0.0082)   # the speculative step 2 x OFF_S x (a + slope x batch): +7 % at batch 1, a loss above 8
LARGE = (0.5, 0.0588)    # +79 % at batch 1, a loss above 8


class Engine:
    """Batch sizes 1-20 in turn; a prefill in every EVERY-th interval, PASS_S longer at thresholds above 0 where
    `fast` (off path fast: the draft's pass on every prefill), as long where not (off path kv)."""

    def __init__(self, fast: bool, gain: tuple[float, float] = SMALL):
        self.fast, self.gain, self.t, self.i = fast, gain, 0.0, 0

    def step(self, threshold: int) -> Sample:
        bs = self.i % 20 + 1
        spec = speculates(bs, threshold)
        prefill = self.i % EVERY == EVERY - 1
        excess = PREFILL_S + (PASS_S if self.fast and threshold > 0 else 0.0)
        step = (2 * OFF_S * (self.gain[0] + self.gain[1] * bs) if spec else OFF_S) + (excess if prefill else 0.0)
        self.t += step
        self.i += 1
        return Sample(self.t, bs, 3 if spec else 0, 2 * bs if spec else bs, step, not prefill)


def run(p, engine: Engine, seconds: float, threshold: int) -> float:
    p.in_force(threshold)
    end = engine.t + seconds
    while engine.t < end:
        p.observe(engine.step(threshold))
    return engine.t


def run_loop(fast: bool, seconds: float, gain: tuple[float, float] = SMALL,
             pays: bool = True) -> tuple[ControlLoop, list[int]]:
    """The bandit and its guard on the engine from threshold 8, ticking every 0.5 s: the loop and every applied threshold
    (pays: what the engine says of its prefills, ControlLoop prefills_pay_draft)."""
    loop = ControlLoop(make_policy("bandit", seed=0), initial_threshold=8, prefills_pay_draft=pays)
    engine, applied, tick = Engine(fast, gain), [], 0.5
    while engine.t < seconds:
        loop.observe(engine.step(loop.threshold))
        while tick <= engine.t:
            applied.append(loop.tick(tick).threshold)
            tick += 0.5
    return loop, applied


def test_a_stretch_at_0_that_shows_the_prefill_surcharge_makes_0_the_decision():
    p, engine = make_policy("bandit", seed=0), Engine(fast=True)
    t = run(p, engine, 20.0, 8)
    probe = p.decide(Snapshot(t, 8, 256, 12))     # never at 0 lately, the prefills' excess could outweigh the gain
    assert probe.threshold == 0 and probe.exploit_threshold > 0 and probe.shift and probe.whole
    assert "trial: threshold 0" in probe.reason
    t = run(p, engine, 3.0, 0)                     # at 0 the draft's 4 ms pass is gone from every prefill
    assert p.prefill.cost.mean == pytest.approx(PASS_S, rel=0.05)
    d = p.decide(Snapshot(t, 8, 256, 12))
    assert d.threshold == d.exploit_threshold == 0 and d.whole and d.gain > 0.003 and "draft's prompt pass" in d.reason
    assert p.decide(Snapshot(t + 1.0, 0, 256, 12)).exploit_threshold == 0    # and it stays


def test_where_prefills_cost_the_same_at_0_the_bandit_threshold_stands():
    p, engine = make_policy("bandit", seed=0), Engine(fast=False)
    t = run(p, engine, 20.0, 8)
    t = run(p, engine, 3.0, 0)                     # off path kv: the pass is skipped where nothing speculates
    assert abs(p.prefill.cost.mean) < 1e-4
    d = p.decide(Snapshot(t, 8, 256, 12))
    assert d.exploit_threshold > 0 and "prompt pass" not in d.reason
    t = run(p, engine, 5.0, 8)                     # the measurement is kept: no new trial at 0 at this load
    assert "prompt pass" not in p.decide(Snapshot(t, 8, 256, 12)).reason


@pytest.mark.parametrize("fast", [True, False])
def test_the_loop_goes_to_0_and_stays_only_where_the_draft_pass_costs_more_than_speculation_gains(fast):
    loop, applied = run_loop(fast, 150.0)
    if fast:
        assert loop.guard.exploit == 0 and applied[-40:] == [0] * 40       # the last 20 s at 0
    else:
        assert loop.guard.exploit > 0 and applied[-40:].count(0) == 0
        assert applied.count(0) <= 2 * 4       # the trial at 0 (PROBE prefill intervals: about 1 s), once


def test_an_engine_whose_off_prefills_skip_the_pass_gets_no_move_to_0_whatever_a_stretch_there_reads():
    """The engine (off path kv, lean prefill) says its prefills skip the pass where the batch will not speculate:
    a stretch at 0 could only read noise there (on the H200 at constant load: +1.5 %, then <= 0, and 0 <-> 23
    flips every ~50 s, h200-2026-12-03c call 3). Here the stretch would read a real 4 ms: told, the loop never
    goes to 0 for the prefills, nor tries it."""
    loop, applied = run_loop(True, 150.0, pays=False)
    assert loop.guard.exploit > 0 and applied[-40:].count(0) == 0
    assert loop.policy.prefill.cost.w == 0                   # no trial at 0 was made to measure it
    assert all("prompt pass" not in loop.policy.decide(Snapshot(150.0 + i, 8, 256, 12, False)).reason for i in range(3))


def test_where_speculation_gains_more_than_the_pass_costs_0_is_not_chosen():
    """Speculation +40 % at batches 1-8 on average: the 4 ms pass on ~11 prefills a second is less."""
    loop, applied = run_loop(True, 150.0, LARGE)
    assert loop.guard.exploit > 0 and applied[-40:].count(0) == 0


def test_modes_that_run_differently_at_0_are_no_surcharge():
    """Above 0 the small batches speculate, at 0 they run plain and their prefill intervals are shorter: only the
    plain intervals of each regime count, each over its own bucket's decode-only step (crossover-b C=4, 6d)."""
    p, engine = make_policy("bandit", seed=0), Engine(fast=False, gain=(1.2, 0.0))
    run(p, engine, 20.0, 8)
    run(p, engine, 3.0, 0)
    assert p.prefill.measured and abs(p.prefill.cost.mean) < 1e-4


def test_idle_gaps_and_chained_extends_do_not_make_the_measurement():
    ones = [0.025 + 0.0001 * (i % 10) for i in range(40)]      # one extend each
    chained = [v + 0.025 for v in ones[:10]]                   # two
    idle = [1.5, 0.8, 2.0]                     # a light load: the batch ran dry before these prefills
    assert robust_mean(ones + idle) == pytest.approx(robust_mean(ones))
    assert lean(ones + chained)[0] == pytest.approx(lean(ones)[0], rel=0.01)
    above = [v + PASS_S for v in ones + chained]
    cost = pass_cost(above, ones + chained[:2] + idle)      # fewer chains and some idle gaps at 0: the pass still
    assert cost == pytest.approx(PASS_S * robust_mean(above) / lean(above)[0], rel=0.05)
    noisy = [0.025 + 0.002 * ((i * 7) % 10 - 4.5) for i in range(40)]
    assert pass_cost([v + 0.0005 for v in noisy], noisy) < 0      # a difference within the noise: none


def test_a_measurement_holds_near_the_prefill_rate_it_was_taken_at():
    p, engine = make_policy("bandit", seed=0), Engine(fast=True)
    t = run(p, engine, 20.0, 8)
    t = run(p, engine, 3.0, 0)
    cost = p.prefill
    assert cost.surcharge(t) == pytest.approx(cost.cost.mean * cost.rate.mean)
    cost.rate.add(t + 0.001, 10 * cost.rate.mean, 1e6)        # ten times the prefills per second
    assert cost.surcharge(t + 0.001) is None


def test_a_trial_at_0_cut_short_waits_before_the_next():
    p, engine = make_policy("bandit", seed=0), Engine(fast=True)
    t = run(p, engine, 20.0, 8)
    t = run(p, engine, 0.1, 0)                     # too few prefill intervals at 0 for a measurement
    t = run(p, engine, 1.0, 8)
    assert not p.prefill.measured and "threshold 0" not in p.decide(Snapshot(t, 8, 256, 12)).reason
    t = run(p, engine, PROBE_GAP_S, 8)
    assert "trial: threshold 0" in p.decide(Snapshot(t, 8, 256, 12)).reason
    run(p, engine, 2.5, 0)                         # the rows of the first stretch count with this one's
    assert p.prefill.measured


def test_the_loop_tells_the_policy_the_threshold_in_force():
    p = make_policy("bandit", seed=0)
    loop = ControlLoop(p, initial_threshold=0)
    assert p.prefill.zero
    loop.revert(5)
    assert not p.prefill.zero


def test_a_move_to_0_for_the_prefills_is_neither_coalesced_nor_split():
    cfg = GuardConfig(stabilisation_s=0, changes_per_min=0, min_gain=0, max_step_buckets=2)
    plain = Guard(cfg, make_policy("bandit").buckets, 40)
    assert plain.apply(1.0, Decision(0, 0, "x"), 1.0, applied=40, live=[60])[0] == 40      # moves no live batch
    assert not moves_any(40, 0, [60])
    whole = Guard(cfg, make_policy("bandit").buckets, 40)
    assert whole.apply(1.0, Decision(0, 0, "x", whole=True), 1.0, applied=40, live=[60])[0] == 0
    trial = Guard(cfg, make_policy("bandit").buckets, 40)
    assert trial.apply(1.0, Decision(0, 40, "t", shift=True, whole=True), 1.0, applied=40, live=[60]) == (0, "t", True)
    assert trial.apply(1.5, Decision(40, 40, "back"), 1.5, applied=0, live=[60], exploring=True)[0] == 40


def test_a_trial_skipped_at_the_end_of_another_goes_back_to_the_exploit_threshold():
    """The trial in force ends; the next is skipped (change budget spent): the way back is the trial's end, free,
    and the trial's threshold does not become the exploit one (a bandit trial at 12 during a stretch at 0 did)."""
    g = Guard(GuardConfig(stabilisation_s=0, min_gain=0, changes_per_min=1, changes_burst=2), make_policy("bandit").buckets, 0)
    assert g.apply(1.0, Decision(12, 0, "t"), 1.0, applied=0, live=[10]) == (12, "t", True)
    thr, reason, exploratory = g.apply(1.5, Decision(20, 0, "t2", 0.0), 1.5, applied=12, live=[10, 16], exploring=True)
    assert (thr, exploratory, g.exploit) == (0, False, 0) and "trial skipped" in reason
