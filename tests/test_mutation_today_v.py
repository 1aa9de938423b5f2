"""helper's mutation check of the decisions and the mechanism around them (bench/results/mutation-today-2026-12-07v.md):
policies' decide, the guard, the control loop's tick and the daemon's retune. A test for each surviving mutant that is
not equivalent, named by its id, and for the defect found beside them. No wall-clock assertions."""
from __future__ import annotations

import time

import pytest

from controller.control.guard import Guard
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import Decision
from policies.base import Policy
from policies.buckets import Buckets
from policies.summary import flip_threshold

B = Buckets(256)


def _guard(initial: int = 8, **kw) -> Guard:
    return Guard(GuardConfig(**kw), B, initial=initial)


# --- policies/summary.py: flip_threshold -------------------------------------------------------------------------------
def test_flip_off_no_min_a_bucket_already_off_keeps_the_threshold_under_it():
    """flip-off-no-min: `min(threshold, low(bucket) - 1)` -> `low(bucket) - 1`. The nearest threshold that puts a bucket
    off is the threshold itself when the bucket is off already (learner._arm, its one caller, asks only for a bucket
    in the other mode, where the two agree: the function's own contract, which test_policies checks from one side)."""
    assert flip_threshold(3, B, B.of(5), speculate=False) == 3
    assert flip_threshold(12, B, B.of(5), speculate=False) == 4
    assert flip_threshold(20, B, B.of(5), speculate=True) == 20


# --- controller/control/guard.py ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,applied,said", [
    ({"min_threshold": 4, "fallback_threshold": 2}, 4, "4 (fallback_threshold 2, within the bounds 4 .. 256)"),
    ({"max_threshold": 32, "fallback_threshold": 100}, 32, "32 (fallback_threshold 100, within the bounds 0 .. 32)"),
    ({"min_threshold": 4, "fallback_threshold": 6}, 6, "6"),
])
def test_fallback_unclamped_a_fallback_outside_the_bounds_is_applied_within_them_and_said_so(kw, applied, said):
    """fallback-unclamped: the fallback threshold went out as configured, past min_threshold / max_threshold (and the
    engine's largest batch, which the bounds include). Defect beside it: the clamped one's row said the configured
    value ('fallback to 2' for a 4 applied), as the fixed policy's 'taken as' row does not."""
    g = _guard(fallback_after_s=5, **kw)
    assert g.apply(1.0, Decision(50, 50, "x"), None) == (applied, f"fallback to {said}: no samples yet", False)
    assert g.apply(20.0, Decision(50, 50, "x"), 10.0) == (applied, f"fallback to {said}: no samples for 10.0 s", False)


@pytest.mark.parametrize("kw,said", [({"fallback_threshold": 200}, "64 (fallback_threshold 200, within the bounds 0 .. 64)"),
                                     ({"min_threshold": 100, "fallback_threshold": 2},
                                      "64 (fallback_threshold 2, within the bounds 64 .. 64)")])
def test_fallback_beside_the_engines_largest_batch_is_that_batch(kw, said):
    """The bounds the row names are the ones applied: the engine's largest batch caps max_threshold and min_threshold
    alike (Guard.clamp)."""
    g = Guard(GuardConfig(**kw), Buckets(64), initial=8)
    assert g.apply(20.0, Decision(50, 50, "x"), 0.0)[:2] == (64, f"fallback to {said}: no samples for 20.0 s")


def test_hyst_abs_a_move_the_policy_expects_to_lose_is_not_made():
    """hyst-abs: `decision.gain < min_gain` -> `abs(decision.gain) < min_gain`. The hysteresis holds every move worth
    less than min_gain, a loss above all (the policy's monotone summary and its recent-traffic gain can disagree): a
    proposal expected to lose 6 % was made."""
    g = _guard(stabilisation_s=0)
    threshold, reason, trial = g.apply(1.0, Decision(14, 14, "up", gain=-0.06), 1.0)
    assert (threshold, trial, g.exploit) == (8, False, 8)
    assert reason.startswith("guard: 8 held, the move to 14 would gain -6.00% of the current traffic's tok/s"), reason
    assert g.apply(2.0, Decision(14, 14, "up", gain=0.06), 2.0)[0] == 14       # (worth it: made)


def test_urgent_signed_a_held_proposal_back_to_the_applied_threshold_makes_the_catch_up_urgent():
    """urgent-signed: `abs(decision.gain) >= urgent_gain` -> `decision.gain >= urgent_gain`. A move coalesced (14 moved
    no live batch size: 8 stays applied, 14 is the exploit threshold) is made once a batch size it moves runs. When
    the policy then proposes 8 again at -6 % (14 beats 8 by that much), the hysteresis holds the proposal, and the
    catch-up 8 -> 14 is worth what the proposal would lose: urgent, made with the change budget spent."""
    g = _guard(stabilisation_s=0, changes_per_min=0.001, changes_burst=2)
    assert g.apply(1.0, Decision(14, 14, "up", gain=0.06), 1.0, applied=8, live=[4])[0] == 8     # coalesced
    assert g.exploit == 14
    g.changes.tokens = 0.0                                                  # the change budget spent
    threshold, reason, trial = g.apply(2.0, Decision(8, 8, "back", gain=-0.06), 2.0, applied=8, live=[4, 12])
    assert (threshold, trial, g.exploit) == (14, False, 14), reason
    small = _guard(stabilisation_s=0, changes_per_min=0.001, changes_burst=2)     # (a small one: the budget decides)
    small.apply(1.0, Decision(14, 14, "up", gain=0.06), 1.0, applied=8, live=[4])
    small.changes.tokens = 0.0
    assert small.apply(2.0, Decision(8, 8, "back", gain=-0.01), 2.0, applied=8, live=[4, 12])[0] == 8


# --- controller/control/loop.py ----------------------------------------------------------------------------------------
class _Proposes(Policy):
    """A policy that proposes what the test says, as a best threshold (no trial), with no gain estimate."""
    name = "proposes"

    def __init__(self):
        super().__init__(max_batch_size=256)
        self.next = 8

    def decide(self, snap):
        return Decision(self.next, self.next, f"best {self.next}")


def test_loop_pin_keeps_proposals_an_unpin_is_not_held_by_proposals_from_before_the_pin():
    """loop-pin-keeps-proposals: pin() without guard.forget_proposals(). A proposal made before the pin (8, within the
    stabilisation window) still stood in the window after the unpin and held the policy's new best (14) at 8: the
    unpin's row said the policy's threshold and applied the old one."""
    policy = _Proposes()
    loop = ControlLoop(policy, GuardConfig(stabilisation_s=10.0, changes_per_min=0), initial_threshold=8)
    loop.last_sample_t = 0.0
    assert loop.tick(0.5).threshold == 8                   # the policy's 8 is a proposal in the window
    loop.pin(3)
    assert loop.tick(1.0).threshold == 3
    policy.next = 14
    loop.last_sample_t = 1.5
    loop.pin(None)
    tick = loop.tick(1.5)
    assert (tick.threshold, loop.guard.exploit) == (14, 14), tick.reason
    assert tick.reason == "unpinned by an operator; best 14"


# --- controller/daemon/service.py: retune -------------------------------------------------------------------------------
def test_retune_stall_any_a_failing_retune_does_not_restart_the_stall_clock(short_tmp):
    """retune-stall-any: the retune restarted the stall clock (last_retune_ok) whether it worked or not: a policy that
    raises at every tick kept the daemon alive and deciding nothing, never 'control loop stalled', never restarted."""
    from controller.daemon.lifecycle import Daemon
    from tests.fakes import feed, good, make_service
    svc, writer = make_service(short_tmp)
    try:
        feed(svc, [good(100.0 + i * 0.001, bs=1 + i % 8) for i in range(50)])
        real = svc.loop.policy.decide

        def broken(snap):
            raise RuntimeError("decide exploded")
        svc.loop.policy.decide = broken
        daemon = Daemon(svc.cfg)
        daemon.stall_s, daemon.watch = 60.0, {"state writer": writer.thread}
        svc.last_retune_ok = before = time.monotonic() - 61.0
        svc.retune()
        assert svc.last_retune_ok == before and svc.job_errors == {"retune": 1}
        assert daemon._fatal_condition(svc.engine, svc) == \
            "control loop stalled: no retune has worked for 61 s (RuntimeError: decide exploded)"
        svc.loop.policy.decide = real
        svc.retune()                                            # one that works: the clock starts again
        assert svc.last_retune_ok > before + 60.0
        assert daemon._fatal_condition(svc.engine, svc) is None
    finally:
        writer.stop()
