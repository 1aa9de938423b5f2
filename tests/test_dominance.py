"""Dominance (policies/learner.py BucketLearner.dominated): a clear loss of speculation below a bucket
settles an untried spec arm there, a clear win above settles an untried off arm, within a margin."""
from __future__ import annotations

from policies import Sample, make_policy
from policies.base import OFF, SPEC, relative_gain
from policies.learner import SETTLES


def policy(wins: dict[int, float], batches: int = int(SETTLES) + 1, **params):
    """`batches` samples of each mode per batch size; spec's tokens/s is off's x (1 + wins[bs]), accept 2."""
    p = make_policy("ucb", params, max_batch_size=64)
    for bs, gain in wins.items():
        for _ in range(batches):
            p.observe(Sample(0.0, bs, 3, 2 * bs, 2 * 0.01 / (1 + gain), True))
            p.observe(Sample(0.0, bs, 0, bs, 0.01, True))
    return p


def test_a_clear_win_above_settles_untried_off_and_nothing_else_does():
    assert policy({5: 0.5}).dominated(OFF, 3, 0.1)          # batch 4 (index 3), a win at batch 5
    assert not policy({3: 0.5}).dominated(OFF, 3, 0.1)      # a win at batch 3 is below: it settles nothing
    assert not policy({4: 0.5}).dominated(OFF, 3, 0.1)      # nor does the bucket itself
    assert policy({6: 0.5}).dominated(OFF, 3, 0.1)          # further above counts too
    assert not policy({5: -0.5}).dominated(OFF, 3, 0.1)     # a loss above settles no off arm


def test_small_differences_settle_nothing():
    assert not policy({2: 0.05}).dominated(SPEC, 3, 0.1)    # spec wins by 5 % below: no loss to carry
    assert not policy({2: -0.02}).dominated(SPEC, 3, 0.1)   # loses by 2 %, within the 3 % margin
    assert not policy({5: 0.02}).dominated(OFF, 3, 0.1)
    assert policy({2: -0.05}).dominated(SPEC, 3, 0.1) and policy({5: 0.05}).dominated(OFF, 3, 0.1)   # 5 %: beyond it


def test_a_difference_of_exactly_the_margin_settles_nothing():
    for arm, bs, sign in ((SPEC, 2, -1), (OFF, 5, 1)):
        probe = policy({bs: sign * 0.2})
        o = probe.buckets.of(bs)
        gain = relative_gain(probe.q[SPEC][o].mean * probe.accept.mean, probe.mean(OFF, o))
        assert not policy({bs: sign * 0.2}, dominance=abs(gain)).dominated(arm, 3, 0.1)
        assert policy({bs: sign * 0.2}, dominance=abs(gain) * 0.99).dominated(arm, 3, 0.1)


def test_a_bucket_settles_others_only_once_both_its_modes_ran_settles_batches():
    """On the H200 (12-03) two speculative batches at batch 1, the first right after the switch, settled speculation
    as a loss at batch 24 for ten minutes (tests/test_idle_gap.py has the whole case)."""
    assert not policy({2: -0.5}, batches=int(SETTLES)).dominated(SPEC, 3, 0.1)
    assert not policy({5: 0.5}, batches=int(SETTLES)).dominated(OFF, 3, 0.1)
    assert policy({2: -0.5}, batches=int(SETTLES) + 1).dominated(SPEC, 3, 0.1)
    assert policy({2: -0.5}, batches=int(SETTLES) + 1).dominated(SPEC, 3, 600.0)    # ten minutes on: still
