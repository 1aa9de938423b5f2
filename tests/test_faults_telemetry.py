"""Fault injection at the telemetry boundary: hostile samples are refused at the daemon's edge, counted
by kind, and reach neither a policy, nor the live figures, nor the database, nor a checkpoint. On the
code before issue 16 one NaN step time ended every later retune, and batch size 0 killed ingest."""
import json
import math
import sqlite3
import time

import pytest

from controller.contract import Sample
from controller.daemon.intake import SampleGate, SteadyClock, validate_sample
from policies import PolicyError, make_policy
from tests.fakes import FakeEngine, feed, good, make_service

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("sample,kind", [
    (Sample(100.0, 4, 3, 12, NAN), "step_s"),
    (Sample(100.0, 4, 3, 12, 1e-300), "step_s"),
    (Sample(100.0, 4, 3, 12, -0.01), "step_s"),
    (Sample(100.0, 4, 3, 12, INF), "step_s"),
    (Sample(100.0, 0, 0, 0, 0.01), "batch_size"),
    (Sample(100.0, -3, 0, -3, 0.01), "batch_size"),
    (Sample(100.0, 65, 0, 65, 0.01), "batch_size"),
    (Sample(100.0, 4, 4, 16, 0.02), "steps"),
    (Sample(100.0, 4, -1, 4, 0.02), "steps"),
    (Sample(100.0, 4, 3, 17, 0.02), "tokens"),
    (Sample(100.0, 4, 0, 5, 0.01), "tokens"),
    (Sample(100.0, 4, 3, 3, 0.02), "tokens"),
    (Sample(NAN, 4, 0, 4, 0.01), "time"),
    (Sample(INF, 4, 0, 4, 0.01), "time"),
    (Sample(1e18, 4, 0, 4, 0.01), "time"),
    (Sample(-1.0, 4, 0, 4, 0.01), "time"),
    (Sample(100.0, 4.5, 0, 4, 0.01), "type"),
    (Sample(100.0, True, 0, 1, 0.01), "type"),
    (Sample(100.0, 4, 0, 4, "0.01"), "type"),
])
def test_each_hostile_field_is_named(sample, kind):
    assert validate_sample(sample, max_batch_size=64, k=3, last_t=None, now=100.0) == kind


def test_sound_samples_pass_and_time_may_jitter_but_not_run_back():
    assert validate_sample(Sample(100.0, 4, 3, 12, 0.02), 64, 3, None, 100.0) is None
    assert validate_sample(Sample(100.0, 64, 0, 64, 5.0, False), 64, 3, None, 100.0) is None
    assert validate_sample(Sample(99.5, 4, 0, 4, 0.01), 64, 3, last_t=100.0, now=100.0) is None
    assert validate_sample(Sample(90.0, 4, 0, 4, 0.01), 64, 3, last_t=100.0, now=100.0) == "time_order"
    assert validate_sample(Sample(99.5, 4, 0, 4, 0.01), 64, 3, last_t=104.9, now=100.0) is None   # (ahead: kept to now)
    assert validate_sample(Sample(98.5, 4, 0, 4, 0.01), 64, 3, last_t=104.9, now=100.0) == "time_order"


def test_the_gate_counts_by_kind_and_carries_a_clock_step_back_over_onto_the_samples():
    clock = [100.0]
    gate = SampleGate(64, 3, SteadyClock(lambda: clock[0]))
    assert gate.admit(Sample(100.0, 4, 0, 4, 0.01)) == (None, Sample(100.0, 4, 0, 4, 0.01))
    assert gate.admit(Sample(50.0, 4, 0, 4, 0.01))[0] == "time_order"
    assert gate.admit(Sample(100.0, 0, 0, 0, 0.01))[0] == "batch_size"
    assert gate.rejected["time_order"] == 1 and gate.rejected["batch_size"] == 1 and gate.rejected_total == 2
    clock[0] = 20.0                                  # the wall clock was stepped back: time goes on from 100
    assert gate.admit(Sample(20.5, 4, 0, 4, 0.01)) == (None, Sample(100.5, 4, 0, 4, 0.01))
    assert gate.admit(Sample(99.0, 4, 0, 4, 0.01))[0] == "time"   # stamped before the step, read after it


def test_the_steady_clock_never_goes_back_but_lets_jitter_through():
    raw = [1000.0]
    clock = SteadyClock(lambda: raw[0])
    assert clock.now() == 1000.0
    raw[0] = 999.5                                   # within BACK_S: no step, the offset stays 0
    assert clock.now() == 999.5 and clock.offset == 0.0
    raw[0] = 1000.0 - 3600.0                         # an hour back
    assert clock.now() == 1000.0 and clock.offset == 3600.0
    raw[0] += 2.0
    assert clock.now() == 1002.0                     # and on from there at the clock's pace


HOSTILE = [Sample(100.0, 4, 3, 12, NAN), Sample(100.0, 0, 0, 0, 0.01), Sample(100.0, 4, 3, 12, 1e-300),
           Sample(1e18, 4, 0, 4, 0.01), Sample(NAN, 4, 0, 4, 0.01), Sample(100.0, 4, 3, 999, 0.02)]


def test_hostile_samples_never_reach_the_loop_the_database_or_a_checkpoint(short_tmp):
    svc, writer = make_service(short_tmp)
    stream = []
    for i in range(200):
        stream.append(good(100.0 + i * 0.001, bs=1 + i % 8, spec=i % 2 == 0))
        stream.append(HOSTILE[i % len(HOSTILE)])
    svc.engine.t = 100.3
    feed(svc, stream)
    for _ in range(5):
        svc.retune()                                 # raised for good after the NaN on the old code
    assert svc.job_errors == {}
    st = svc.status()
    assert st["samples"]["total"] == 200 and st["samples"]["written"] == 200
    assert sum(st["samples"]["rejected"].values()) == 200
    assert st["samples"]["rejected"] == {"type": 0, "time": 66, "time_order": 0, "batch_size": 34, "steps": 0,
                                         "tokens": 33, "step_s": 67}
    assert st["daemon"]["healthy"], st["daemon"]["problems"]
    svc.checkpoint()
    assert writer.flush(10)
    conn = sqlite3.connect(short_tmp / "s.db")
    assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 200
    assert conn.execute("SELECT count(*) FROM samples WHERE batch_size <= 0 OR step_s < 1e-5 OR t > 1000 "
                        "OR tokens > batch_size * (steps + 1) OR t != t OR step_s != step_s").fetchone()[0] == 0
    state = conn.execute("SELECT state FROM policy_state ORDER BY id DESC LIMIT 1").fetchone()[0]
    json.loads(state, parse_constant=lambda c: pytest.fail(f"checkpoint holds {c}"))
    conn.close()
    writer.stop()


@pytest.mark.parametrize("name", ["thompson", "ucb", "model", "sglang-ema"])
def test_policies_refuse_a_non_finite_state(name):
    policy = make_policy(name, max_batch_size=64)
    for i in range(50):
        policy.observe(good(100.0 + i * 0.01, bs=1 + i % 8, spec=i % 2 == 0))
    state = json.loads(json.dumps(policy.state()))
    key = "slots" if name == "sglang-ema" else "q_spec"
    state[key][0][1] = NAN
    fresh = make_policy(name, max_batch_size=64)
    with pytest.raises(PolicyError, match="non-finite"):
        fresh.load_state(state)


def test_a_poisoned_checkpoint_is_not_restored_and_the_loop_decides(short_tmp):
    """A NaN checkpointed by an older version: the restart must not come back dead."""
    svc, writer = make_service(short_tmp)
    feed(svc, [good(100.0 + i * 0.001, bs=1 + i % 8, spec=i % 2 == 0) for i in range(100)])
    state = svc.loop.policy.state()
    state["q_spec"][0][1] = NAN
    writer.q.put(("policy_state", {"wall": 1.0, "policy": "thompson", "params": "{}", "state": json.dumps(state)}))
    writer.setting("threshold", NAN)
    writer.stop()
    again, writer2 = make_service(short_tmp)
    assert all(math.isfinite(row[1]) for row in again.loop.policy.state()["q_spec"])
    assert again.loop.threshold == 0                  # the configured initial threshold, not int(NaN)
    assert again.start_reason.endswith("the saved one is not a batch size")     # what history will say
    feed(again, [good(100.0 + i * 0.001, bs=1 + i % 8) for i in range(20)])
    again.retune()
    assert again.job_errors == {}
    writer2.stop()


def test_the_guard_refuses_a_non_finite_threshold():
    from controller.control.guard import Guard
    from controller.control.guard_config import GuardConfig
    from policies.buckets import Buckets
    for bad in (NAN, INF, 3.5, -1, True):
        with pytest.raises(PolicyError):
            Guard(GuardConfig(), Buckets(64), bad)


def test_the_sglang_receiver_hands_hostile_wire_samples_to_the_gate(short_tmp):
    """Over a real zmq socket: what the plugin (or anything else on the socket) sends is checked."""
    import threading

    import zmq

    from controller.contract import pack_sample
    from controller.daemon.engines.sglang import SGLangEngine
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, engine=engine)
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "max_running_requests": 64})
    ctx = zmq.Context.instance()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(f"ipc://{short_tmp}/t.ipc")
    push.connect(f"ipc://{short_tmp}/t.ipc")
    rx = threading.Thread(target=eng._receive, args=(pull, svc.ingest.on_sample), daemon=True)
    rx.start()
    push.send(pack_sample(100.0, 4, 3, 12, NAN, True) + pack_sample(100.0, 0, 0, 0, 0.01, True)
              + pack_sample(100.0, 4, 3, 12, 0.02, True) + pack_sample(100.0, 4, 9, 12, 0.02, True))
    push.send(pack_sample(100.0, 8, 0, 8, 0.01, True))             # the last: once it is in, all are
    svc.ingest.stop()
    while svc.ingest.gate.rejected_total + len(svc.ingest._q) < 5 and rx.is_alive():
        rx.join(0.01)
    eng._stop.set()
    rx.join(5)
    svc.ingest.run()
    assert svc.ingest.gate.rejected == {**svc.ingest.gate.rejected, "step_s": 1, "batch_size": 1, "steps": 1}
    assert svc.stats.total == 2
    push.close(linger=0)
    writer.stop()


def test_a_sample_stamped_ahead_does_not_turn_the_sound_ones_after_it_away(short_tmp):
    """helper-101, over a real zmq socket into a real database: samples an hour ahead or behind are rejected ("time"),
    counted and not stored; one forged within AHEAD_S of the clock passes, and made every sound sample after it
    "time_order" until the clock caught up (the order was kept against it, not against the clock)."""
    import threading

    import zmq

    from controller.contract import pack_sample
    from controller.daemon.engines.sglang import SGLangEngine
    svc, writer = make_service(short_tmp, engine=FakeEngine())
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "max_running_requests": 64})
    pull, push = zmq.Context.instance().socket(zmq.PULL), zmq.Context.instance().socket(zmq.PUSH)
    pull.bind(f"ipc://{short_tmp}/t.ipc")
    push.connect(f"ipc://{short_tmp}/t.ipc")
    rx = threading.Thread(target=eng._receive, args=(pull, svc.ingest.on_sample), daemon=True)
    rx.start()
    now = svc.clock.now()
    push.send(pack_sample(now + 3600.0, 4, 0, 4, 0.01, True) + pack_sample(now - 3600.0, 4, 0, 4, 0.01, True)
              + pack_sample(now + 4.9, 4, 0, 4, 0.01, True))
    for i in range(10):                                      # the plugin's, stamped by the clock
        push.send(pack_sample(now + i * 0.01, 8, 0, 8, 0.01, True))
    deadline = time.monotonic() + 30                         # (a receiver that dropped some: the asserts say so)
    while svc.ingest.gate.rejected_total + len(svc.ingest._q) < 13 and rx.is_alive() and time.monotonic() < deadline:
        rx.join(0.01)
    eng._stop.set()
    rx.join(5)
    feed(svc, [])
    assert {k: n for k, n in svc.ingest.gate.rejected.items() if n} == {"time": 2}     # was also time_order 10
    rows = sqlite3.connect(short_tmp / "s.db").execute("SELECT t - ?, batch_size FROM samples", (now,)).fetchall()
    assert sorted(bs for _, bs in rows) == [4] + [8] * 10 and max(t for t, _ in rows) < 5.0
    push.close(linger=0)
    writer.stop()


def test_samples_that_keep_arriving_all_rejected_make_the_daemon_unhealthy(tmp_path):
    """helper-95: samples stamped far off the daemon's clock (or any kind rejected, all of them) left status
    'healthy' while nothing was learned. A minute of nothing but rejects is a problem; a good sample clears it;
    a few rejects and then an idle engine are none."""
    real = [1000.0]
    service, writer = make_service(tmp_path)
    try:
        gate = service.ingest.gate
        gate.monotonic = lambda: real[0]
        now = service.clock.now()
        bad = Sample(now + 3600.0, 4, 0, 4, 0.01)          # an hour ahead: "time"
        for step in range(7):                             # 60 s of rejects, one every 10 s
            service.ingest.on_sample(bad)
            assert gate.stalled() is None or step == 6
            real[0] += 10.0 if step < 6 else 0.0
        problems = service.status()["daemon"]["problems"]
        assert "telemetry: every sample rejected for 60 s (time 7); nothing is learned" in problems, problems
        assert not service.status()["daemon"]["healthy"]
        real[0] += 61.0                                   # then nothing arrives for a minute: an idle engine
        assert gate.stalled() is None
        service.ingest.on_sample(bad)
        real[0] += 70.0
        service.ingest.on_sample(bad)
        assert gate.stalled() is not None
        service.ingest.on_sample(good(service.clock.now()))
        assert gate.stalled() is None and service.status()["daemon"]["healthy"]
    finally:
        writer.stop()
