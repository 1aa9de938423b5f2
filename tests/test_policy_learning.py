"""The bandits' statistics and per-bucket learner, with numbers worked out by hand: discounting,
the weight cap, relative sd, what a sample teaches, uncertainty, dominance, the reasons of decide()."""
from __future__ import annotations

import math

import pytest

from policies import PolicyError, Sample, Snapshot, make_policy
from policies.base import OFF, SPEC, relative_gain
from policies.stats import Discounted


def test_discounted_mean_and_weight_halve_every_half_life():
    d = Discounted(2.0)
    d.add(1.0, 10.0)
    d.add(3.0, 20.0)                             # the first sample now weighs 0.5
    assert (d.w, d.s, d.s2, d.t) == (1.5, 25.0, 450.0, 3.0)
    assert d.mean == pytest.approx(25 / 1.5)
    assert d.weight(7.0) == pytest.approx(1.5 / 4) and d.weight(3.0) == d.weight(2.0) == 1.5
    d.add(2.0, 40.0)                             # late: no decay, the clock stays
    assert (d.w, d.t) == (2.5, 3.0)
    assert Discounted(1.0).mean == 0.0 and Discounted(1.0).weight(5.0) == 0.0


def test_discounted_weight_cap_keeps_the_mean_of_the_newest():
    d = Discounted(100.0, max_weight=3.0)
    for x in (1.0, 1.0, 1.0):
        d.add(0.0, x)
    d.add(0.0, 10.0)                             # 3 + 1 > 3: the old weight shrinks to 2 first
    assert d.w == pytest.approx(3.0) and d.mean == pytest.approx(4.0) and d.s2 == pytest.approx(102.0)
    big = Discounted(100.0, max_weight=2.0)
    big.add(0.0, 5.0, weight=1.0)
    big.add(0.0, 7.0, weight=3.0)                # heavier than the cap: only the new sample remains
    assert big.w == pytest.approx(3.0) and big.mean == pytest.approx(7.0)


def test_relative_sd():
    d = Discounted(100.0)
    d.add(0.0, 1.0)
    assert d.rel_sd == 0.0                       # fewer than 2 units of weight
    d.add(0.0, 3.0)
    assert d.rel_sd == pytest.approx(0.5)        # mean 2, sd 1
    neg = Discounted(100.0)
    neg.add(0.0, -1.0)
    neg.add(0.0, -3.0)
    assert neg.rel_sd == 0.0
    same = Discounted(100.0)
    same.add(0.0, 2.0)
    same.add(0.0, 2.0)
    assert same.rel_sd == 0.0


def test_discounted_starts_empty_at_time_zero():
    d = Discounted(3.0)
    assert (d.w, d.s, d.s2, d.t, d.half_life_s, d.max_weight) == (0.0, 0.0, 0.0, 0.0, 3.0, float("inf"))
    d.add(0.5, 2.0)
    assert d.t == 0.5


def test_discounted_round_trips_as_a_list():
    d = Discounted(4.0)
    d.add(1.0, 2.0)
    d.add(2.0, 5.0)
    e = Discounted(4.0)
    e.load(d.to_list())
    assert e.to_list() == d.to_list() == [d.w, d.s, d.s2, 2.0]


def test_relative_gain():
    assert relative_gain(12.0, 10.0) == pytest.approx(0.2)
    assert relative_gain(5.0, 0.0) == 0.0 and relative_gain(5.0, -1.0) == 0.0
    assert relative_gain(0.6, 0.5) == pytest.approx(0.2)


def test_what_one_sample_teaches():
    p = make_policy("ucb", max_batch_size=64)
    b = p.buckets.of(8)
    p.observe(Sample(1.0, 8, 3, 20, 0.02, True))              # spec: 400 req/s, accept 2.5, K = 3
    assert p.q[SPEC][b].mean == pytest.approx(400.0) and p.accept.mean == pytest.approx(2.5)
    assert p.accept.w == 8 and p.max_steps == 3 and p.tried[SPEC][b] == 1.0
    assert p.mean(SPEC, b) == pytest.approx(1000.0)
    p.observe(Sample(2.0, 8, 0, 8, 0.01, False))              # off, with a prefill: rewarded as measured
    assert p.tried[OFF][b] == 2.0 and p.q[OFF][b].to_list() == [1.0, 800.0, 640000.0, 2.0]
    assert p.mean(OFF, b) == pytest.approx(800.0)
    p.observe(Sample(3.0, 8, 0, 8, 0.05, False))              # with a prefill, 5x the step: an idle gap, dropped
    assert p.tried[OFF][b] == 3.0 and p.q[OFF][b].to_list() == [1.0, 800.0, 640000.0, 2.0]
    p.observe(Sample(3.0, 8, 0, 8, 0.04, False))              # exactly LONG (4x) the step: still a reward, weight 4
    assert p.q[OFF][b].w == pytest.approx(0.5 ** (1 / 60) + 4.0) and p.q[OFF][b].t == 3.0
    assert p.q[OFF][b].s == pytest.approx(800.0 * 0.5 ** (1 / 60) + 4 * 200.0)
    p.observe(Sample(4.0, 8, 2, 16, 0.02, True))              # fewer steps: K stays 3
    assert p.max_steps == 3
    for bad in (Sample(5.0, 8, 0, 8, 0.0, True), Sample(5.0, 0, 0, 0, 0.01, True)):
        p.observe(bad)                                        # no step time or no batch: ignored
    assert p.tried[OFF][b] == 3.0 and p.q[OFF][b].t == 3.0
    assert p.tried[OFF][0] == -math.inf and p.q[OFF][0].w == 0                  # batch 0 went nowhere
    fresh = make_policy("ucb", max_batch_size=64)
    assert fresh.max_steps == 1 and fresh.state()["max_steps"] == 1
    for _ in range(2):
        fresh.observe(Sample(0.0, 200, 1, 400, 0.1, True))   # 400 requests: the accept estimate keeps 256
    assert fresh.accept.w == pytest.approx(256.0)
    p.observe(Sample(6.0, 2, 1, 3, 0.01, True))               # one draft step is speculation too
    assert p.q[SPEC][p.buckets.of(2)].w == 1 and p.tried[SPEC][p.buckets.of(2)] == 6.0


def test_uncertainty_floors_and_adds_the_accept_length_for_spec():
    p = make_policy("ucb", {"half_life_s": 20.0}, max_batch_size=64)
    b = p.buckets.of(8)
    for t in range(4):
        p.observe(Sample(float(t), 8, 0, 8, 0.01, True))      # identical: rel sd 0, floored at 0.02
        p.observe(Sample(float(t), 8, 3, 16, 0.02, True))
    w_off = p.q[OFF][b].weight(3.0)
    assert p.rel_uncertainty(OFF, b, 3.0) == pytest.approx(0.02 / math.sqrt(w_off))
    w_acc = p.accept.weight(3.0)
    assert p.rel_uncertainty(SPEC, b, 3.0) == pytest.approx(math.sqrt(0.02 ** 2 / w_off + 0.02 ** 2 / w_acc))
    assert p.rel_uncertainty(OFF, p.buckets.of(40), 3.0) == pytest.approx(0.02 / math.sqrt(1e-9))
    late = 60.0                                               # both weights have decayed below 1
    w_off, w_acc = p.q[OFF][b].weight(late), p.accept.weight(late)
    assert w_off < 1 and w_acc < 1
    assert p.rel_uncertainty(SPEC, b, late) == pytest.approx(math.sqrt(0.02 ** 2 / w_off + 0.02 ** 2 / w_acc))


def test_an_arm_is_known_by_its_weight_or_a_recent_try():
    p = make_policy("ucb", {"min_samples": 0.2, "half_life_s": 10.0, "prefill": 0}, max_batch_size=64)
    b = p.buckets.of(8)
    assert not p.known(OFF, b, 0.0)
    p.observe(Sample(1.0, 8, 0, 8, 0.01, False))              # tried at 1.0, no weight (prefills dropped)
    assert p.q[OFF][b].w == 0
    assert p.known(OFF, b, 10.9) and not p.known(OFF, b, 11.0)
    p.observe(Sample(20.0, 8, 0, 8, 0.01, True))              # weight 1, halving every 10 s: 0.2 at ~43.2
    assert p.known(OFF, b, 43.1) and not p.known(OFF, b, 43.3)
    for min_samples, known in ((0.5, True), (0.6, False)):   # one half-life on: weight 0.5 exactly, try stale
        q = make_policy("ucb", {"min_samples": min_samples, "half_life_s": 10.0}, max_batch_size=64)
        q.observe(Sample(20.0, 8, 0, 8, 0.01, True))
        assert q.known(OFF, b, 30.0) is known
    d = make_policy("ucb", {"half_life_s": 10.0}, max_batch_size=64)   # default min_samples 0.01
    d.observe(Sample(20.0, 8, 0, 8, 0.01, True))
    assert d.known(OFF, b, 30.0)


def test_gains_weigh_each_bucket_by_its_traffic():
    p = make_policy("ucb", max_batch_size=64)
    for t in range(3):
        p.observe(Sample(0.0, 2, 3, 6, 0.02, True))           # accept 3, 100 req/s spec
        p.observe(Sample(0.0, 2, 0, 2, 0.01, True))           # 200 req/s off: gain 300/200 - 1 = 0.5
    gains = p.gains(0.0)
    assert gains[p.buckets.of(2)] == pytest.approx(6 * 0.5)
    assert gains[p.buckets.of(1)] == 0.0 and not p.estimable(p.buckets.of(1))
    p.observe(Sample(0.0, 3, 0, 3, 0.01, True))               # off only at batch 3
    assert not p.estimable(p.buckets.of(3)) and p.estimable(p.buckets.of(2))


def seeded(policy: str = "ucb", t0: float = 0.0, early_accept: float | None = None, **params):
    """Bucket 4 known in both modes (spec loses by 50 %), accept length 2.0 fresh at t0, K = 3
    (early_accept: one spec batch at time 0 with that accept length first, the same step time)."""
    p = make_policy(policy, params, max_batch_size=64)
    if early_accept is not None:
        p.observe(Sample(0.0, 4, 3, round(4 * early_accept), 0.04, True))
    for _ in range(3):
        p.observe(Sample(t0, 4, 3, 8, 0.04, True))            # K = 3; 100 req/s x 2.0 = 200 tok/s
        p.observe(Sample(t0, 4, 0, 4, 0.01, True))            # 400 tok/s
    return p


def test_a_clear_loss_below_settles_untried_spec_above_but_not_off():
    p = seeded()
    b = p.buckets.of(8)
    assert p.dominated(SPEC, b, 1.0) and not p.dominated(OFF, b, 1.0)
    assert not p.dominated(SPEC, p.buckets.of(2), 1.0)        # nothing known below batch 2
    assert not seeded(dominance=1.0).dominated(SPEC, b, 1.0)  # a 50 % loss is within a margin of 100 %


def test_a_stale_accept_length_settles_only_a_loss_at_the_longest_accept_seen_lately():
    p = seeded(t0=10.0, early_accept=4.0, accept_half_life_s=4.0)
    b = p.buckets.of(8)
    assert p.accept.mean == pytest.approx(2.1113, abs=1e-4) and p.accept_hi[1] == 10.0
    assert p.accept_hi[0] == pytest.approx(3.9805, abs=1e-4)     # the highest estimate lately: after the early batch
    assert p.dominated(SPEC, b, 14.0)                         # 4 s old: not stale yet, spec loses at accept 2.1
    assert not p.dominated(SPEC, b, 14.5)                     # stale: at the accept seen lately (~3.97) it ties
    assert seeded(t0=10.0, accept_half_life_s=4.0).dominated(SPEC, b, 14.5)   # never higher than 2.0: still a loss
    q = seeded(t0=10.0, early_accept=4.0, accept_half_life_s=4.0)
    q.observe(Sample(10.0, 4, 3, 8, 0.16, True))              # slower spec: loses even at accept ~4
    assert q.dominated(SPEC, b, 14.5)


def test_reasons_of_decide():
    p = seeded()
    d = p.decide(Snapshot(1.0, 0, 64, live_batch_size=8))     # spec untried at 8 but dominated by 4
    assert d == type(d)(0, 0, "best threshold 0: live batch 8 is plain decoding (not measured)", 0.0, False)
    p.observe(Sample(0.0, 2, 0, 2, 0.01, True))               # off known at 2, spec not (nothing below)
    d = p.decide(Snapshot(1.0, 0, 64, live_batch_size=2))
    assert d == type(d)(2, 0, "trial: speculate at batch 2 to measure it (never measured)", 0.0, True)
    fresh = make_policy("ucb", max_batch_size=64)
    d = fresh.decide(Snapshot(1.0, 30, 64, live_batch_size=20))
    assert (d.threshold, d.reason, d.untried) == (18, "trial: plain decode at batch 19-20 to measure it "
                                                      "(never measured)", True)
    d = p.decide(Snapshot(1.0, 0, 64, live_batch_size=4))     # both known: the index says off
    assert (d.threshold, d.reason, d.untried) == (
        0, "best threshold 0: live batch 4 is plain decoding (speculation -50% tok/s)", False)
    assert fresh.decide(Snapshot(1.0, 0, 64)).reason == ("best threshold 0: live batch 1 is plain decoding "
                                                         "(not measured)")   # no live batch: bucket 1


def test_saved_state_is_checked_and_restored():
    p = seeded()
    saved = p.state()
    assert saved["tried"][OFF][p.buckets.of(4)] == 0.0 and saved["tried"][OFF][0] is None
    q = make_policy("ucb", max_batch_size=64)
    q.load_state(saved)
    assert q.state() == saved and q.max_steps == 3 and q.tried[OFF][0] == -math.inf
    for key, message in [("q_off", "does not match 28 buckets (q_off)"), ("q_spec", "does not match 28 buckets (q_spec)")]:
        bad = dict(saved, **{key: saved[key][:-1]})
        with pytest.raises(PolicyError) as err:
            q.load_state(bad)
        assert str(err.value) == f"policy ucb: saved state {message}"
    with pytest.raises(PolicyError) as err:
        q.load_state(dict(saved, accept=[1, 2]))
    assert str(err.value) == "policy ucb: saved state has no acceptance record"
    with pytest.raises(PolicyError):
        q.load_state(dict(saved, q_off=[[0, 0, 0]] * len(q.buckets)))
    r = make_policy("ucb", max_batch_size=64)
    r.load_state({k: v for k, v in saved.items() if k not in ("tried", "max_steps")})   # older states
    assert r.tried == ([-math.inf] * len(r.buckets), [-math.inf] * len(r.buckets)) and r.max_steps == 1
    r.load_state(dict(saved, tried=[[0.0]]))                                            # a mismatched one: ignored
    assert r.tried[OFF][0] == -math.inf
    p.observe(Sample(1.0, 4, 3, 12, 0.04, True))
    assert make_policy("ucb", max_batch_size=64).load_state(p.state()) is None


def test_ucb_index_is_the_mean_times_one_plus_its_bonus():
    p = seeded("ucb", c=2.0)
    b = p.buckets.of(4)
    bonus = 2.0 * math.sqrt(2.0 * math.log(6.0)) * (0.02 / math.sqrt(3.0))
    assert p.index(OFF, b, 0.0, 6.0) == pytest.approx(400.0 * (1.0 + bonus))
    assert p.index(OFF, b, 0.0, 1.0) == pytest.approx(400.0 * (1.0 + 2.0 * math.sqrt(2.0) * 0.02 / math.sqrt(3.0)))
    assert p.choose_arm(b, 0.0, OFF) == OFF and p.choose_arm(b, 0.0, SPEC) == OFF
    q = make_policy("ucb", {"c": 0.0}, max_batch_size=64)
    for _ in range(3):
        q.observe(Sample(0.0, 4, 3, 12, 0.02, True))            # 200 req/s x 3 = 600 tok/s
        q.observe(Sample(0.0, 4, 0, 4, 0.01, True))             # 400 tok/s
    assert q.choose_arm(b, 0.0, OFF) == SPEC and q.index(SPEC, b, 0.0, 6.0) == pytest.approx(600.0)


def test_thompson_without_width_draws_the_means():
    p = seeded("thompson", scale=0.0)
    b = p.buckets.of(4)
    assert p.draw(OFF, b, 0.0) == pytest.approx(400.0) and p.draw(SPEC, b, 0.0) == pytest.approx(200.0)
    assert p.choose_arm(b, 0.0, OFF) == OFF and p.choose_arm(b, 0.0, SPEC) == OFF
    for _ in range(2):
        p.observe(Sample(0.0, 4, 3, 16, 0.01, True))            # fast spec batches: spec now ahead (412 tok/s)
    assert p.mean(SPEC, b) == pytest.approx(411.68, abs=0.01) and p.choose_arm(b, 0.0, OFF) == SPEC


def test_thompson_random_state_round_trips_and_is_checked():
    p = seeded("thompson")
    saved = p.state()
    draws = [p.draw(OFF, 0, 0.0) for _ in range(3)]
    q = make_policy("thompson", max_batch_size=64)
    q.load_state(saved)
    assert [q.draw(OFF, 0, 0.0) for _ in range(3)] == draws
    with pytest.raises(PolicyError) as err:
        q.load_state(dict(saved, rng=[3, [1, 2], None]))
    assert str(err.value).startswith("policy thompson: saved random state is unreadable (")
    q.load_state({k: v for k, v in saved.items() if k != "rng"})  # a state without one keeps the generator


def test_on_a_tie_every_learner_keeps_speculation_off():
    for name, params in (("ucb", {"c": 0.0, "indifference": 0.0}), ("thompson", {"scale": 0.0, "indifference": 0.0}),
                         ("model", {"min_buckets": 64})):
        p = make_policy(name, params, max_batch_size=64)
        p.observe(Sample(0.0, 4, 1, 8, 0.02, True))            # 200 req/s x accept 2 = 400 tok/s
        p.observe(Sample(0.0, 4, 0, 4, 0.01, True))            # 400 tok/s
        b = p.buckets.of(4)
        assert p.mean(SPEC, b) == p.mean(OFF, b), name
        assert p.choose_arm(b, 0.0, OFF) == OFF and p.choose_arm(b, 0.0, SPEC) == OFF, name   # even for spec


def test_ucb_ranks_arms_with_the_buckets_total_weight(monkeypatch):
    p = seeded("ucb")
    seen = []
    real = p.index
    monkeypatch.setattr(p, "index", lambda arm, b, now, total: seen.append(total) or real(arm, b, now, total))
    p.choose_arm(p.buckets.of(4), 0.0, OFF)
    assert seen == [6.0, 6.0]
