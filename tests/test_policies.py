import json

import pytest

from policies import (
    POLICIES,
    Decision,
    PolicyError,
    Sample,
    Snapshot,
    list_policies,
    make_policy,
    resolve_name,
)
from policies.buckets import Buckets
from policies.summary import flip_threshold, monotone_threshold
from tests.synthetic import Stream, run

LEARNERS = ["ucb", "thompson", "bandit"]


@pytest.mark.parametrize("name", LEARNERS)
def test_finds_crossover_at_12(name):
    loop = run(name, Stream(crossover=12, seed=1), seconds=240)
    assert loop.guard.exploit == 12


@pytest.mark.parametrize("name", LEARNERS)
def test_follows_shift_of_crossover_to_4(name):
    stream = Stream(crossover=12, seed=2)
    loop = run(name, stream, seconds=240)
    assert loop.guard.exploit == 12
    stream.crossover = 4
    run(name, stream, seconds=120, loop=loop)
    assert loop.guard.exploit == 4


@pytest.mark.parametrize("name", LEARNERS + ["model", "sglang-ema"])
def test_same_seed_same_decisions(name):
    def trace():
        loop = run(name, Stream(crossover=8, seed=3), seconds=30)
        return loop.threshold, json.dumps(loop.policy.state(), sort_keys=True)
    assert trace() == trace()


@pytest.mark.parametrize("name", ["ucb", "thompson", "model", "sglang-ema"])
def test_state_round_trips_through_json(name):
    loop = run(name, Stream(crossover=8, seed=4), seconds=30)
    saved = json.loads(json.dumps(loop.policy.state()))
    fresh = make_policy(name, seed=0, max_batch_size=24)
    fresh.load_state(saved)
    assert json.dumps(fresh.state(), sort_keys=True) == json.dumps(saved, sort_keys=True)
    snap = Snapshot(loop.last_sample_t, loop.guard.exploit, 24)
    if name != "thompson":   # thompson draws; its rng state is restored too, checked by the equality above
        assert fresh.decide(snap) == loop.policy.decide(snap)


def test_state_of_other_shape_is_refused():
    a = make_policy("ucb", max_batch_size=24)
    b = make_policy("ucb", max_batch_size=256)
    with pytest.raises(PolicyError, match="buckets"):
        b.load_state(a.state())


def test_fixed_always_never():
    snap = Snapshot(0.0, 3, 256)
    assert make_policy("fixed", {"threshold": 7}).decide(snap) == Decision(7, 7, "fixed threshold 7", command=True)
    assert make_policy("always").decide(snap).threshold == 256
    assert make_policy("never").decide(snap).threshold == 0


def test_a_fixed_threshold_above_the_largest_batch_runs_as_that_batch_and_says_so():
    """`policy set fixed --param threshold=300` on an engine of 256: history and status named 300 while 256 ran."""
    d = make_policy("fixed", {"threshold": 300}, max_batch_size=256).decide(Snapshot(0.0, 3, 256))
    assert (d.threshold, d.exploit_threshold) == (256, 256) and d.command
    assert d.reason == "fixed threshold 300, taken as 256, the engine's largest batch (every batch speculates)"
    at_top = make_policy("fixed", {"threshold": 256}, max_batch_size=256).decide(Snapshot(0.0, 3, 256))
    assert at_top == Decision(256, 256, "fixed threshold 256", command=True)


@pytest.mark.parametrize("params,match", [
    ({"c": "-1"}, r"parameter c=.*out of range \(allowed 0 .. 100\)"),
    ({"c": "abc"}, r"parameter c='abc' is not a number"),
    ({"half_life_s": 0}, r"half_life_s=0 out of range \(allowed 0.5 .. 3600\)"),
    ({"nope": 1}, r"unknown parameter 'nope' \(allowed: "),
])
def test_bad_parameters_name_the_parameter_and_range(params, match):
    with pytest.raises(PolicyError, match=match):
        make_policy("ucb", params)


def test_integer_parameter_rejects_fraction():
    with pytest.raises(PolicyError, match="threshold='2.5' is not an integer"):
        make_policy("fixed", {"threshold": "2.5"})


def test_unknown_policy_lists_known():
    with pytest.raises(PolicyError, match="unknown policy 'foo' .*bandit"):
        resolve_name("foo")
    assert resolve_name("bandit") in POLICIES


def test_list_policies_documents_every_param():
    rows = {r["name"]: r for r in list_policies()}
    assert set(rows) == set(POLICIES)
    assert "bandit" in rows[resolve_name("bandit")]["aliases"]
    assert {p["name"] for p in rows["ucb"]["params"]} >= {"c", "half_life_s"}


def _feed_slot(policy, accepted_drafts: float, n: int, t0: float = 0.0, bs: int = 4, k: int = 2):
    for i in range(n):
        spec = policy.decide(Snapshot(t0 + i, 0, 256)).threshold >= bs
        tokens = round(bs * (1 + accepted_drafts)) if spec else bs
        policy.observe(Sample(t0 + i, bs, k if spec else 0, tokens, 0.01, True))


def test_sglang_ema_drops_on_low_acceptance_and_probes_back():
    p = make_policy("sglang-ema")
    _feed_slot(p, accepted_drafts=0.0, n=15)          # warm-up 10, then an update at 15
    assert p.decide(Snapshot(20, 0, 256)).threshold < 4
    _feed_slot(p, accepted_drafts=0.0, n=5, t0=20)     # the next update probes K again
    assert p.decide(Snapshot(30, 0, 256)).threshold >= 4


def test_sglang_ema_keeps_speculating_when_acceptance_is_high():
    p = make_policy("sglang-ema")
    _feed_slot(p, accepted_drafts=1.5, n=100)
    assert p.decide(Snapshot(200, 0, 256)).threshold >= 4


def test_monotone_summary_and_ties():
    b = Buckets(24)
    gains = [1.0] * 12 + [-1.0] * (len(b) - 12)
    assert monotone_threshold(gains, b, current=0) == 12
    assert monotone_threshold([0.0] * len(b), b, current=5) == 5        # nothing known: stay
    assert monotone_threshold([-1.0] * len(b), b, current=9) == 0
    assert flip_threshold(12, b, b.of(14), speculate=True) == 14
    assert flip_threshold(12, b, b.of(5), speculate=False) == 4


def test_buckets_are_exact_to_16_and_cover_max():
    b = Buckets(256)
    assert b.edges[:16] == tuple(range(1, 17)) and b.edges[-1] == 256
    assert all(b.low(i) <= b.high(i) for i in range(len(b)))
    assert b.of(17) == b.of(18) != b.of(16) and b.of(10_000) == len(b) - 1


def test_live_bucket_is_where_most_batches_fell_since_the_last_decision():
    from controller.control.loop import ControlLoop
    loop = ControlLoop(make_policy("ucb", max_batch_size=64))
    for i in range(10):
        loop.observe(Sample(i * 0.01, 8, 0, 8, 0.01, True))
    loop.observe(Sample(0.2, 40, 0, 40, 0.02, True))          # the last batch is an outlier
    loop.observe(Sample(0.21, 40, 0, 40, 0.02, False))        # prefill intervals do not count
    loop.tick(0.3)
    assert loop.live_batch_size == 8
    loop.tick(0.8)                                            # no batch since: the live bucket stays
    assert loop.live_batch_size == 8
