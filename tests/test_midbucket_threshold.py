"""A threshold inside a bucket (95-105 at 100: an operator's initial_threshold, or a `fixed` threshold carried over to a
learner) runs the bucket's lower batch sizes speculating and the rest not. The learners read the bucket's mode from
its upper edge, so a batch of 96 speculating at 100 while speculation lost there by 30 % was never moved off
(helper-83: thompson, ucb and model held 100 for 120 s, 100 % of the batches speculating). Each case here goes red
when the learner keeps the wrong mode for the live batch size."""
import random

import pytest

from controller.contract import speculates
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import Sample, make_policy


def drive(loop: ControlLoop, t0: float, seconds: float, bs: int, spec_factor: float, seed: int = 0) -> float:
    """A closed loop at one batch size: plain 20 ms a step, speculating accept 2.0 at spec_factor x plain's tok/s.
    Returns the share of the batches that speculated in the last half of the run."""
    rng = random.Random(seed)
    t, next_tick, late, late_spec = t0, t0 + 0.5, 0, 0
    while t < t0 + seconds:
        spec = speculates(bs, loop.threshold)
        off_step = 0.02 * (1 + 0.02 * rng.gauss(0, 1))
        step = off_step * 2.0 / spec_factor if spec else off_step
        loop.observe(Sample(t + step, bs, 3 if spec else 0, 2 * bs if spec else bs, step, True))
        t += step
        if t > t0 + seconds / 2:
            late, late_spec = late + 1, late_spec + spec
        while next_tick <= t:
            loop.tick(next_tick)
            next_tick += 0.5
    return late_spec / late


@pytest.mark.parametrize("name", ["thompson", "ucb", "model"])
@pytest.mark.parametrize("bs,spec_factor", [(96, 0.7), (96, 1.3), (102, 1.3), (102, 0.7)])
def test_an_initial_threshold_inside_a_bucket_is_left_for_the_mode_that_pays(name, bs, spec_factor):
    loop = ControlLoop(make_policy(name, seed=0), GuardConfig(), initial_threshold=100)
    share = drive(loop, 0.0, 60.0, bs, spec_factor)
    pays = spec_factor > 1
    assert (share > 0.9 if pays else share < 0.1) and speculates(bs, loop.threshold) == pays, (loop.threshold, share)


def test_the_bandit_after_an_operators_fixed_threshold_inside_a_bucket():
    loop = ControlLoop(make_policy("fixed", {"threshold": 100}), GuardConfig(), initial_threshold=0)
    drive(loop, 0.0, 5.0, 96, 0.7)
    assert loop.threshold == 100
    loop.set_policy(make_policy("bandit", seed=0))          # as service.set_policy does
    share = drive(loop, 5.0, 60.0, 96, 0.7)
    assert share < 0.1 and not speculates(96, loop.threshold), (loop.threshold, share)


def test_an_edge_is_decided_as_before():
    """From a bucket edge the learner moves as it did (and the snap goes to the edge at or under)."""
    policy = make_policy("thompson", seed=0)
    loop = ControlLoop(policy, GuardConfig(), initial_threshold=105)
    drive(loop, 0.0, 10.0, 96, 0.7)
    assert loop.threshold == 94 and policy.buckets.edge_at_or_under(100) == 94
    assert policy.buckets.edge_at_or_under(0) == 0 and policy.buckets.edge_at_or_under(10_000) == policy.buckets.edges[-1]
