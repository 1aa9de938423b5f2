"""Fault injection in the control loop: a failing retune or ingest step is counted and the loop goes
on; a dead worker thread or a loop that stopped deciding ends the daemon with exit 1; a threshold the
engine did not take is retried; status answers while SGLang or SQLite hold a command up."""
import sqlite3
import threading

from tests.fakes import FakeEngine, feed, good, make_service


class Boom(RuntimeError):
    pass


def test_a_failing_retune_is_counted_reported_and_the_loop_goes_on(short_tmp):
    svc, writer = make_service(short_tmp)
    feed(svc, [good(100.0 + i * 0.001, bs=1 + i % 8) for i in range(50)])
    real = svc.loop.policy.decide
    svc.loop.policy.decide = lambda snap: (_ for _ in ()).throw(Boom("decide exploded"))
    svc.retune()
    svc.retune()
    st = svc.status()
    assert st["job_errors"] == {"retune": 2}
    assert not st["daemon"]["healthy"] and any("decide exploded" in p for p in st["daemon"]["problems"])
    svc.loop.policy.decide = real
    svc.retune()
    assert svc.status()["daemon"]["healthy"]
    writer.stop()


def test_a_sample_that_breaks_the_policy_is_counted_and_ingest_goes_on(short_tmp):
    svc, writer = make_service(short_tmp)
    observe = svc.loop.policy.observe

    def fragile(sample):
        if sample.batch_size == 7:
            raise ZeroDivisionError("division by zero")
        observe(sample)
    svc.loop.policy.observe = fragile
    feed(svc, [good(100.0 + i * 0.001, bs=1 + i % 8) for i in range(80)])
    st = svc.status()
    assert st["samples"]["ingest_errors"] == 10 and st["samples"]["total"] == 70
    assert any(p.startswith("ingest:") for p in st["daemon"]["problems"])
    feed(svc, [good(100.1 + i * 0.001, bs=3) for i in range(10)])       # the ingest pass still runs
    assert svc.status()["samples"]["total"] == 80
    writer.stop()


def _serve_until_verdict(daemon, svc, timeout=30.0):
    """Run the daemon's serving loop (main thread in the daemon) until it returns; a timer stops it
    in case it never notices anything (the old code), which the exit code then shows."""
    guard = threading.Timer(timeout, daemon.stop_flag.set)
    guard.start()
    try:
        daemon._serve(svc.engine, svc, svc.writer)
    finally:
        guard.cancel()
    return daemon.exit_code


def test_a_dead_worker_thread_ends_the_daemon_with_exit_1(short_tmp):
    from controller.daemon.lifecycle import Daemon
    svc, writer = make_service(short_tmp)
    dead = threading.Thread(target=lambda: None, name="ingest")
    dead.start()
    dead.join()
    daemon = Daemon(svc.cfg)
    daemon.watch = {"ingest": dead, "state writer": writer.thread}
    assert _serve_until_verdict(daemon, svc) == 1
    assert writer.flush(10)
    events = sqlite3.connect(short_tmp / "s.db").execute("SELECT detail FROM events WHERE kind = 'error'").fetchall()
    assert events == [("worker thread died: ingest",)]
    writer.stop()


def test_a_loop_that_stopped_deciding_ends_the_daemon_with_exit_1(short_tmp):
    from controller.daemon.lifecycle import Daemon
    svc, writer = make_service(short_tmp)
    daemon = Daemon(svc.cfg)
    daemon.stall_s = 60.0
    svc.last_retune_ok -= 61.0                     # the newest retune that worked was over a minute ago
    assert _serve_until_verdict(daemon, svc) == 1
    writer.stop()


def test_an_engine_start_longer_than_the_stall_limit_is_not_a_stalled_loop(short_tmp):
    """The H200 (12-02c call 4): the engine took 88 s to start, the daemon said ready and exited 0.5 s
    later, "no retune has worked for 88 s", before its first retune had had a chance to run."""
    from controller.daemon.lifecycle import Daemon
    svc, writer = make_service(short_tmp)
    daemon = Daemon(svc.cfg)
    daemon.stall_s = 60.0
    daemon.watch = {"state writer": writer.thread}
    svc.last_retune_ok -= 88.0                     # the service was built before the engine's 88 s start
    svc.apply_initial()                            # the engine is ready: the loop begins here
    assert daemon._fatal_condition(svc.engine, svc) is None
    svc.last_retune_ok -= 61.0                     # and a loop that then stops deciding is still caught
    assert daemon._fatal_condition(svc.engine, svc).startswith("control loop stalled")
    writer.stop()


def test_a_threshold_the_engine_did_not_take_is_retried(short_tmp):
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, policy="fixed", engine=engine)     # wants threshold 5
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    engine.fail_next = 1
    svc.retune()                                   # refused by the engine: counted, not forgotten
    assert engine.applied == [] and svc.engine_errors == 1 and svc.loop.threshold == 0
    svc.retune()
    assert engine.applied == [5] and svc.loop.threshold == 5
    writer.stop()


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    t.start()
    return t, out


def test_status_answers_while_sglang_holds_an_actuation(short_tmp):
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, engine=engine)
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    engine.stall()
    pin, _ = _in_thread(lambda: svc.pin(5))        # durable, then applied: blocks inside set_threshold
    assert engine.entered.wait(10)
    status, got = _in_thread(svc.status)
    status.join(5)                                 # the old code held the service lock over the HTTP call
    alive = status.is_alive()
    engine.hold.set()
    pin.join(10)
    assert not alive and got["value"]["pinned"] is True
    assert engine.applied[-1] == 5
    writer.stop()


def test_status_answers_while_another_process_holds_the_database_lock(short_tmp):
    svc, writer = make_service(short_tmp)
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    other = sqlite3.connect(short_tmp / "s.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")               # an operator's sqlite3 shell in a write transaction
    entered = threading.Event()
    put = writer.q.put

    def traced_put(item, *args, **kwargs):
        put(item, *args, **kwargs)
        if threading.current_thread().name == "command":
            entered.set()
    writer.q.put = traced_put
    command = threading.Thread(target=lambda: svc.set_policy("ucb", {}), name="command", daemon=True)
    command.start()
    assert entered.wait(10)                        # the command's write is queued behind the lock
    status, got = _in_thread(svc.status)
    status.join(3)                                 # the old code flushed under the service lock (5 s)
    alive = status.is_alive()
    other.execute("ROLLBACK")
    other.close()
    command.join(30)
    assert not alive and got["value"]["daemon"]["running"]
    assert svc.policy_info()["name"] == "ucb"
    writer.stop()


def test_an_engine_that_keeps_refusing_thresholds_is_a_problem_and_a_pin_says_it_is_not_in_force(short_tmp):
    """helper-81: SGLang refusing every threshold (its plugin inactive, a 401 on the admin key) left the daemon
    'healthy' for good, the refusals counted in engine_errors only, and `specctl threshold pin 3` answered 'threshold
    pinned at 0' with exit 0."""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from controller.daemon.api import ControlServer
    from state import queries
    from state.db import open_store
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, policy="fixed", engine=engine)     # wants threshold 5
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    engine.fail_next = 1000
    for _ in range(3):
        svc.retune()
    daemon = svc.status()["daemon"]
    assert not daemon["healthy"] and daemon["problems"] == [
        "actuation: the engine did not take threshold 5 (SGLang did not answer); retried every retune"]
    server = ControlServer(short_tmp / "c.sock", svc)
    server.start()
    flags = ["--socket", str(short_tmp / "c.sock"), "--db", svc.cfg["storage"]["db"]]
    try:
        res = CliRunner().invoke(cli, [*flags, "threshold", "pin", "3"])
        assert res.exit_code == 1 and res.output.startswith(
            "specctl: threshold pinned at 3 (saved), but the engine has not taken it: SGLang did not answer"), res.output
        assert queries.settings(open_store(svc.cfg["storage"]["db"], readonly=True, check=False))["pinned"] == 3
        engine.fail_next = 0
        svc.retune()
        assert engine.applied == [3] and svc.status()["daemon"]["healthy"]
        res = CliRunner().invoke(cli, [*flags, "threshold", "pin", "3"])
        assert res.exit_code == 0 and "already pinned at 3" in res.output
        engine.fail_next = 1000       # an unpin whose policy threshold the engine then refuses: saved, not in force
        res = CliRunner().invoke(cli, [*flags, "threshold", "unpin"])
        assert res.exit_code == 1 and res.output.startswith(
            "specctl: threshold unpinned (saved), but the engine has not taken the policy's threshold 5: SGLang did "
            "not answer; it runs 3"), res.output
        assert queries.settings(open_store(svc.cfg["storage"]["db"], readonly=True, check=False))["pinned"] is None
    finally:
        server.stop()
        writer.stop()


def test_a_pin_that_outlasts_specctls_wait_says_it_may_land(short_tmp, monkeypatch):
    """helper-81 (not reproduced there): SGLang may take up to 30 s to answer set_internal_state, specctl waited 10:
    a pin already saved came back as 'gave no usable answer (timed out)'. It now says it may still be applied."""
    from click.testing import CliRunner

    from controller.cli import client
    from controller.cli.main import cli
    from controller.daemon.api import ControlServer
    monkeypatch.setattr(client, "ANSWER_TIMEOUT_S", 0.5)
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, engine=engine)
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    server = ControlServer(short_tmp / "c.sock", svc)
    server.start()
    engine.stall()
    try:
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "c.sock"), "--db", svc.cfg["storage"]["db"],
                                       "threshold", "pin", "7"])
        assert res.exit_code == 1 and res.output == (
            f"specctl: the daemon at {short_tmp / 'c.sock'} did not answer in 0.5 s: whether POST /threshold/pin was "
            "applied (the daemon may still be waiting on SGLang), `specctl status` says\n"), res.output
        engine.hold.set()                          # SGLang answers at last: the saved pin lands
        for _ in range(200):
            if engine.applied[-1:] == [7]:
                break
            threading.Event().wait(0.05)
        assert engine.applied[-1:] == [7]
    finally:
        engine.hold.set()
        server.stop()
        writer.stop()


def test_a_refusal_the_loop_no_longer_wants_is_no_problem(short_tmp):
    """helper-86: after the engine refused 5 while running 0, a pin at 0 (what the engine runs: nothing to send) left
    'actuation: did not take threshold 5' among the problems for good, though nothing was retried any more."""
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, policy="fixed", engine=engine)     # wants threshold 5
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    engine.fail_next = 1000
    svc.retune()
    assert svc.status()["daemon"]["problems"] and svc.loop.threshold == 0
    answer = svc.pin(0)
    assert answer["refused"] is None and engine.applied == []
    assert svc.status()["daemon"]["healthy"], svc.status()["daemon"]["problems"]
    writer.stop()


def test_a_pins_answer_names_only_a_refusal_of_that_pin(short_tmp):
    """helper-92: a retune that failed before it actuated left an older refusal (of another threshold), and the pin's
    answer reported it as the pin's: `specctl threshold pin 3` said the engine had not taken 3."""
    svc, writer = make_service(short_tmp, policy="fixed")
    svc.refused = (5, "SGLang did not answer")          # the engine refused the policy's 5 at the last retune
    svc.retune = lambda: None                            # the pin's retune fails before it actuates
    answer = svc.pin(3)
    assert answer["refused"] is None and answer["refused_threshold"] is None and answer["pinned_at"] == 3
    svc.refused = (3, "SGLang did not answer")
    assert svc.pin(3)["refused_threshold"] == 3
    assert svc.pin(None)["refused_threshold"] == 3       # an unpin's: whatever the loop asked for last
    writer.stop()
