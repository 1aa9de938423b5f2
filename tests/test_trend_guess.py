"""The bandit's guess of a bucket's unmeasured mode from the measured buckets' step-time trend (policies.trend):
on ahead of a climbing load where the trend says speculation pays clearly, off where it says it stops paying."""
from __future__ import annotations

from controller.contract import speculates
from policies import Sample, Snapshot, make_policy
from policies import trend


def learned(off: tuple[float, float], spec: tuple[float, float], accept: float, sizes, plain=()):
    """A bandit that measured both modes at these batch sizes (step s = a + c * bs), and plain only at `plain`."""
    p = make_policy("bandit", seed=0)
    for i in range(10):
        for bs in sizes:
            t = i * 0.01
            p.observe(Sample(t, bs, 0, bs, off[0] + off[1] * bs, True))
            p.observe(Sample(t, bs, 3, round(accept * bs), spec[0] + spec[1] * bs, True))
        for bs in plain:
            p.observe(Sample(i * 0.01, bs, 0, bs, off[0] + off[1] * bs, True))
    return p


def test_unseen_bucket_where_the_trend_says_speculation_pays_speculates_ahead_of_the_load():
    p = learned((0.01, 0.0001), (0.012, 0.0003), 3.0, range(1, 11))    # +111 % at 14, +76 % at 39
    d = p.decide(Snapshot(0.2, 10, 256, 14))                            # the load climbs into batch 14
    assert speculates(14, d.threshold) and d.exploratory and d.untried and d.shift
    assert 41 <= d.threshold <= 46 and "the trend says speculation +" in d.reason   # reach: 4 x batch 10
    # next tick, speculation measured at 14: the guessed threshold is the exploit one, plain never tried there
    for i in range(10):
        p.observe(Sample(0.2 + i * 0.01, 14, 3, 42, 0.012 + 0.0003 * 14, True))
    d2 = p.decide(Snapshot(0.4, 10, 256, 14))       # the guard's exploit threshold still 10
    assert not d2.exploratory and d2.exploit_threshold >= d.threshold and d2.gain > 0.003   # the guard keeps it


def test_where_the_trend_says_speculation_stops_paying_the_bucket_stays_plain():
    # +86 % at batch 1, +17 % at 10, +1 % at 14 (no clear margin), -25 % at 24-26
    p = learned((0.01, 0.00005), (0.010, 0.0008), 2.0, range(1, 11), plain=(25,))
    p.refit(0.1)
    assert trend.guessed_gain(p, p.lines, p.buckets.of(14), 0.1) is None
    assert trend.guessed_gain(p, p.lines, p.buckets.of(25), 0.1) < -0.2
    d = p.decide(Snapshot(0.1, 10, 256, 25))        # plain measured at 25, speculation never: no probe of it
    assert not speculates(25, d.threshold) and not d.exploratory
    q = learned((0.01, 0.00005), (0.010, 0.0008), 2.0, range(1, 11), plain=(25,))
    q.params["guess"] = 10.0                        # without the guess: a probe of speculation there, as before
    assert speculates(25, q.decide(Snapshot(0.1, 10, 256, 25)).threshold)


def test_a_loss_is_not_guessed_below_the_batch_sizes_the_lines_rest_on():
    # the H200's closed loop of 24 (12-02f): both modes measured at batch 11-26 only, speculation winning there;
    # the plain line through them has no intercept (step ~ batch size), so at batch 1 the lines say plain
    # steps take 0.25 ms and speculation loses 85 %. Below its data a line is no evidence of a loss.
    p = learned((0.0, 0.00025), (0.0002, 0.00057), 2.5, range(11, 27))   # +6-8 %
    for i in range(40):     # batch 1 speculated during the engine's start, never run plain
        p.observe(Sample(0.05 + i * 0.001, 1, 3, 2, 0.0041, True))
    p.refit(0.1)
    assert p.lines[1][0] == (11, 26)      # the plain line rests on batch 11-26
    assert trend.guessed_gain(p, p.lines, p.buckets.of(1), 0.1) is None
    assert trend.guessed_gain(p, p.lines, p.buckets.of(5), 0.1) is None
    d = p.decide(Snapshot(0.1, 26, 256, 24))
    # before: best threshold 0 ("no longer pays at batch 1", the trend's -85 %), a trial of 26 away from it
    assert d.exploit_threshold >= 26 and not d.exploratory and speculates(24, d.threshold)
    # above the data a loss is still guessed: plain is the safe mode there
    q = learned((0.01, 0.00005), (0.010, 0.0008), 2.0, range(1, 11), plain=(25,))
    q.refit(0.1)
    assert trend.guessed_gain(q, q.lines, q.buckets.of(40), 0.1) < -0.2
