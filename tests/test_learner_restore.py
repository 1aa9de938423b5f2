"""A learner restored from its own state() decides as the one it was saved from: a restart, a switch back, and `policy
set` of the running policy with new parameters (service.set_policy: "keeps what it learned up to this instant") all
go through state() / load_state(). helper-83: the load's return to each bucket (`arrived`, read by the trend's guess
and by shift trials) was not saved, and ucb restored 3.5 s into crossover-a's chat phase tried plain decoding at
batch 2 where the running one, its trend settled, kept speculating up to 7."""
import copy
import json
import math

import pytest

from controller.sim import evaluate as ev
from controller.sim.profile import Segment, load_profile, load_trace
from policies import Snapshot, make_policy


def _learned(name: str):
    prof = load_profile("crossover-a")
    segs = [*load_trace("coding-to-chat").segments[:3], Segment(3.5, 2, 1.7, "chat C=2")]
    kept = []
    ev.run_segments(prof, segs, ev.policy_runner(name, None, prof, 0), 0, keep=kept)
    loop = kept[0].loop
    live = loop.policy.buckets.high(max(loop._live, key=loop._live.__getitem__)) if loop._live else loop.live_batch_size
    return prof, loop, Snapshot(loop.last_sample_t, loop.guard.exploit, loop.policy.max_batch_size, live,
                                loop.prefills_pay_draft)


@pytest.mark.parametrize("name", ["ucb", "thompson", "model"])
def test_a_learner_reloaded_from_its_state_decides_as_the_one_saved(name):
    prof, loop, snap = _learned(name)
    going_on = copy.deepcopy(loop.policy)
    reloaded = make_policy(name, seed=0, max_batch_size=prof.max_batch_size)
    reloaded.load_state(json.loads(json.dumps(loop.policy.state())))     # as service.set_policy / _restore do
    assert reloaded.arrived == going_on.arrived and vars_of(reloaded.run) == vars_of(going_on.run)
    assert reloaded.decide(snap) == going_on.decide(snap)


def vars_of(run) -> tuple:
    return run.bucket, run.since, run.requests, run.tokens


def test_a_state_from_before_or_a_broken_part_loads_the_rest():
    prof, loop, _ = _learned("ucb")
    state = json.loads(json.dumps(loop.policy.state()))
    for part, broken in (("arrived", [True] * 3), ("fresh_run", ["0", None, 1.0, 2.0]), ("fresh_run", [0, 1.0, None, 2.0])):
        older = {k: v for k, v in state.items() if k != part}
        for given in (older, {**older, part: broken}):
            fresh = make_policy("ucb", seed=0, max_batch_size=prof.max_batch_size)
            fresh.load_state(given)
            assert fresh.state()["q_spec"] == state["q_spec"]
            assert fresh.arrived == ([-math.inf] * len(fresh.buckets) if part == "arrived" else loop.policy.arrived)
