"""The guard's change budget and coalescing, outcome by outcome (controller/control/guard.py apply,
controller/control/changes.py): every returned (threshold, reason, exploratory?) exactly, and the
edges: a batch at the lower threshold, a gain of exactly urgent_gain, the end of the learning window."""
from __future__ import annotations

import pytest

from controller.control.changes import ChangeBudget
from controller.control.guard import Guard, moves_any
from controller.control.guard_config import GuardConfig
from policies import Decision, PolicyError
from policies.buckets import Buckets

B = Buckets(256)
SPENT = "; guard: change budget spent"


def guard(initial: int = 8, **kw) -> Guard:
    kw = {"stabilisation_s": 0, "max_step_buckets": 100, "min_gain": 0, "changes_per_min": 0.001,
          "changes_burst": 2, **kw}
    return Guard(GuardConfig(**kw), B, initial=initial)


def test_moves_any_counts_a_batch_at_the_upper_threshold_not_at_the_lower():
    assert not moves_any(4, 8, [4]) and moves_any(4, 8, [5]) and moves_any(8, 4, [8]) and not moves_any(4, 8, [9])
    assert not moves_any(4, 8, [])


@pytest.mark.parametrize("initial", [-1, True, 3.5, None])
def test_an_initial_threshold_that_is_no_batch_size_is_refused(initial):
    with pytest.raises(PolicyError) as err:
        Guard(GuardConfig(), B, initial=initial)
    assert str(err.value) == f"guard: initial threshold {initial!r} is not a batch size"
    assert Guard(GuardConfig(), B, initial=0).exploit == 0


def test_account_without_a_count_or_flag_explores_nothing():
    g = guard()
    g.account(1.0, 100)
    assert g.explore_used == 0.0
    g.account(1.0, 100, exploratory=True)
    assert g.explore_used == 0.5


def test_discretionary_changes_spend_one_token_each():
    g = guard()
    assert g.apply(1.0, Decision(12, 12, "a", gain=0.01), 1.0, applied=8) == (12, "a", False)
    assert g.apply(2.0, Decision(16, 16, "b", gain=0.01), 2.0, applied=12) == (16, "b", False)   # the second token
    assert g.apply(3.0, Decision(20, 20, "c", gain=0.01), 3.0, applied=16) == (
        16, "c; guard: change budget spent, 20 waits", False)
    assert g.exploit == 16
    assert g.apply(4.0, Decision(20, 20, "d", gain=0.05), 4.0, applied=16) == (20, "d", False)    # exactly urgent
    assert g.apply(5.0, Decision(24, 24, "e", gain=0.0499), 5.0, applied=20)[0] == 20            # just under: held
    assert g.apply(6.0, Decision(28, 28, "f"), 6.0, applied=20) == (28, "f", False)              # no estimate
    free = guard(changes_per_min=0)                                    # 0: no limit at all
    for i in range(10):
        assert free.apply(float(i), Decision(12 + i, 12 + i, "x", gain=0.01), float(i), applied=11 + i)[0] == 12 + i


def test_a_trial_takes_two_tokens_and_its_end_none():
    g = guard()
    assert g.apply(1.0, Decision(20, 8, "trial"), 1.0, applied=8) == (20, "trial", True)
    assert g.apply(1.5, Decision(8, 8, "back", gain=0.01), 1.5, applied=20, exploring=True) == (8, "back", False)
    assert g.apply(2.0, Decision(20, 8, "trial"), 2.0, applied=8) == (
        8, "best threshold 8; trial skipped: change budget spent", False)      # spent: the best threshold stays
    assert g.apply(3.0, Decision(12, 12, "up", gain=0.01), 3.0, applied=8) == (
        8, "up; guard: change budget spent, 12 waits", False)
    again = guard()
    assert again.apply(1.0, Decision(20, 8, "t1"), 1.0, applied=8)[2] is True
    assert again.apply(1.5, Decision(20, 8, "t2"), 1.5, applied=8)[0] == 8      # the budget of one trial only


def test_a_trial_leaves_the_reserve_for_the_move_it_calls_for():
    # simulator, h200-7b-open-tl2-kv seed 3 at 12 req/s: two trials spent the budget and the move 26 -> 15 that
    # the second one called for (a gain under urgent_gain) waited 14 s; a trial now leaves trial_reserve over
    g = guard(changes_burst=4)
    assert g.apply(1.0, Decision(20, 8, "t1"), 1.0, applied=8)[0::2] == (20, True)           # 4 -> 2 tokens
    assert g.apply(1.5, Decision(8, 8, "back"), 1.5, applied=20, exploring=True)[0] == 8
    assert g.apply(2.0, Decision(20, 8, "t2"), 2.0, applied=8) == (
        8, "best threshold 8; trial skipped: change budget spent", False)                    # 2 < 2 + 1
    assert g.apply(3.0, Decision(12, 12, "up", gain=0.01), 3.0, applied=8) == (12, "up", False)   # the reserve
    none = guard(changes_burst=4, trial_reserve=0)
    for t in (1.0, 2.0):
        assert none.apply(t, Decision(20, 8, "t"), t, applied=8)[2] is True
        none.apply(t + 0.5, Decision(8, 8, "back"), t + 0.5, applied=20, exploring=True)
    assert none.apply(3.0, Decision(12, 12, "up", gain=0.01), 3.0, applied=8)[0] == 8       # spent by the trials


def test_the_reserve_is_left_not_spent_and_at_most_burst_minus_2():
    b = ChangeBudget(0, 4)
    assert b.take(0.0, 2.0, reserve=1.0) and b.tokens == 2                   # the reserve stays in the bucket
    assert not b.take(0.0, 2.0, reserve=1.0) and b.tokens == 2
    assert b.take(0.0, 1.0, force=True, reserve=5.0) and b.tokens == 2       # a forced change: free, no reserve
    # a reserve past changes_burst - 2 counts as burst - 2: a full bucket still lets a trial through, one token less not
    assert guard(changes_burst=4, trial_reserve=1000).apply(1.0, Decision(20, 8, "t"), 1.0, applied=8)[2] is True
    g = guard(changes_burst=4, trial_reserve=1000)
    assert g.apply(1.0, Decision(12, 12, "up", gain=0.01), 1.0, applied=8)[0] == 12     # 4 -> 3 tokens
    assert g.apply(2.0, Decision(20, 12, "t"), 2.0, applied=12) == (
        12, "best threshold 12; trial skipped: change budget spent", False)            # 3 < 2 + 2


def test_a_skipped_trial_still_makes_the_exploit_move_it_carried():
    def spent() -> Guard:
        g = guard(changes_burst=2)
        g.apply(0.5, Decision(30, 8, "t"), 0.5, applied=8)                       # both tokens gone
        return g
    # the policy's best threshold moved 8 -> 12 with a trial at 20: the trial is skipped, the move is made
    assert spent().apply(1.0, Decision(20, 12, "t"), 1.0, applied=8, live=[10]) == (
        12, "best threshold 12; trial skipped: change budget spent", False)
    assert spent().apply(1.0, Decision(20, 12, "t"), 1.0, applied=8) == (         # nothing live: judged on 12
        12, "best threshold 12; trial skipped: change budget spent", False)
    # ... unless the move changes no live batch size (16 moves with the trial, not with 8 -> 12)
    assert spent().apply(1.0, Decision(20, 12, "t"), 1.0, applied=8, live=[16]) == (
        8, "best threshold 12; trial skipped: change budget spent", False)
    # ... or it is a discretionary move the budget holds (a gain under urgent_gain)
    assert spent().apply(1.0, Decision(20, 12, "t", gain=0.01), 1.0, applied=8, live=[10]) == (
        8, "best threshold 12; trial skipped: change budget spent; guard: change budget spent, 12 waits", False)


def test_learning_after_an_untried_probe_ends_exactly_at_learning_s():
    g = guard(learning_s=20)
    g.apply(0.0, Decision(30, 8, "t"), 0.0, applied=8)                            # both tokens gone
    assert g.apply(0.5, Decision(12, 12, "x", gain=0.01), 0.5, applied=8)[0] == 8   # no probe yet: held
    assert g.apply(1.0, Decision(40, 8, "probe", untried=True), 1.0, applied=8) == (40, "probe", True)
    assert g.apply(10.0, Decision(12, 12, "x", gain=0.01), 10.0, applied=40)[0] == 12   # learning: not held
    assert g.apply(21.0, Decision(16, 16, "y", gain=0.01), 21.0, applied=12)[0] == 12   # 1 + 20 s: over


def test_a_trial_after_a_change_is_judged_on_the_tokens_left_at_its_time():
    g = guard()
    assert g.apply(1.0, Decision(12, 12, "a", gain=0.01), 1.0, applied=8)[0] == 12    # one token left
    assert g.apply(2.0, Decision(20, 12, "t"), 2.0, applied=12) == (
        12, "best threshold 12; trial skipped: change budget spent", False)
    assert g.changes.tokens == pytest.approx(1.0 + 0.001 / 60.0)                     # refilled for 1 s, not spent
