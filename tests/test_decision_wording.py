"""What `specctl history` says, and when the threshold holds still: the reasons are words an
operator can read, and noise in a bucket with no live traffic does not flip the threshold."""
import math

from controller.daemon.livestats import LiveStats
from policies import Sample, Snapshot, make_policy
from tests.synthetic import Stream, run


def _reasons(seconds: float = 120) -> list[str]:
    seen = []
    loop = run("bandit", Stream(crossover=12, seed=1), seconds=0)
    tick = loop.tick

    def record(now):
        t = tick(now)
        if t.changed:
            seen.append(t.reason)
        return t
    loop.tick = record
    run("bandit", Stream(crossover=12, seed=1), seconds=seconds, loop=loop)
    return seen


def test_history_reasons_say_what_and_why_in_words():
    reasons = _reasons()
    assert reasons, "the threshold never moved"
    for r in reasons:
        assert "untried" not in r and "on the way to" not in r and "exploit:" not in r, r
    trials = [r for r in reasons if r.startswith("trial:")]
    assert trials and all(("never measured" in r or "last measured" in r or "estimate uncertain" in r
                           or "lost at" in r) for r in trials), trials
    moves = [r.removeprefix("trial over; ") for r in reasons if not r.startswith("trial:")]   # a move may end a trial
    assert any(r.startswith("speculate up to batch") and "it pays at batch" in r and "tok/s" in r for r in moves)


def _spec(t, bs, step_off, gain):
    # accept length 2: spec tok/s = (1 + gain) x off tok/s at this batch size
    return Sample(t, bs, 2, 2 * bs, 2 * step_off / (1 + gain), True)


def _off(t, bs, step_off):
    return Sample(t, bs, 0, bs, step_off, True)


def test_a_near_tie_in_a_bucket_without_live_traffic_does_not_move_the_threshold():
    p = make_policy("ucb", max_batch_size=24)
    for i in range(200):                       # live batch size 4: speculation clearly wins
        p.observe(_spec(i * 0.001, 4, 0.01, 0.5))
        p.observe(_off(i * 0.001, 4, 0.01))
    p.observe(_spec(0.3, 20, 0.02, 0.005))      # batch 20, once each: +0.5%, well inside the noise
    p.observe(_off(0.3, 20, 0.02))
    snap = Snapshot(1.0, 10, 24, live_batch_size=4)
    assert p.decide(snap).exploit_threshold == 10
    for i in range(2000):                       # measured well: the +0.5% is real, the move pays
        p.observe(_spec(0.3 + i * 1e-4, 20, 0.02, 0.005))
        p.observe(_off(0.3 + i * 1e-4, 20, 0.02))
    assert p.decide(snap).exploit_threshold == 20


def test_a_move_that_changes_the_live_batch_mode_is_never_held():
    p = make_policy("ucb", max_batch_size=24)
    p.observe(_spec(0.1, 20, 0.02, 0.005))      # one noisy sample each, as above
    p.observe(_off(0.1, 20, 0.02))
    p.observe(_spec(0.2, 4, 0.01, 0.5))
    p.observe(_off(0.2, 4, 0.01))
    assert p.decide(Snapshot(1.0, 10, 24, live_batch_size=20)).exploit_threshold == 20


def test_samples_per_real_second_count_arrivals_not_engine_time():
    stats = LiveStats(window_s=30)
    for i in range(11):                         # 100 samples every 0.1 real s, 10 engine s apart
        for j in range(100):
            stats.add(Sample(i * 10.0 + j * 0.1, 8, 0, 8, 0.1, True))
        stats.arrived(100, real_now=i * 0.1)
    assert stats.arrival_rate(real_now=1.0) == 1000.0
    assert stats.snapshot(110.0)["batches_per_s"] < 20      # the engine clock's rate, 100x slower
    assert math.isclose(stats.snapshot(150.0)["figures_age_s"], 150.0 - 109.9, abs_tol=0.1)
    assert math.isclose(stats.snapshot(150.0, speed=10)["figures_age_s"], (150.0 - 109.9) / 10, abs_tol=0.1)
