"""BucketLearner.decide: why it explores (untried, dominated, index) and what its exploit reason says
(the wording of policies/reasons.py)."""
from __future__ import annotations

from policies import Sample, Snapshot, make_policy


def test_an_untried_spec_arm_settled_by_a_loss_below_explores_off_as_dominated():
    p = make_policy("ucb", max_batch_size=64)
    for _ in range(4):                                        # batch 2: spec loses (a little traffic)
        p.observe(Sample(0.0, 2, 3, 4, 0.04, True))
        p.observe(Sample(0.0, 2, 0, 2, 0.01, True))
    for _ in range(10):                                       # batch 6: spec wins big (much traffic)
        p.observe(Sample(0.0, 6, 3, 18, 0.01, True))
        p.observe(Sample(0.0, 6, 0, 6, 0.01, True))
    p.observe(Sample(0.0, 4, 0, 4, 0.01, True))               # batch 4: off known, spec not
    d = p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    assert (d.threshold, d.exploit_threshold, d.reason, d.untried) == (
        3, 6, "trial: plain decode at batch 4 to measure it (speculation lost at smaller batches)", False)


def test_the_index_can_explore_against_the_mean():
    def policy(c: float):
        p = make_policy("ucb", {"c": c}, max_batch_size=64)
        for _ in range(3):
            p.observe(Sample(0.0, 4, 0, 4, 0.01, True))       # off: 400 tok/s, no spread
        for step in (0.02, 0.05):                             # spec: 343 tok/s (-14 %), widely spread
            p.observe(Sample(0.0, 4, 3, 12, step, True))
        return p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    d = policy(1.0)
    assert (d.threshold, d.exploit_threshold, d.reason, d.untried) == (
        4, 0, "trial: speculate at batch 4 to measure it (estimate uncertain: speculation -14% tok/s)", False)
    d = policy(0.0)                                           # without the bonus the mean says off: no trial
    assert (d.threshold, d.reason) == (0, "best threshold 0: live batch 4 is plain decoding (speculation -14% tok/s)")


def test_the_exploit_reason_names_the_live_buckets_mode():
    p = make_policy("ucb", max_batch_size=64)
    for _ in range(3):
        p.observe(Sample(0.0, 4, 3, 12, 0.01, True))          # spec: 1200 tok/s
        p.observe(Sample(0.0, 4, 0, 4, 0.01, True))           # off: 400
    d = p.decide(Snapshot(0.1, 8, 64, live_batch_size=4))
    assert (d.threshold, d.reason) == (8, "best threshold 8: live batch 4 is speculating (speculation +200% tok/s)")


def test_the_live_buckets_mode_is_the_thresholds_even_where_its_own_gain_is_negative():
    # the exploit reason for a threshold held above a losing live bucket (the guard's hysteresis keeps it):
    # the live batch speculates, whatever its own gain says
    p = make_policy("ucb", {"c": 0.0}, max_batch_size=64)
    for _ in range(10):
        p.observe(Sample(0.0, 2, 3, 4, 0.02, True))           # batch 2: spec slower
        p.observe(Sample(0.0, 2, 0, 2, 0.005, True))
    live = p.buckets.of(2)
    held = p._exploit_reason(6, 6, live, 0.1)
    assert held.startswith("best threshold 6: live batch 2 is speculating (speculation -"), held
    assert p._exploit_reason(1, 1, live, 0.1).startswith("best threshold 1: live batch 2 is plain decoding")
