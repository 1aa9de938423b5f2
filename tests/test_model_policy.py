"""The model-based policy (policies/model.py): a weighted, non-negative least-squares line of step time
against batch size per mode, used for buckets never visited."""
from __future__ import annotations

import pytest

from policies import Sample, make_policy
from policies.base import OFF, SPEC


def test_model_fits_step_time_lines_and_predicts_unvisited_buckets():
    p = make_policy("model", max_batch_size=64)
    for bs in (2, 16):
        for _ in range(2):
            p.observe(Sample(0.0, bs, 2, 2 * bs, 0.012 + 0.002 * bs, True))    # spec: 0.012 + 0.002 bs, accept 2
            p.observe(Sample(0.0, bs, 0, bs, 0.01 + 0.0005 * bs, True))        # off: 0.01 + 0.0005 bs
    p.refit(0.0)
    assert p._fit[OFF] == pytest.approx([0.01, 0.0005], rel=1e-6)
    assert p._fit[SPEC] == pytest.approx([0.012, 0.002], rel=1e-6)
    b = p.buckets.of(12)                                         # never visited
    assert p.estimable(b)
    assert p.mean(OFF, b) == pytest.approx(12 / 0.016) and p.mean(SPEC, b) == pytest.approx(24 / 0.036)
    for incumbent in (OFF, SPEC):                                # the model has no indifference margin
        assert p.choose_arm(b, 0.0, incumbent) == OFF
        assert p.choose_arm(p.buckets.of(1), 0.0, incumbent) == SPEC   # 2 / 0.014 > 1 / 0.0105
    one = make_policy("model", {"min_buckets": 3}, max_batch_size=64)
    one.observe(Sample(0.0, 4, 0, 4, 0.01, True))
    one.refit(0.0)
    assert one._fit == [None, None] and not one.estimable(b)
    assert one.mean(OFF, one.buckets.of(4)) == pytest.approx(400.0)  # without a fit: the bucket's own mean



def test_model_fit_is_weighted_least_squares_with_non_negative_coefficients():
    import numpy as np
    p = make_policy("model", max_batch_size=64)
    points = {2: (1, 0.0031), 8: (3, 0.0052), 16: (1, 0.0105)}          # batch: (samples, step s), not a line
    for bs, (n, step) in points.items():
        for _ in range(n):
            p.observe(Sample(0.0, bs, 0, bs, step, True))
    p.refit(0.0)
    bs = np.array(list(points), dtype=float)
    sw = np.sqrt([n for n, _ in points.values()])
    coef = np.linalg.lstsq(np.stack([np.ones(3), bs], axis=1) * sw[:, None],
                           np.array([s for _, s in points.values()]) * sw, rcond=None)[0]
    assert coef[0] > 0 and p._fit[OFF] == pytest.approx(coef, rel=1e-6)
    q = make_policy("model", max_batch_size=64)
    for bs, step in ((2, 0.002), (8, 0.0155), (16, 0.032)):            # the line's intercept would be < 0
        q.observe(Sample(0.0, bs, 0, bs, step, True))
    q.refit(0.0)
    slope = (2 * 0.002 + 8 * 0.0155 + 16 * 0.032) / (4 + 64 + 256)      # through the origin
    assert q._fit[OFF][0] == pytest.approx(0.0, abs=1e-8) and q._fit[OFF][1] == pytest.approx(slope, rel=1e-6)


def test_model_uses_fresh_buckets_only_and_fits_each_mode_apart():
    p = make_policy("model", {"half_life_s": 20.0}, max_batch_size=64)
    p.observe(Sample(0.0, 2, 0, 2, 4.0, True))               # slow: 0.5 req/s still counts
    p.observe(Sample(0.0, 16, 0, 16, 8.0, True))
    p.observe(Sample(0.0, 4, 1, 8, 0.02, True))              # spec: one bucket only
    p.refit(0.0)
    assert p._fit[OFF] is not None and p._fit[SPEC] is None
    assert not p.estimable(p.buckets.of(12))                  # one fit is not enough
    p.observe(Sample(1000.0, 16, 0, 16, 8.0, True))          # 1000 s later bucket 2 weighs ~1e-15
    p.refit(1000.0)
    assert p._fit[OFF] is None
    q = make_policy("model", max_batch_size=64)
    q.observe(Sample(0.0, 2, 1, 4, 0.02, True))              # spec in two buckets, off in one
    q.observe(Sample(0.0, 16, 1, 32, 0.05, True))
    q.observe(Sample(0.0, 4, 0, 4, 0.01, True))
    q.refit(0.0)
    assert q._fit[OFF] is None and q._fit[SPEC] is not None


def test_model_off_fit_needs_no_acceptance():
    p = make_policy("model", max_batch_size=64)
    for bs in (2, 16):
        p.observe(Sample(0.0, bs, 0, bs, 0.01 + 0.0005 * bs, True))
    p.refit(0.0)
    assert p.accept.w == 0 and p.mean(OFF, p.buckets.of(12)) == pytest.approx(12 / 0.016)
