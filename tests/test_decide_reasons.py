"""BucketLearner.decide: why it explores (untried, dominated, index) and what its exploit reason says."""
from __future__ import annotations

from policies import Sample, Snapshot, make_policy


def test_an_untried_spec_arm_settled_by_a_loss_below_explores_off_as_dominated():
    p = make_policy("ucb", max_batch_size=64)
    p.observe(Sample(0.0, 2, 3, 4, 0.04, True))               # batch 2: spec loses (a little traffic)
    p.observe(Sample(0.0, 2, 0, 2, 0.01, True))
    for _ in range(10):                                       # batch 6: spec wins big (much traffic)
        p.observe(Sample(0.0, 6, 3, 18, 0.01, True))
        p.observe(Sample(0.0, 6, 0, 6, 0.01, True))
    p.observe(Sample(0.0, 4, 0, 4, 0.01, True))               # batch 4: off known, spec not
    d = p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    assert (d.threshold, d.exploit_threshold, d.reason) == (3, 6, "explore off at batch 4-4 (dominated)")


def test_the_index_can_explore_against_the_mean():
    p = make_policy("ucb", max_batch_size=64)
    for _ in range(3):
        p.observe(Sample(0.0, 4, 0, 4, 0.01, True))           # off: 400 tok/s, no spread
    for step in (0.02, 0.06):                                 # spec: 266 tok/s on average, widely spread
        p.observe(Sample(0.0, 4, 3, 8, step, True))
    d = p.decide(Snapshot(0.1, 0, 64, live_batch_size=4))
    assert (d.threshold, d.exploit_threshold, d.reason) == (4, 0, "explore spec at batch 4-4 (index)")


def test_the_exploit_reason_names_the_live_buckets_mode():
    p = make_policy("ucb", max_batch_size=64)
    for _ in range(3):
        p.observe(Sample(0.0, 4, 3, 12, 0.01, True))          # spec: 1200 tok/s
        p.observe(Sample(0.0, 4, 0, 4, 0.01, True))           # off: 400
    d = p.decide(Snapshot(0.1, 8, 64, live_batch_size=4))
    assert (d.threshold, d.reason) == (8, "exploit: bucket 4-4 spec")
