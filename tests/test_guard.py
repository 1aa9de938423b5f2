import pytest

from controller.control.guard import Guard, GuardConfig, GuardConfigError
from controller.control.loop import ControlLoop
from policies import Decision, make_policy
from policies.buckets import Buckets

B = Buckets(256)


def guard(**kw) -> Guard:
    return Guard(GuardConfig(**kw), B, initial=8)


def test_bounds_clamp_every_decision():
    g = guard(min_threshold=4, max_threshold=32, stabilisation_s=0, max_step_buckets=100)
    assert g.apply(1.0, Decision(100, 100, "x"), 1.0)[0] == 32
    assert g.apply(2.0, Decision(0, 0, "x"), 2.0)[0] == 4


def test_stabilisation_moves_only_as_far_as_all_recent_proposals_agree():
    g = guard(stabilisation_s=1.0, max_step_buckets=100)
    assert g.apply(0.0, Decision(12, 12, "x"), 0.0)[0] == 12
    assert g.apply(0.5, Decision(16, 16, "x"), 0.5)[0] == 12       # 12 and 16 in the window: hold at 12
    assert g.apply(1.6, Decision(16, 16, "x"), 1.6)[0] == 16       # only 16 left in the window
    g2 = guard(stabilisation_s=1.0, max_step_buckets=100)
    g2.apply(0.0, Decision(12, 12, "x"), 0.0)
    assert g2.apply(0.5, Decision(4, 4, "x"), 0.5)[0] == 12        # proposals straddle 12: stay


def test_rate_cap_limits_buckets_crossed_per_decision():
    g = guard(stabilisation_s=0, max_step_buckets=2)
    assert g.apply(1.0, Decision(256, 256, "x"), 1.0)[0] == 10
    assert g.apply(2.0, Decision(256, 256, "x"), 2.0)[0] == 12


def test_exploration_budget_vetoes_exploratory_decisions():
    g = guard(stabilisation_s=0, explore_share=0.1)
    thr, _, exploring = g.apply(1.0, Decision(20, 8, "explore"), 1.0)
    assert (thr, exploring) == (20, True)
    g.account(2.0, batches=100, exploratory=True)           # 100% of batches explored so far
    thr, reason, exploring = g.apply(2.0, Decision(20, 8, "explore"), 2.0)
    assert (thr, exploring) == (8, False) and "budget" in reason
    g.account(3.0, batches=10_000, exploratory=False)       # share falls under 10% again
    assert g.apply(3.0, Decision(20, 8, "explore"), 3.0)[2] is True


def test_fallback_when_samples_stop():
    g = guard(fallback_after_s=5, fallback_threshold=2)
    thr, reason, _ = g.apply(100.0, Decision(50, 50, "x"), last_sample_t=90.0)
    assert thr == 2 and reason.startswith("fallback")
    assert g.apply(100.0, Decision(50, 50, "x"), None)[0] == 2


def test_pin_overrides_policy_and_unpin_returns_it():
    loop = ControlLoop(make_policy("fixed", {"threshold": 6}), GuardConfig(stabilisation_s=0), 0)
    loop.last_sample_t = 0.0
    loop.pin(3)
    assert loop.tick(0.5).threshold == 3
    loop.pin(None)
    assert loop.tick(1.0).threshold == 6


@pytest.mark.parametrize("values,match", [
    ({"explore_share": 2}, "explore_share=2.0 out of range"),
    ({"bogus": 1}, "unknown guard setting 'bogus'"),
    ({"max_step_buckets": "x"}, "not a valid int"),
])
def test_bad_guard_config(values, match):
    with pytest.raises(GuardConfigError, match=match):
        GuardConfig.from_mapping(values)
