"""Supervision of the SGLang child and the telemetry boundary: faults found in review."""
import pytest

from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine


@pytest.mark.parametrize("value", [float("inf"), 1e15])
def test_a_probe_interval_the_engine_takes_is_one_the_daemon_can_schedule(value):
    """[sglang] probe_s = inf passed the engine's check ("inf: no limit") and the daemon then failed in _bring_up,
    after SGLang had loaded for minutes: APScheduler's interval is a timedelta (OverflowError), exit 1, restarted, again."""
    from apscheduler.triggers.interval import IntervalTrigger
    try:
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "probe_s": value})
    except EngineError as e:                       # refused before anything launches: fine
        assert "probe_s" in str(e)
        return
    if eng.probe_s > 0:                            # what Daemon._bring_up schedules
        IntervalTrigger(seconds=eng.probe_s)


def test_a_second_daemon_never_takes_over_the_telemetry_socket_of_a_running_one(short_tmp, monkeypatch):
    """Two daemons of one user (each its own --db, --socket and [sglang] port) share the state directory's
    telemetry.ipc: zmq's bind unlinked the running daemon's socket and bound its own, so the first SGLang's plugin
    (which connects at its first decode batch) sent every sample to the second daemon: one learned from both
    engines' batches, the other from none."""
    import zmq

    from tests.conftest import fake_sglang_python
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp))
    address = f"ipc://{short_tmp}/telemetry.ipc"
    ctx = zmq.Context.instance()
    first = ctx.socket(zmq.PULL)                    # the running daemon's receiver
    first.bind(address)
    python = fake_sglang_python(short_tmp / "python")
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(python)})
    try:
        with pytest.raises(EngineError, match="telemetry socket .* in use"):
            eng.start(lambda s: None)
        assert eng.proc is None
    finally:
        eng.stop()
    push = ctx.socket(zmq.PUSH)                     # the first SGLang's plugin, connecting now
    push.connect(address)
    push.send(b"sample")
    assert first.poll(5000) and first.recv() == b"sample"
    push.close(linger=0)
    first.close(linger=0)


DRIVER = """
import sys
from controller.daemon.engines.sglang import SGLangEngine
eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": sys.argv[1], "port": int(sys.argv[2])})
eng.start(lambda s: None)
eng.proc.wait(30)
print("daemon alive; SGLang exited", eng.proc.returncode, flush=True)
eng.stop()
"""


def test_sglang_killing_its_process_group_does_not_kill_the_daemon(short_tmp):
    """SGLang's schedulers SIGKILL their process group on an exception where SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION is
    set (scheduler.py, 0.5.14 ... 0.5.23; opt-in): SGLang runs in the daemon's group, so the daemon died with it, by
    SIGKILL, without its exit 1, the error's event or a drain. The daemon holds it off, even where its own environment
    (a unit's Environment=) sets it; [sglang] env may not set it. (The daemon here is a driver in a session of its
    own: the group it would lose is not pytest's.)"""
    import os
    import socket
    import subprocess
    import sys

    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang import SGLangEngine
    from tests.conftest import ROOT, fake_sglang_python
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the scheduler's opt-in os.killpg(os.getpgrp(), SIGKILL), as SGLang reads the variable (EnvBool: 1 / true)
    python = fake_sglang_python(short_tmp / "python", 'case "$SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION" in 1|true) '
                                                      'kill -KILL 0;; esac; exit 1')
    env = dict(os.environ, PYTHONPATH=str(ROOT), RUNTIME_DIRECTORY=str(short_tmp), STATE_DIRECTORY=str(short_tmp),
               SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION="1")
    done = subprocess.run([sys.executable, "-c", DRIVER, str(python), str(port)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, start_new_session=True)
    assert done.returncode == 0 and "daemon alive; SGLang exited 1" in done.stdout, (done.returncode, done.stderr)
    with pytest.raises(EngineError, match="SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION is set by the daemon"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3",
                      "env": {"SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION": True}})


def test_an_answer_cut_short_is_a_failed_probe_and_a_refused_threshold_not_an_escape(short_tmp):
    """helper-91's suspicion, confirmed: an answer cut short (http.client.IncompleteRead, a bad status line: an
    HTTPException, not an OSError) escaped probe(), so a half-answering SGLang never counted towards hang_after_s,
    and set_threshold raised it past the daemon's EngineError handling."""
    import socket
    import threading

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",          # IncompleteRead
                   b"NOT HTTP AT ALL\r\n\r\n"]                                        # BadStatusLine

        def serve():
            for i in range(4):
                conn, _ = srv.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answers[i % 2])
        server = threading.Thread(target=serve, daemon=True)
        server.start()
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": port})
        assert eng.probe(now=100.0) is False and eng.probe(now=130.0) is False
        assert eng.unanswered_s(now=130.0) == 30.0 and eng.unanswered_s(now=170.0) == 30.0
        eng._probing_since = 145.0                       # (the next probe waiting 25 s: counted to now)
        assert eng.unanswered_s(now=170.0) == 70.0
        eng._probing_since = None
        for _ in range(2):
            with pytest.raises(EngineError, match="set_internal_state failed"):
                eng.set_threshold(4)
        server.join(10)


def test_a_forged_message_over_the_telemetry_size_is_never_read(short_tmp):
    """helper-91's suspicion: no size limit on the telemetry socket; a member of its group could hand the daemon a
    gigabyte to decode. Over MAX_TELEMETRY_MESSAGE the sender is dropped before anything is read; real messages
    (16 samples at most) still pass."""
    import zmq

    from controller.contract import pack_sample
    from controller.daemon.engines.child import MAX_TELEMETRY_MESSAGE, telemetry_pull
    address = f"ipc://{short_tmp}/t.ipc"
    pull = telemetry_pull(address)
    forger, plugin = (zmq.Context.instance().socket(zmq.PUSH) for _ in range(2))
    try:
        forger.connect(address)
        forger.send(b"\x01" * (MAX_TELEMETRY_MESSAGE + 1))
        real = b"".join(pack_sample(1.0 + i, 8, 3, 20, 0.01, True) for i in range(16))
        plugin.connect(address)
        plugin.send(real)
        got = [pull.recv() for _ in range(1) if pull.poll(5000)]
        assert got == [real] and not pull.poll(300)
    finally:
        for s in (forger, plugin, pull):
            s.close(linger=0)


def test_a_telemetry_socket_whose_backlog_is_full_is_a_running_daemons(short_tmp):
    """helper-92: a connect that timed out (the listener's backlog full: a live daemon, busy) read as a left-over
    file, so a second daemon would unlink and take over the running one's telemetry socket."""
    import socket

    from controller.daemon.sockprobe import LIVE, NOBODY, who_listens
    path = short_tmp / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    queued = []
    try:
        while True:                 # fill the backlog (never accepted)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            queued.append(c)
            try:
                c.connect(str(path))
            except BlockingIOError:
                break
        assert who_listens(path)[0] == LIVE
    finally:
        for c in queued:
            c.close()
        listener.close()
    assert who_listens(path)[0] == NOBODY      # closed: a left-over file


def test_a_probe_still_waiting_counts_towards_hang_after_s_once_past_sglangs_own_20_s():
    """The waiting probe is what counts the time to now (an HTTP server that hangs outright: each probe waits 60 s):
    probe() marks itself waiting, and health() counts to now once it has waited FAILING_AFTER_S."""
    import socket
    import threading
    import time

    from controller.daemon.engines.sglang import FAILING_AFTER_S
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": srv.getsockname()[1],
                            "hang_after_s": 100})
        eng.proc = type("Alive", (), {"poll": lambda self: None})()
        first = threading.Thread(target=eng.probe, kwargs={"now": 0.0})
        first.start()
        srv.accept()[0].close()                          # an answer cut off: a failed probe, failing since 0
        first.join(30)
        waiting = threading.Thread(target=eng.probe)
        waiting.start()
        held, _ = srv.accept()                           # the second: no answer yet
        while eng._probing_since is None:
            time.sleep(0.01)
        since = eng._probing_since
        assert eng.unanswered_s(now=since + FAILING_AFTER_S - 1) == 0.0            # (to the first's start)
        assert eng.unanswered_s(now=since + FAILING_AFTER_S) == since + FAILING_AFTER_S
        assert not eng.health(now=100.0 + FAILING_AFTER_S + since)["ok"]
        held.close()
        waiting.join(30)
    assert eng._probing_since is None and eng.unanswered_s(now=since + 1000) == since     # answered: to its start
