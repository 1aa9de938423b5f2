import pytest

from controller.control.guard import Guard
from controller.control.guard_config import GuardConfig, GuardConfigError
from controller.control.loop import ControlLoop
from controller.numtext import plain
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
    first = loop.tick(1.0)
    assert first.threshold == 6 and first.reason.startswith("unpinned by an operator; ")   # the history says why
    assert not loop.tick(1.5).reason.startswith("unpinned")


@pytest.mark.parametrize("values,match", [
    ({"explore_share": 2}, "explore_share=2 out of range"),
    ({"bogus": 1}, "unknown guard setting 'bogus'"),
    ({"max_step_buckets": "x"}, "must be an integer"),
])
def test_bad_guard_config(values, match):
    with pytest.raises(GuardConfigError, match=match):
        GuardConfig.from_mapping(values)


LIMITS = [  # setting, lowest and highest allowed, one just under, one just over, the range as the error says
    ("stabilisation_s", 0, 3600, -0.1, 3600.5, "0 .. 3600"),
    ("max_step_buckets", 1, 1000, 0, 1001, "1 .. 1000"),
    ("explore_share", 0, 1, -0.01, 1.01, "0 .. 1"),
    ("explore_window_s", 1, 86400, 0.5, 86400.5, "1 .. 86400"),
    ("fallback_after_s", 0.1, 86400, 0.05, 86400.5, "0.1 .. 86400"),
    ("coalesce_window_s", 0, 86400, -0.5, 86400.5, "0 .. 86400"),
    ("min_gain", 0, 1, -0.001, 1.001, "0 .. 1"),
    ("changes_per_min", 0, 6000, -0.1, 6000.5, "0 .. 6000"),
    ("changes_burst", 2, 1000, 1.9, 1000.5, "2 .. 1000"),
    ("trial_reserve", 0, 1000, -0.1, 1000.5, "0 .. 1000"),
    ("urgent_gain", 0, 10, -0.01, 10.01, "0 .. 10"),
    ("learning_s", 0, 3600, -0.1, 3600.5, "0 .. 3600"),
    ("flap_s", 0, 86400, -0.1, 86400.5, "0 .. 86400"),
    ("untried_per_min", 0, 6000, -0.1, 6000.5, "0 .. 6000"),
    ("untried_burst", 1, 1000, 0.9, 1000.5, "1 .. 1000"),
]


@pytest.mark.parametrize("name,lo,hi,under,over,allowed", LIMITS)
def test_guard_limits_are_inclusive_and_named_in_the_error(name, lo, hi, under, over, allowed):
    for ok in (lo, hi):
        assert getattr(GuardConfig.from_mapping({name: ok}), name) == ok
    for bad in (under, over):
        kind = int if name == "max_step_buckets" else float
        with pytest.raises(GuardConfigError) as err:
            GuardConfig.from_mapping({name: bad})
        assert str(err.value) == f"guard setting {name}={kind(bad)!r} out of range (allowed {allowed})"


def test_min_threshold_and_fallback_threshold_limits():
    assert GuardConfig.from_mapping({"min_threshold": 0}).min_threshold == 0
    assert GuardConfig.from_mapping({"min_threshold": 9, "max_threshold": 9}).min_threshold == 9
    assert GuardConfig.from_mapping({"fallback_threshold": 0}).fallback_threshold == 0
    for values, message in [({"min_threshold": -1}, "min_threshold=-1 out of range (allowed 0 .. max_threshold, 65536)"),
                            ({"min_threshold": 10, "max_threshold": 9},
                             "min_threshold=10 out of range (allowed 0 .. max_threshold, 9)"),
                            ({"fallback_threshold": -2},
                             "fallback_threshold=-2 out of range (allowed -1 (hold the learned threshold) or 0 .. 65536)")]:
        with pytest.raises(GuardConfigError) as err:
            GuardConfig.from_mapping(values)
        assert str(err.value) == f"guard setting {message}"


def test_unknown_guard_setting_lists_the_known_ones():
    with pytest.raises(GuardConfigError) as err:
        GuardConfig.from_mapping({"bogus": 1})
    assert str(err.value) == ("unknown guard setting 'bogus' (known: min_threshold, max_threshold, stabilisation_s, "
                              "max_step_buckets, explore_share, explore_window_s, fallback_after_s, fallback_threshold, "
                              "min_gain, coalesce_window_s, changes_per_min, changes_burst, trial_reserve, urgent_gain, "
                              "learning_s, flap_s, untried_per_min, untried_burst, shift_ratio)")


def test_shift_ratio_is_off_at_0_or_above_1():
    assert GuardConfig.from_mapping({"shift_ratio": 0}).shift_ratio == 0
    assert GuardConfig.from_mapping({"shift_ratio": 1000}).shift_ratio == 1000
    for bad in (0.5, 1.0, 1000.5, -1):
        with pytest.raises(GuardConfigError) as err:
            GuardConfig.from_mapping({"shift_ratio": bad})
        assert str(err.value) == f"guard setting shift_ratio={plain(bad)} out of range (allowed 0 (off) or > 1 .. 1000)"


def test_exploration_share_is_discounted_by_half_every_window():
    g = guard(explore_window_s=10.0)
    g.account(10.0, batches=100, exploratory=True)
    g.account(30.0, batches=100, exploratory=True)        # two windows later: the first 100 weigh 25
    g.account(30.0, batches=200, exploratory=False)       # same time: no decay
    assert g.explore_used == pytest.approx(125 / 325)


def test_rate_cap_down_to_the_first_bucket():
    g = guard(stabilisation_s=0, max_step_buckets=2)
    g.exploit = 3
    assert g.apply(1.0, Decision(0, 0, "x"), 1.0)[0] == 1           # 3 buckets down, capped at 2: threshold 1


def test_silence_holds_the_learned_threshold_by_default_and_ends_a_trial():
    # An idle engine sends no samples: the next quiet request's batches must run with the learned threshold
    # (a fixed fallback of 0 ran a quiet server's batches without speculation until the next retune).
    g = guard(stabilisation_s=0, max_step_buckets=100, fallback_after_s=5)
    assert GuardConfig().fallback_threshold == -1
    assert g.apply(1.0, Decision(12, 12, "learned"), 1.0) == (12, "learned", False)
    assert g.apply(2.0, Decision(40, 12, "explore"), 2.0) == (40, "explore", True)
    assert g.apply(20.0, Decision(40, 12, "explore"), 2.0) == (12, "hold 12: no samples for 18.0 s", False)
    restored = guard(fallback_after_s=5)
    restored.exploit = 23                                            # a restart with the saved threshold
    assert restored.apply(0.5, Decision(0, 0, "nothing yet"), None) == (23, "hold 23: no samples yet", False)


def test_reasons_say_why_the_applied_threshold_is_what_it_is():
    g = guard(stabilisation_s=0, max_step_buckets=2, fallback_after_s=5, fallback_threshold=0)
    assert g.apply(1.0, Decision(50, 50, "x"), None) == (0, "fallback to 0: no samples yet", False)
    assert g.apply(20.0, Decision(50, 50, "x"), 10.0) == (0, "fallback to 0: no samples for 10.0 s", False)
    assert g.apply(21.0, Decision(50, 50, "up"), 21.0) == (
        10, "up; guard: at most 2 buckets per decision, heading for 50", False)
    assert g.apply(22.0, Decision(12, 12, "there"), 22.0) == (12, "there", False)
    assert g.apply(23.0, Decision(20, 12, "explore"), 23.0) == (20, "explore", True)
    held = guard(stabilisation_s=1.0, max_step_buckets=100)
    assert held.apply(0.0, Decision(12, 12, "a"), 0.0) == (12, "a", False)
    assert held.apply(0.5, Decision(4, 4, "b"), 0.5) == (12, "guard: 12 held, 4 not yet proposed for 1 s; the policy: b", False)
    spent = guard(stabilisation_s=0, explore_share=0.0)
    assert spent.apply(1.0, Decision(20, 8, "explore"), 1.0) == (
        8, "best threshold 8; trial skipped: exploration budget (0% of batches) spent", False)


def test_min_gain_is_the_smallest_move_made():
    assert guard(stabilisation_s=0).apply(1.0, Decision(12, 12, "small", gain=0.0029), 1.0) == (
        8, "guard: 8 held, the move to 12 would gain +0.29% of the current traffic's tok/s (under 0.30%); the policy: small", False)
    assert guard(stabilisation_s=0).apply(1.0, Decision(12, 12, "enough", gain=0.003), 1.0) == (12, "enough", False)
    assert guard(stabilisation_s=0).apply(1.0, Decision(12, 12, "unknown"), 1.0)[0] == 12     # no estimate: made


def _in_shift_trial(gain_cfg: float = 0.003) -> Guard:
    """A guard whose shift trial at 105 is in force (the exploit threshold 29, the live batch at 96)."""
    g = Guard(GuardConfig(stabilisation_s=0.5, explore_share=1.0, changes_per_min=0, min_gain=gain_cfg), B, initial=29)
    out = g.apply(1.0, Decision(105, 29, "trial: the load moved", shift=True), 1.0, 29, [96], False)
    assert out == (105, "trial: the load moved", True)
    return g


def test_a_shift_trial_stays_when_the_policy_proposes_its_threshold_whatever_the_window_holds():
    for live in ([96], ()):          # no batch size in the coalescing window: nothing tells them apart either
        g = _in_shift_trial()
        out = g.apply(1.5, Decision(105, 105, "best: 105", gain=0.03), 1.5, 105, live, True)
        assert out == (105, "105 stays, the trial showed it pays (the policy's own estimate: best: 105)", False) and g.exploit == 105


def test_a_shift_trial_stays_when_the_proposal_differs_from_it_only_where_no_live_batch_size_lies():
    g = _in_shift_trial()                # the trend's guessed edge moved past the trial's: 105 -> 110, no batch there
    out = g.apply(1.5, Decision(110, 110, "best: 110", gain=0.03), 1.5, 105, [96], True)
    assert out == (105, "105 stays, the trial showed it pays (the policy's own estimate: best: 110)", False) and g.exploit == 105
    g = _in_shift_trial()                # a live batch at 108 tells them apart: not the trial's
    out = g.apply(1.5, Decision(110, 110, "best: 110", gain=0.03), 1.5, 105, [96, 108], True)
    assert not out[1].startswith("105 stays")


def test_a_shift_trial_stays_only_when_its_threshold_is_worth_min_gain():
    g = _in_shift_trial(gain_cfg=0.01)
    out = g.apply(1.5, Decision(105, 105, "best: 105", gain=0.01), 1.5, 105, [96], True)
    assert out[0] == 105 and not out[2] and out[1].startswith("105 stays") and g.exploit == 105   # exactly min_gain
    g = _in_shift_trial(gain_cfg=0.01)
    out = g.apply(1.5, Decision(105, 105, "best: 105", gain=0.009), 1.5, 105, [96], True)
    assert not out[1].startswith("105 stays") and g.exploit == 29      # below it: the trial does not become the exploit


def test_the_operators_fixed_threshold_is_applied_as_it_is():
    """`policy set fixed --param threshold=12` on a server at 66 whose live batch sizes (30-32) lie on one side of
    both: a learned proposal would go 66 -> 26 (8 buckets a decision), then stay coalesced at 26 (12 moves no live
    batch size) for as long as the load does; the operator's own threshold is 12 at once and stays 12."""
    g = guard(stabilisation_s=30.0, max_step_buckets=8, changes_per_min=1)
    g.exploit = 66
    learned = g.apply(100.0, Decision(12, 12, "x"), 100.0, applied=66, live=(30, 31, 32))[0]
    assert 12 < learned < 66                                    # what a learned proposal gets: the guard's way
    g = guard(stabilisation_s=30.0, max_step_buckets=8, changes_per_min=1)
    g.exploit = 66
    for t in (100.0, 100.5, 101.0):
        thr, reason, trial = g.apply(t, Decision(12, 12, "fixed threshold 12", command=True), t, applied=66 if t == 100.0
                                     else 12, live=(30, 31, 32))
        assert (thr, reason, trial, g.exploit) == (12, "fixed threshold 12", False, 12)
    # bounds still hold, and a silent engine still falls back
    assert guard(max_threshold=32).apply(1.0, Decision(100, 100, "always", command=True), 1.0)[0] == 32
    g = guard(fallback_after_s=5, fallback_threshold=2)
    assert g.apply(100.0, Decision(50, 50, "fixed threshold 50", command=True), last_sample_t=90.0)[0] == 2


def test_switching_to_the_fixed_policy_reaches_its_threshold_at_the_first_decision():
    loop = ControlLoop(make_policy("fixed", {"threshold": 12}), GuardConfig(), 66)
    loop.last_sample_t = 0.0
    tick = loop.tick(0.5)
    assert tick.threshold == 12 and tick.reason == "fixed threshold 12" and not tick.exploratory
