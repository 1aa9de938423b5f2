"""policies.prefill_cost's parts one at a time: the robust and lean means at their edges, the measured pass cost
where the lean mean is not positive, the verdict's decision (its gain and reason) and the trial it makes, the
margin that turns it off, and the measurement saved with the learner's state (tests/test_prefill_cost.py has the
behaviour on an engine as a whole)."""
from __future__ import annotations

import pytest

from policies import Decision, Snapshot, make_policy
from policies.prefill_cost import decode_gain, lean, pass_cost, robust_mean, verdict, _why
from tests.test_prefill_cost import Engine, run


def measured(fast: bool = True, params: dict | None = None):
    """The bandit after 20 s above 0 and 3 s at 0 on the test engine: a measurement taken."""
    p, engine = make_policy("bandit", params, seed=0), Engine(fast=fast)
    run(p, engine, 20.0, 8)
    t = run(p, engine, 3.0, 0)
    assert p.prefill.measured
    return p, engine, t


def test_robust_mean_keeps_values_up_to_and_including_robust_times_the_median():
    assert robust_mean([1.0, 1.0, 1.0, 6.0]) == pytest.approx(2.25)        # 6 x the median: kept
    assert robust_mean([1.0, 1.0, 1.0, 6.5]) == pytest.approx(1.0)
    assert robust_mean([0.0, 0.0, 0.0, 5.0]) == pytest.approx(1.25)        # median 0: all of them


def test_lean_keeps_values_within_lean_times_the_10th_percentile():
    values = [1.0] + [2.0] * 8 + [3.0]          # 10 values: the 10th percentile is the second, 2.0
    assert lean(values)[0] == pytest.approx(2.0)  # 1.5 x 2.0 = 3.0 is kept, 1.0 too
    assert lean([1.0] + [2.0] * 8 + [3.5])[0] == pytest.approx(17.0 / 9)
    assert lean([0.0, 1.0, 5.0, 9.0])[0] == pytest.approx(3.75)   # 10th percentile 0: all of them


def test_lean_standard_error_of_one_and_of_two_values():
    assert lean([2.0]) == (2.0, 0.0)
    mean, se2 = lean([2.0, 2.5])
    assert mean == pytest.approx(2.25) and se2 == pytest.approx(0.125 / 2)


def test_pass_cost_where_the_lean_excess_above_0_is_not_positive():
    assert pass_cost([0.0] * 30, [0.0] * 30) == 0.0
    assert pass_cost([-1.0] * 30, [-2.0] * 30) == pytest.approx(1.0)
    above = [-100.0] + [1.0] * 8 + [5.0]        # lean mean -92/9 (not positive): times 1, not by the robust mean
    assert pass_cost(above, [-20.0] * 10) == pytest.approx(-92.0 / 9 + 20.0 - 2.0 * (lean(above)[1]) ** 0.5)


def test_why_names_the_surcharge_and_the_gain_only_when_both_are_known():
    unknown = "the draft's prompt pass, not measured at this prefill rate lately"
    assert _why(None, 0.01) == _why(0.02, None) == _why(None, None) == unknown
    assert _why(0.05, 0.012) == ("above 0 every prefill also runs the draft's prompt pass, 5.0% of the time; "
                                 "speculation gains +1.2% tok/s")


def test_the_move_to_0_gains_the_surcharge_less_what_speculation_gains_at_the_threshold_in_force():
    p, _, t = measured()
    surcharge = p.prefill.surcharge(t)
    gain = p.move_gain(t, 0, 4, lambda b: decode_gain(p, b))         # the bandit's exploit: 4
    gain_now = p.move_gain(t, 0, 8, lambda b: decode_gain(p, b))     # in force: 8
    assert surcharge > 0 and gain != gain_now and gain_now != p.move_gain(t, 1, 8, lambda b: decode_gain(p, b))
    assert gain != p.move_gain(t, 0, 4) and gain != p.move_gain(t, 1, 4, lambda b: decode_gain(p, b))
    d = verdict(p, Snapshot(t, 8, 256, 12), 4, Decision(4, 4, "bandit"))
    assert d == Decision(0, 0, _why(surcharge, gain), pytest.approx(surcharge - gain_now), whole=True)


def test_at_0_an_exploratory_bandit_decision_keeps_0_as_its_exploit_threshold():
    p, _, t = measured()
    trial = Decision(12, 8, "bandit trial", 0.02, True, True)
    assert verdict(p, Snapshot(t, 0, 256, 12), 8, trial) == Decision(12, 0, "bandit trial", 0.0, True, True)
    assert verdict(p, Snapshot(t, 0, 256, 12), 8, Decision(8, 8, "b")) == \
        Decision(0, 0, _why(p.prefill.surcharge(t), p.move_gain(t, 0, 8, lambda b: decode_gain(p, b))), pytest.approx(
            p.prefill.surcharge(t)), whole=True)             # at 0 nothing speculates: gain_now is 0


def test_the_trial_at_0_is_a_shift_for_the_prefills_with_the_bandits_gain():
    p, engine = make_policy("bandit", seed=0), Engine(fast=True)
    t = run(p, engine, 20.0, 8)
    d = verdict(p, Snapshot(t, 8, 256, 12), 16, Decision(16, 16, "bandit"))
    assert d == Decision(0, 16, "trial: threshold 0 to measure what every prefill pays above it "
                                "(the draft's prompt pass, not measured at this prefill rate lately)",
                         pytest.approx(p.move_gain(t, 8, 16)), False, True, True)
    assert d.untried is False


@pytest.mark.parametrize("margin", [10.0])
def test_zero_margin_10_leaves_the_bandit_threshold(margin):
    p, _, t = measured(params={"zero_margin": margin})
    assert verdict(p, Snapshot(t, 8, 256, 12), 8, Decision(8, 8, "b")) is None
    q, _, t = measured(params={"zero_margin": 9.99})
    assert q.params["zero_margin"] == 9.99


def test_an_engine_whose_off_prefills_skip_the_pass_leaves_the_bandit_threshold():
    p, _, t = measured()
    assert verdict(p, Snapshot(t, 8, 256, 12), 8, Decision(8, 8, "b")).threshold == 0     # the measurement calls for 0
    assert verdict(p, Snapshot(t, 8, 256, 12, prefills_pay_draft=False), 8, Decision(8, 8, "b")) is None


def test_the_measurement_is_saved_with_the_learner_and_loads_back():
    p, _, t = measured()
    saved = p.state()["prefill_cost"]
    assert set(saved) == {"cost", "cost_rate", "rate", "decode", "steps"} and saved["cost_rate"] == p.prefill.cost_rate > 0
    q = make_policy("bandit", seed=0)
    q.load_state(p.state())
    assert q.prefill.state() == saved
    assert q.prefill.surcharge(t) == pytest.approx(p.prefill.surcharge(t))
    older = make_policy("bandit", seed=0)
    older.prefill.load_state({"cost": saved["cost"], "rate": saved["rate"]})        # no cost_rate: kept at 0
    assert older.prefill.cost_rate == 0.0 and older.prefill.cost.to_list() == saved["cost"]
    older.prefill.load_state({"cost_rate": True})                                   # a bool is not a rate
    assert older.prefill.cost_rate == 0.0


def test_a_restored_learner_reaches_the_same_verdict_as_the_one_it_was_saved_from():
    """After a restart the decode-only steps come back with the measurement: the move to 0 and its gain are the
    saved learner's at once (without them decode_gain reads None and every excess is empty until new samples)."""
    p, _, t = measured()
    q = make_policy("bandit", seed=0)
    q.load_state(p.state())
    snap, bandit = Snapshot(t, 8, 256, 12), Decision(4, 4, "bandit")
    d = verdict(q, snap, 4, bandit)
    assert d is not None and d.threshold == 0 and d == verdict(p, snap, 4, bandit)
    assert [decode_gain(q, b) for b in range(len(q.buckets))] == [decode_gain(p, b) for b in range(len(p.buckets))]
    assert q.prefill.bound(t) == p.prefill.bound(t) or q.prefill.bound(t) is None   # recent intervals are not saved


@pytest.mark.parametrize("bad", [
    {"decode": [[[1.0, 1.0, 1.0, 0.0]]]},                                  # not two regimes
    {"steps": [[], []]},                                                   # another number of buckets
    {"steps": [[[1.0, 1.0, 1.0, 0.0]]] * 2},                               # a 1-bucket learner's valid rows: not bucket 0's
    {"decode": "x", "steps": None},
])
def test_decode_only_steps_of_another_shape_are_left_empty(bad):
    p, _, _ = measured()
    saved = {**p.state()["prefill_cost"], **bad}
    q = make_policy("bandit", seed=0)
    q.prefill.load_state(saved)
    assert q.prefill.cost.to_list() == saved["cost"]                       # the parts that match still load
    for key in bad:
        assert all(d.w == 0.0 for row in getattr(q.prefill, key) for d in row)
