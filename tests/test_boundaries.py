"""Every comparison that routes or bounds, at its boundary: a batch exactly at the threshold (the
contract, the plugin, the simulated engine, the evaluation, the policies), the guard's stabilisation
window, rate cap, exploration budget and fallback, and the monotone summary's keep-current rule."""
from __future__ import annotations

import threading

import pytest

from controller.contract import speculates
from controller.control.guard import Guard
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from controller.daemon.engines.sim import SimEngine
from controller.plugin.instance import Plugin
from controller.sim.core import SimCore
from controller.sim.evaluate import LoopRunner, StaticRunner
from controller.sim.profile import load_profile
from policies import Decision, Sample, Snapshot, make_policy
from policies.buckets import Buckets
from policies.summary import monotone_threshold
from tests.test_plugin_cpu import worker


# --- a batch exactly at the threshold speculates, one above does not -----------------------------
@pytest.mark.parametrize("bs,threshold,want", [(5, 5, True), (6, 5, False), (4, 5, True), (1, 0, False),
                                               (1, 1, True)])
def test_the_routing_predicate(bs, threshold, want):
    assert speculates(bs, threshold) is want


def test_plugin_router_drafts_at_the_threshold_and_not_above():
    plugin = Plugin({})
    router = plugin.router
    router.checked, router.k, router.threshold = True, 3, 8
    w = worker()
    w.speculative_num_steps = 0                          # off before: a batch of 8 must switch it on
    for bs in (8, 9, 8):
        router.activate_step_by_batch(None, w, bs)
    assert w.adaptive_controller.activated == [3, 0, 3]


def test_sim_engine_speculates_at_the_threshold_and_not_above():
    prof = load_profile("crossover-a")
    steps_at = {}
    for threshold in (5, 4):
        eng = SimEngine(prof, concurrency=5, speed=1e9)
        got, enough = [], threading.Event()

        def sink(s, got=got, enough=enough, eng=eng, threshold=threshold):
            if eng.threshold == threshold:               # samples routed at the new threshold
                got.append(s)
                if len(got) >= 40:
                    enough.set()
        eng.start(sink)
        eng.set_threshold(threshold)
        assert enough.wait(30)
        eng.stop()
        steps_at[threshold] = {s.steps for s in got[-20:]}
    assert steps_at == {5: {prof.spec_steps}, 4: {0}}


def test_evaluation_runners_route_at_the_threshold():
    static = StaticRunner(5)
    assert static.speculate(5) and not static.speculate(6)
    loop = ControlLoop(make_policy("fixed", {"threshold": 5}), GuardConfig(), initial_threshold=5)
    runner = LoopRunner(loop)
    assert runner.speculate(5) and not runner.speculate(6)
    assert runner.exploit_speculates(5) and not runner.exploit_speculates(6)


def test_policy_counts_the_live_bucket_at_the_threshold_as_speculating():
    """Bucket 8 sits exactly at an exploit threshold of 8: it speculates, so an untried off arm there is
    an exploration down to 7 (read as off, nothing would be explored)."""
    p = make_policy("thompson", max_batch_size=64)
    for i in range(5):
        p.observe(Sample(0.1 * i, 8, 2, 16, 0.02, True))          # spec known at batch 8, off not
    d = p.decide(Snapshot(1.0, 8, 64, live_batch_size=8))
    assert (d.threshold, d.exploit_threshold) == (7, 8) and d.exploratory, d


def test_simulator_batch_is_the_capped_concurrency():
    prof = load_profile("h200-2b6")                                # max batch size 128
    core = SimCore(prof, 0)
    core.set_load(500)
    assert core.step(False).batch_size == 128


# --- the guard -------------------------------------------------------------------------------------
B = Buckets(256)


def guard(initial=8, **kw) -> Guard:
    return Guard(GuardConfig(**kw), B, initial=initial)


def test_stabilisation_moves_up_only_to_the_lowest_recent_proposal():
    g = guard(stabilisation_s=1.0, max_step_buckets=2)
    assert g.apply(0.0, Decision(12, 12, "x"), 0.0)[0] == 10        # rate cap: 2 buckets
    assert g.apply(0.5, Decision(11, 11, "x"), 0.5)[0] == 11        # 12 and 11 above 10: the lower, 11


def test_stabilisation_moves_down_only_to_the_highest_recent_proposal():
    g = guard(stabilisation_s=1.0, max_step_buckets=2)
    assert g.apply(0.0, Decision(4, 4, "x"), 0.0)[0] == 6
    assert g.apply(0.5, Decision(5, 5, "x"), 0.5)[0] == 5           # 4 and 5 below 6: the higher, 5


def test_a_proposal_exactly_one_window_old_still_counts():
    g = guard(stabilisation_s=1.0, max_step_buckets=100)
    assert g.apply(0.0, Decision(12, 12, "x"), 0.0)[0] == 12
    assert g.apply(1.0, Decision(4, 4, "x"), 1.0)[0] == 12          # 12 (1.0 s old) and 4 straddle 12: hold
    assert g.apply(2.5, Decision(4, 4, "x"), 2.5)[0] == 4


def test_rate_cap_allows_exactly_max_step_buckets():
    g = guard(initial=16, stabilisation_s=0, max_step_buckets=1)
    assert g.apply(1.0, Decision(19, 19, "x"), 1.0)[0] == 19        # one bucket up (18, 20]: allowed as is
    g = guard(initial=16, stabilisation_s=0, max_step_buckets=1)
    assert g.apply(1.0, Decision(21, 21, "x"), 1.0)[0] == 18        # two buckets: capped to the next edge


def test_exploration_budget_spent_at_exactly_the_share():
    g = guard(stabilisation_s=0, explore_share=0.5)
    g.account(1.0, batches=10, exploratory=True)
    g.account(1.0, batches=10, exploratory=False)
    assert g.explore_used == 0.5
    thr, reason, exploring = g.apply(1.0, Decision(20, 8, "explore"), 1.0)
    assert (thr, exploring) == (8, False) and "budget" in reason
    g.account(1.0, batches=1, exploratory=False)                     # just under the share again
    assert g.apply(1.0, Decision(20, 8, "explore"), 1.0)[:3:2] == (20, True)


def test_a_zero_exploration_share_never_explores():
    g = guard(stabilisation_s=0, explore_share=0.0)
    assert g.apply(1.0, Decision(20, 8, "explore"), 1.0)[2] is False


def test_fallback_starts_only_after_fallback_after_s():
    g = guard(stabilisation_s=0, max_step_buckets=100, fallback_after_s=5, fallback_threshold=2)
    assert g.apply(100.0, Decision(50, 50, "x"), 95.0)[0] == 50      # exactly 5 s: not yet
    assert g.apply(100.5, Decision(50, 50, "x"), 95.0)[0] == 2


def test_bounds_are_inclusive():
    g = guard(min_threshold=4, max_threshold=32, stabilisation_s=0, max_step_buckets=100)
    assert g.apply(1.0, Decision(32, 32, "x"), 1.0)[0] == 32
    assert g.apply(2.0, Decision(4, 4, "x"), 2.0)[0] == 4
    assert guard(max_threshold=1000).hi == 256                       # clipped to the engine's max batch


# --- the monotone summary ----------------------------------------------------------------------------
def test_summary_keeps_a_current_threshold_inside_a_bucket_exactly():
    b = Buckets(256)
    assert b.of(19) == b.of(20) and b.high(b.of(19)) == 20          # 19 is not a bucket edge
    assert monotone_threshold([0.0] * len(b), b, current=19) == 19
    gains = [1.0] * b.of(19) + [-1.0] * (len(b) - b.of(19))          # best: speculate up to bucket (16, 18]
    assert monotone_threshold(gains, b, current=19) == 19            # 19 speculates the same buckets: kept


def test_summary_breaks_equidistant_ties_toward_fewer_buckets():
    b = Buckets(24)
    gains = [1.0, -1.0, 1.0, -1.0] + [-1.0] * (len(b) - 4)          # best prefix sums at 1 and 3 buckets
    assert monotone_threshold(gains, b, current=2) == 1
    assert monotone_threshold(gains, b, current=3) == 3
