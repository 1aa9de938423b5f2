"""A shift into a bucket left plain at a stale acceptance is probed within seconds.

The accept length is only measured while speculating. When the load moves from a bucket that
speculated at a low acceptance (batch 8, accept 2.0) into one where speculation lost at that
acceptance but won at the higher one seen lately (batch 95-105, accept 3.4, the looped
mixed-shift trace's later passes through its C=96 phase), the estimate stays at 2.0: thompson
waited 35-48 engine seconds for its stale-acceptance uncertainty to grow, model never tried.
Scripted samples and snapshots, time as an argument."""
from __future__ import annotations

import pytest

from controller.contract import speculates
from policies import Sample, Snapshot, make_policy

OFF_100 = 0.02        # step seconds at batch 100: 5000 req/s plain
SPEC_100 = 0.06       # ... 1667 req/s speculating: x3.4 = +13 % tok/s, x2.0 = -33 %
OFF_8, SPEC_8 = 0.01, 0.012
EXPLOIT = 29          # speculate at batch 8, not at 100
N_S = 6.0             # the probe comes within this many seconds of the move


def spec(t: float, bs: int, step_s: float, accept: float) -> Sample:
    return Sample(t, bs, 3, round(bs * accept), step_s, True)


def off(t: float, bs: int, step_s: float) -> Sample:
    return Sample(t, bs, 0, bs, step_s, True)


def history(p, move_at: float = 100.0) -> None:
    """Batch 100 measured both ways at accept 3.4 (t 0-10), then the load at batch 8,
    speculating at accept 2.0, until move_at."""
    t = 0.0
    while t < 10.0:
        p.observe(spec(t, 100, SPEC_100, 3.4))
        p.observe(off(t + 0.05, 100, OFF_100))
        t += 0.1
    while t < move_at:
        p.observe(spec(t, 8, SPEC_8, 2.0))
        p.observe(off(t + 0.02, 8, OFF_8))    # plain measured too: both arms known at batch 8
        t += 0.05


def first_probe(p, start: float, until: float):
    """Plain batches at 100 from `start` (the threshold leaves them plain); the first decision
    that speculates at 100, or None."""
    t, next_tick = start, start + 0.5
    while t < until:
        p.observe(off(t, 100, OFF_100))
        t += OFF_100
        if t >= next_tick:
            d = p.decide(Snapshot(next_tick, EXPLOIT, 256, 105))
            if speculates(100, d.threshold):
                return next_tick, d
            next_tick += 0.5
    return None


@pytest.mark.parametrize("name", ["thompson", "model", "ucb"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_move_into_bucket_where_speculation_pays_at_the_recent_acceptance_is_probed(name, seed):
    p = make_policy(name, seed=seed, max_batch_size=256)
    history(p)
    got = first_probe(p, 100.0, 100.0 + 40.0)
    assert got is not None, f"{name}: never speculated at batch 100 in 40 s"
    t, d = got
    assert t - 100.0 <= N_S, f"{name}: first trial at 100 after {t - 100.0:.1f} s ({d.reason})"
    assert d.exploratory and not d.untried      # a trial, not a probe of an untried arm (no learning window)
    assert d.shift                              # the load moved there after 90 s away: not held by the change budget
    assert "stale" in d.reason and "3." in d.reason


@pytest.mark.parametrize("name", ["thompson", "model", "ucb"])
def test_a_stale_trial_where_the_load_was_lately_is_no_shift(name):
    """An open loop's batch sizes wander between neighbouring buckets and come back within seconds: a bucket
    that ran a batch 30 s before is no load shift, and its stale trial stays under the guard's change budget
    (free, such trials raised changes per minute in the open loop)."""
    p = make_policy(name, seed=0, max_batch_size=256)
    history(p, move_at=70.0)
    p.observe(off(70.0, 100, OFF_100))              # a visit to batch 100, plain, 60 s after it last ran
    t = 70.0 + OFF_100
    while t < 100.0:
        p.observe(spec(t, 8, SPEC_8, 2.0))
        p.observe(off(t + 0.02, 8, OFF_8))
        t += 0.05
    got = first_probe(p, 100.0, 140.0)
    assert got is not None and got[0] - 100.0 <= N_S    # the stale trial comes as before ...
    assert got[1].exploratory and not got[1].shift     # ... but as an ordinary trial


@pytest.mark.parametrize("name", ["thompson", "model"])
def test_no_stale_probe_where_the_acceptance_was_measured_or_soon_again(name):
    p = make_policy(name, seed=0, max_batch_size=256)
    history(p)
    t, d = first_probe(p, 100.0, 110.0)
    # the trial shows acceptance is still 2.0 at batch 100: speculation loses there
    for i in range(20):
        p.observe(spec(t + i * SPEC_100, 100, SPEC_100, 2.0))
    t += 20 * SPEC_100
    # plain again for 40 s (under half_life_s since the trial): no second stale probe
    assert first_probe(p, t, t + 40.0) is None

    # the load stays where it speculated last (accept 3.4 -> 2.0 at batch 100, then plain):
    # the estimate was measured there, nothing says the acceptance came back
    q = make_policy(name, seed=0, max_batch_size=256)
    t = 0.0
    while t < 80.0:
        q.observe(spec(t, 100, SPEC_100, 3.4 if t < 10 else 2.0))
        q.observe(off(t + 0.05, 100, OFF_100))
        t += 0.1
    assert first_probe(q, t, t + 40.0) is None


# --- a probe that ends while the acceptance estimate is still mostly the traffic's before ----------------------
OFF_12, SPEC_12 = 0.012, 0.03     # batch 12: 1000 req/s plain, 400 speculating: x2.6 = +4 %, x1.7 = -32 %


def chat_then_probe_at_12(p, accept_12: float, others: float | None = None):
    """Batch 8 speculating at accept 1.7 (chat) until t=100, then the load at batch 12, plain, speculation
    never measured there; the probe's first tick of spec batches at 12 at accept_12 (with `others`, batch 8
    speculating as well, at that acceptance: an open loop's wander). The decision after that tick."""
    t = 0.0
    while t < 100.0:
        p.observe(spec(t, 8, SPEC_8, 1.7))
        p.observe(off(t + 0.02, 8, OFF_8))
        t += 0.05
    while t < 104.0:
        p.observe(off(t, 12, OFF_12))
        t += OFF_12
    d = p.decide(Snapshot(104.0, 8, 256, 12))
    assert d.untried and speculates(12, d.threshold), d          # the probe of the unmeasured arm
    while t < 104.5:
        p.observe(spec(t, 12, SPEC_12, accept_12))
        t += SPEC_12
        if others is not None:
            p.observe(spec(t, 8, SPEC_8, others))
    return p.decide(Snapshot(104.5, 8, 256, 12))


@pytest.mark.parametrize("name", ["thompson", "ucb"])      # model: its step-time fit already speculates at 12
def test_a_probe_goes_on_while_the_acceptance_estimate_is_mostly_the_traffic_before(name):
    """coding-to-chat seeds 5/11/14/18, chat C=2 -> coding C=12: one tick of the probe took the accept estimate
    1.68 -> 2.19 (mostly chat's 1.7), speculation at 12 read -5 % (at coding's 2.6 it pays), the probe ended and,
    nothing speculating any more, the estimate froze: the phase re-converged late (25.5 / 20.4 s) or never."""
    p = make_policy(name, seed=0, max_batch_size=256)
    d = chat_then_probe_at_12(p, 2.6)
    assert speculates(12, d.threshold) and not speculates(12, d.exploit_threshold) and d.shift, d
    assert "mostly older traffic" in d.reason, d
    t, n = 104.5, 0
    while d.exploratory:                    # ... until the estimate is the traffic's here: a few ticks at most
        n += 1
        assert n <= 16, "the probe never ends"
        while t < 104.5 + 0.5 * n:
            p.observe(spec(t, 12, SPEC_12, 2.6))
            t += SPEC_12
        d = p.decide(Snapshot(104.5 + 0.5 * n, 8, 256, 12))
    assert p.accept.mean > 2.4 and speculates(12, d.exploit_threshold), (p.accept.mean, d)


@pytest.mark.parametrize("name", ["thompson", "ucb"])
def test_a_probe_that_measures_speculation_losing_ends_after_its_tick(name):
    """The same traffic (1.7) at batch 12: speculation loses there, the probe ends as before."""
    d = chat_then_probe_at_12(make_policy(name, seed=0, max_batch_size=256), 1.7)
    assert "mostly older traffic" not in d.reason and not speculates(12, d.threshold), d


@pytest.mark.parametrize("name", ["thompson", "ucb"])
def test_no_probe_goes_on_where_other_batches_keep_measuring_the_acceptance_it_holds(name):
    """An open loop's batch sizes wander: spec batches in other buckets measure the acceptance too (here chat's,
    still), and what the run measured is no longer only the probe's."""
    p = make_policy(name, seed=0, max_batch_size=256)
    d = chat_then_probe_at_12(p, 2.6, others=1.7)
    assert "mostly older traffic" not in d.reason, (d, p.accept.mean, p.run.accept)
