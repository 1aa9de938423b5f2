"""A step back of the wall clock (NTP correcting the host, e.g. while the engine loads). The SGLang engine's
clock is the wall clock (its processes stamp samples with time.time()); fed to the guard as it is, every
proposal made before the step stays inside the stabilisation window, and the change budget stops refilling,
until the clock has caught up: the threshold held for as long as the step was, an hour for an hour (found
by a review, tests written against the guard). The daemon's time base is the SteadyClock (intake.py): the
loop's time goes on from the newest it had, and samples read after the step carry the same offset."""
import sqlite3

from controller.control.guard import Guard
from controller.control.guard_config import GuardConfig
from controller.daemon.intake import SteadyClock
from policies import Decision
from policies.buckets import Buckets
from tests.fakes import FakeEngine, feed, good, make_service


def _held_after_a_step_back(clock_now) -> int:
    """The threshold ten seconds after the raw clock stepped back an hour, times read through clock_now."""
    raw = [1_800_000_000.0]
    now = clock_now(lambda: raw[0])
    g = Guard(GuardConfig(stabilisation_s=0.5, max_step_buckets=100, changes_per_min=0), Buckets(256), initial=8)
    for _ in range(20):                      # the policy has wanted 8 for ten seconds
        t = now()
        assert g.apply(t, Decision(8, 8, "x"), t)[0] == 8
        raw[0] += 0.5
    raw[0] -= 3600.0                         # the wall clock steps back an hour
    applied = None
    for _ in range(20):                      # then the policy wants 32 for ten seconds
        t = now()
        applied = g.apply(t, Decision(32, 32, "y"), t)[0]
        raw[0] += 0.5
    return applied


def test_a_wall_clock_step_back_does_not_freeze_the_threshold():
    assert _held_after_a_step_back(lambda raw: SteadyClock(raw).now) == 32
    assert _held_after_a_step_back(lambda raw: raw) == 8          # the raw wall clock: held (the bug)


def test_the_service_runs_on_the_steady_clock_and_restamps_samples_after_a_step(short_tmp):
    engine = FakeEngine()
    engine.t = 1_000_000.0
    svc, writer = make_service(short_tmp, engine=engine)
    feed(svc, [good(engine.t + i * 0.001) for i in range(5)])
    svc.retune()
    engine.t -= 3600.0                       # the host's clock steps back an hour
    feed(svc, [good(engine.t + 0.1 + i * 0.001) for i in range(5)])        # stamped after the step
    svc.retune()
    ts = [t for (t,) in sqlite3.connect(short_tmp / "s.db").execute("SELECT t FROM samples ORDER BY rowid")]
    assert len(ts) == 10 and min(ts[5:]) > max(ts[:5])     # the loop's time went on, none rejected
    assert svc.clock.now() >= 1_000_000.0 and svc.status()["samples"]["rejected"]["time"] == 0
    writer.stop()
