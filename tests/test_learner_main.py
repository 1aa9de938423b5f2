"""policies/learner.py on main's code, worked out by hand: the hold rule of _best_threshold (a move that
leaves the live bucket's mode alone waits until a crossed bucket tells the modes apart), the edge bucket
an exploit reason names, recent traffic and the gain of a move, saved rows checked and new fields
restored (older states without them load)."""
from __future__ import annotations

import math

import pytest

from policies import PolicyError, Sample, Snapshot, make_policy
from policies.base import OFF, SPEC
from policies.learner import SETTLES
from tests.test_steady import feed


def held(live: int, rel: dict[int, float | None], sd=(0.3, 0.4)) -> int:
    """_best_threshold from 4 when the gains put the best threshold at 8 (buckets 4..7, batches 5-8, gain);
    rel: the relative gain per bucket (default 0.01), sd: the relative uncertainty of spec and off."""
    p = make_policy("ucb", max_batch_size=64)
    gains = [0.0] * len(p.buckets)
    gains[4:8] = [1.0] * 4
    gains[8] = -10.0
    p.gains = lambda now: gains
    p.relative = lambda k: rel.get(k, 0.01)
    p.rel_uncertainty = lambda arm, k, now: sd[0] if arm == SPEC else sd[1]
    return p._best_threshold(1.0, 4, p.buckets.of(live))


def test_a_move_that_leaves_the_live_mode_alone_waits_for_a_crossed_bucket_that_tells_the_modes_apart():
    assert held(20, {}) == 4                                 # batch 20 is off at 4 and at 8: noise, held
    assert held(6, {}) == 8                                  # batch 6 speculates at 8, not at 4: made
    assert held(20, {6: 0.5}) == 8                           # |0.5| >= 1 x hypot(0.3, 0.4) = 0.5: told apart
    assert held(20, {6: -0.6}) == 8
    assert held(20, {k: 0.45 for k in range(4, 8)}) == 4     # under the combined sd (0.5), over either alone
    assert held(20, {k: 0.9 for k in range(4)}) == 4         # buckets not crossed do not count
    assert held(20, {k: None for k in range(4, 8)}) == 4     # unmeasured: nothing told apart


def decided(before: int, off_rate: dict[int, float], spec_rate: dict[int, float], live: int = 2) -> str:
    """decide()'s reason with both modes measured at each batch size (off/spec: requests/s, accept 2)."""
    p = make_policy("ucb", {"c": 0.0}, max_batch_size=64)
    for bs in off_rate:
        for _ in range(5):
            p.observe(Sample(0.0, bs, 0, bs, bs / off_rate[bs], True))
            p.observe(Sample(0.0, bs, 3, 2 * bs, bs / spec_rate[bs], True))
    return p.decide(Snapshot(0.1, before, 64, live_batch_size=live)).reason


def test_an_exploit_reason_names_the_bucket_at_the_edge_that_moved():
    rates = {bs: 100.0 for bs in (2, 3, 4, 5, 64)}
    assert decided(0, rates, {2: 75.0, 3: 75.0, 4: 75.0, 5: 40.0, 64: 40.0}) == (
        "speculate up to batch 4: it pays at batch 4 (speculation +50% tok/s)")
    assert decided(12, rates, {2: 75.0, 3: 75.0, 4: 75.0, 5: 40.0, 64: 40.0}) == (
        "speculate only up to batch 4: it no longer pays at batch 5 (speculation -20% tok/s)")
    assert decided(12, rates, {2: 40.0, 3: 40.0, 4: 40.0, 5: 40.0, 64: 40.0}) == (   # batch 1 unmeasured: kept
        "speculate only up to batch 1: it no longer pays at batch 2 (speculation -20% tok/s)")
    assert decided(12, {1: 100.0, **rates}, {1: 40.0, 2: 40.0, 3: 40.0, 4: 40.0, 5: 40.0, 64: 40.0}) == (
        "stop speculating: it no longer pays at batch 1 (speculation -20% tok/s)")
    assert decided(0, rates, {2: 75.0, 3: 75.0, 4: 75.0, 5: 75.0, 64: 75.0}) == (
        "speculate up to batch 64: it pays at batch 59-64 (speculation +50% tok/s)")
    assert decided(0, {1: 100.0}, {1: 75.0}, live=1) == "speculate up to batch 1: it pays at batch 1 (speculation +50% tok/s)"


def test_recent_traffic_fades_with_the_accept_half_life():
    p = make_policy("ucb", {"accept_half_life_s": 4.0}, max_batch_size=64)
    b = p.buckets.of(8)
    for d in (p.q[OFF][b], p.q[SPEC][b]):
        d.w, d.t = 2.0, 10.0
    assert p.recent_traffic(b, 18.0) == pytest.approx(2 * 2.0 * 0.25)
    assert p.recent_traffic(b, 10.5) == pytest.approx(2 * 2.0 * 0.5 ** (0.5 / 4))
    assert p.recent_traffic(b, 5.0) == 4.0                    # a clock behind the samples: no fading


def test_the_gain_of_a_move_is_its_crossed_buckets_share_of_recent_traffic_times_their_gain():
    assert make_policy("ucb", max_batch_size=64).move_gain(0.0, 0, 8) == 0.0       # no traffic anywhere
    p = make_policy("ucb", max_batch_size=64)
    feed(p, OFF, 4, 0.010, 10)                               # batch 4: spec +50 % (600 vs 400 tok/s)
    feed(p, SPEC, 4, 0.020, 10, accept=3.0)
    feed(p, OFF, 40, 0.010, 20)                              # batch 40: off only, twice the traffic
    now = 0.09
    share = p.recent_traffic(p.buckets.of(4), now) / sum(p.recent_traffic(b, now) for b in range(len(p.buckets)))
    assert share == pytest.approx(0.5, rel=1e-3)
    assert p.move_gain(now, 0, 4) == pytest.approx(share * 0.5)
    assert p.move_gain(now, 4, 0) == pytest.approx(-share * 0.5)
    assert p.move_gain(now, 4, 4) == 0.0


@pytest.mark.parametrize("row,ok", [([1.0, 5.0, 25.0, 0.0], True), ([1.0, -5.0, 25.0, 0.0], True),
                                    ([-1.0, 5.0, 25.0, 0.0], False), ([1.0, "x", 25.0, 0.0], False),
                                    ([True, 5.0, 25.0, 0.0], False), ([1.0, 5.0, 25.0], False)])
def test_saved_rows_are_four_numbers_with_a_weight_not_negative(row, ok):
    p = make_policy("ucb", max_batch_size=64)
    state = p.state()
    state["q_off"][3] = row
    if ok:
        p.load_state(state)
        assert p.q[OFF][3].to_list() == [float(v) for v in row]
    else:
        with pytest.raises(PolicyError) as err:
            p.load_state(state)
        assert str(err.value) == "policy ucb: saved state does not match 28 buckets (q_off)"


def test_the_prefill_cost_and_the_accept_high_are_saved_and_an_older_state_loads_without_them():
    p = make_policy("ucb", {"prefill": 2}, max_batch_size=64)
    feed(p, OFF, 8, 0.010, 5)
    feed(p, OFF, 8, 0.015, 5, t0=1.0, decode_only=False)    # corrected: 5 ms of prefill learned
    feed(p, SPEC, 8, 0.020, 5, t0=2.0, accept=3.0)
    saved = p.state()
    assert saved["prefill_s"] == p.prefill_s.to_list() and p.prefill_s.mean == pytest.approx(0.005)
    assert saved["accept_high"] == [pytest.approx(3.0), 2.04]
    q = make_policy("ucb", {"prefill": 2}, max_batch_size=64)
    q.load_state(saved)
    assert q.state() == saved and q.prefill_s.mean == pytest.approx(0.005) and q.accept_hi == (pytest.approx(3.0), 2.04)
    old = make_policy("ucb", max_batch_size=64)
    old.load_state({k: v for k, v in saved.items() if k not in ("prefill_s", "accept_high")})
    assert old.prefill_s.w == 0 and old.accept_hi == (0.0, 0.0) and old.accept.mean == pytest.approx(3.0)
    old.load_state(dict(saved, prefill_s=[1.0, 2.0], accept_high=[9.0]))          # odd lengths: ignored
    assert old.prefill_s.w == 0 and old.accept_hi == (0.0, 0.0)
    assert math.isfinite(old.accept_high(100.0))


def test_a_fresh_learner_saves_no_accept_high():
    assert make_policy("ucb", max_batch_size=64).state()["accept_high"] == [0.0, 0.0]


def test_an_untried_off_arm_settled_by_a_win_above_is_not_tried():
    p = make_policy("ucb", max_batch_size=64)
    feed(p, OFF, 8, 0.010, 5)                                # batch 8: spec wins by 50 %
    feed(p, SPEC, 8, 0.020, 5, accept=3.0)
    feed(p, SPEC, 4, 0.020, 5, accept=3.0)                   # batch 4: spec known, off not
    d = p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    assert (d.threshold, d.exploit_threshold, d.untried) == (8, 8, False)
    assert d.reason == "speculate up to batch 8: it pays at batch 8 (speculation +50% tok/s)"


def test_the_live_buckets_exploit_mode_is_the_incumbent_of_its_choice():
    def decision(exploit: int):
        p = make_policy("ucb", {"c": 0.0}, max_batch_size=64)
        feed(p, OFF, 8, 0.010, 50)                           # off 800 tok/s
        feed(p, SPEC, 8, 0.02475, 50, accept=2.5)            # spec 808 tok/s: +1 %, inside the 2 % margin
        p._best_threshold = lambda now, current, b: current  # the summary keeps the snapshot's threshold
        return p.decide(Snapshot(1.0, exploit, 64, live_batch_size=8))
    assert decision(0).threshold == 0 and not decision(0).exploratory    # off holds at a near tie
    assert decision(8).threshold == 8 and not decision(8).exploratory    # and so does spec


def spec_loses_at_2(arm: int, weight: float):
    """Batch 2: spec loses by 50 %; the arm's statistic there given that weight, last updated at time 1."""
    p = make_policy("ucb", max_batch_size=64)
    feed(p, OFF, 2, 0.010, 5)
    feed(p, SPEC, 2, 0.040, 5)
    d = p.q[arm][p.buckets.of(2)]
    d.s, d.w, d.t = d.mean * weight, weight, 1.0
    return p


@pytest.mark.parametrize("arm", [OFF, SPEC])
def test_a_neighbour_settles_an_arm_from_a_weight_of_exactly_one_thousandth_now(arm):
    at = 1.0 + 60.0 * math.log2(SETTLES / 1e-3)        # when SETTLES has faded to 1e-3 (the half-life's 60 s)
    p = spec_loses_at_2(arm, SETTLES)
    assert p.dominated(SPEC, 7, at - 0.01) and not p.dominated(SPEC, 7, at + 0.01)
    w = 1e-3 * 2 ** 12                                 # faded by exactly 12 half-lives: 1e-3 in floats, which settles
    assert w >= SETTLES and spec_loses_at_2(arm, w).dominated(SPEC, 7, 1.0 + 12 * 60.0)


@pytest.mark.parametrize("arm", [OFF, SPEC])
def test_a_neighbour_settles_an_arm_only_from_settles_batches_at_its_last_run(arm):
    assert spec_loses_at_2(arm, SETTLES).dominated(SPEC, 7, 1.0)
    assert not spec_loses_at_2(arm, 0.999 * SETTLES).dominated(SPEC, 7, 1.0)


def test_an_untried_off_arm_settled_above_is_tried_as_speculation_where_the_threshold_is_below():
    p = make_policy("ucb", max_batch_size=64)
    feed(p, OFF, 6, 0.010, 50)                               # batch 6: spec loses 50 %, much traffic
    feed(p, SPEC, 6, 0.040, 50)
    feed(p, OFF, 8, 0.010, 4)                                # batch 8: spec wins 50 %, little traffic
    feed(p, SPEC, 8, 0.020, 4, accept=3.0)
    feed(p, SPEC, 4, 0.020, 2, accept=3.0)                   # batch 4: spec known, off not
    d = p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    assert (d.threshold, d.exploit_threshold, d.untried) == (4, 0, False)
    assert d.reason == "trial: speculate at batch 4 to measure it (plain decoding lost at larger batches)"


def test_an_arm_measured_long_ago_is_tried_again_and_says_when():
    p = make_policy("ucb", max_batch_size=64)
    feed(p, OFF, 4, 0.010, 1, t0=0.0)
    feed(p, SPEC, 4, 0.020, 1, t0=0.0, accept=3.0)
    feed(p, SPEC, 4, 0.020, 1, t0=999.0, accept=3.0)        # spec fresh, off last run 1000 s ago
    d = p.decide(Snapshot(1000.0, 4, 64, live_batch_size=4))
    assert (d.threshold, d.untried) == (3, True)
    assert d.reason == "trial: plain decode at batch 4 to measure it (last measured 1000 s ago)"
