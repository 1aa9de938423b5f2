"""The daemon as a real subprocess: READY=1 on a real NOTIFY_SOCKET, a moving threshold,
policy and pin commands, SIGKILL mid-run, restart with everything restored."""
import re
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.daemon_proc import ROOT, DaemonProc, notify_listener, wait_notify


def test_full_lifecycle_survives_sigkill(short_tmp):
    listener = notify_listener(str(short_tmp / "notify"))
    d = DaemonProc(short_tmp, "--trace", "load-steps", "--profile", "crossover-b",
                   notify=str(short_tmp / "notify"), speed=40)
    try:
        started = wait_notify(listener, b"READY=1")
        # systemd's start timeout is extended to cover the engine's wait (ready_timeout_s, 900 s by default)
        assert b"EXTEND_TIMEOUT_USEC=1020000000" in started, started
        lines: list[str] = []            # a retune before the first figures says "no samples": wait for figures
        while len(lines) < 50 and (not lines or lines[-1].endswith("no samples")):
            lines += [m.decode() for m in wait_notify(listener, b"STATUS=threshold") if m.startswith(b"STATUS=")]
        # systemctl status shows it: specctl's words, never Python's None (helper-171: 'accept None, tok/s 3663.4')
        figures = r"(accept length \d\.\d\d|no speculative batch), [\d,]+ tok/s"
        for line in lines:
            assert re.fullmatch(rf"STATUS=threshold \d+, policy bandit; last 30 s: (no samples|{figures})", line), line
        assert re.fullmatch(rf"STATUS=threshold \d+, policy bandit; last 30 s: {figures}", lines[-1]), lines
        first = d.call("GET", "/status")["threshold"]
        # the load trace crosses the crossover: the threshold must move by itself
        d.wait_for(lambda st: st["threshold"] != first and st["decisions"] >= 2, timeout=60,
                   what="threshold moved")
        wait_notify(listener, b"WATCHDOG=1")
        d.call("POST", "/policy", {"name": "ucb", "params": {"c": 1.2}})
        d.wait_for(lambda st: st["policy"]["name"] == "ucb", what="policy switched")
        d.call("POST", "/threshold/pin", {"threshold": 9})
        assert d.call("GET", "/status")["threshold"] == 9
        d.call("POST", "/threshold/unpin", {})
        d.call("POST", "/threshold/pin", {"threshold": 7})
        d.wait_for(lambda st: st["samples"]["written"] > 0, what="samples committed")
        d.call("POST", "/policy", {"name": "ucb", "params": {"c": 1.2}})   # checkpoints ucb's state, commits it
        d.call("GET", "/history?limit=1")    # commits everything queued before it (the pin, the policy setting)
        assert d.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        d.close()

    conn = sqlite3.connect(d.db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    states = conn.execute("SELECT count(*) FROM policy_state WHERE policy = 'ucb'").fetchone()[0]
    assert states >= 1
    # a fresh database has nothing to restore, and the first history row says so
    [first_reason] = conn.execute("SELECT reason FROM decisions ORDER BY id LIMIT 1").fetchone()
    assert first_reason == "initial threshold ([policy] initial_threshold): nothing saved yet", first_reason
    assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] > 0
    conn.close()

    d2 = DaemonProc(short_tmp, "--trace", "load-steps", "--profile", "crossover-b",
                    notify=str(short_tmp / "notify"), speed=40)
    try:
        wait_notify(listener, b"READY=1")
        st = d2.call("GET", "/status")
        assert st["policy"]["name"] == "ucb" and st["policy"]["params"]["c"] == 1.2
        assert st["threshold"] == 7 and st["pinned"] is True
        hist = d2.call("GET", "/history?limit=5")
        assert hist[0]["new"] == 7 and hist[0]["reason"] == "restored at start: pinned at 7 by an operator", (hist, d2.log_text())
        # the simulator's clock resumes where the first run left off: no window is rewritten
        assert hist[0]["t"] >= hist[1]["t"], hist
        d2.call("POST", "/threshold/unpin", {})
        assert d2.stop() == 0                    # SIGTERM: graceful, exit 0
    finally:
        d2.close()
    conn = sqlite3.connect(d2.db)
    kinds = [r[0] for r in conn.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds.count("start") == 2 and kinds[-1] == "stop"
    ts = [r[0] for r in conn.execute("SELECT t FROM samples ORDER BY rowid")]
    assert ts == sorted(ts)                     # one engine clock across both runs
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    listener.close()


def run_daemon_once(tmp, *args, timeout=60):
    """Run `spec-controller run` to completion (for start-up refusals)."""
    import os
    import subprocess
    import sys

    from tests.daemon_proc import ROOT
    (tmp / "c.toml").write_text("")
    return subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(tmp / "c.toml"), *args],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=timeout)


def test_second_daemon_on_same_database_is_refused(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        res = run_daemon_once(short_tmp, "--db", str(d.db), "--socket", str(short_tmp / "b.sock"))
        assert res.returncode == 1
        assert res.stderr.strip().splitlines() == [
            f"spec-controller: another spec-controller (pid {d.proc.pid}) is running on {d.db}; stop it (specctl "
            f"--db {d.db} stop) or give another --db"]
        from click.testing import CliRunner         # what the line says to do stops that daemon (helper-142: the line
        from controller.cli.main import cli         # said no remedy, where the control socket's refusal says one)
        stop = CliRunner().invoke(cli, ["--db", str(d.db), "stop"])
        assert stop.exit_code == 0 and stop.stdout == f"daemon pid {d.proc.pid} stopped\n", stop.output
        assert d.proc.poll() == 0
    finally:
        assert d.stop() == 0


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_clashes_are_refused_before_the_engine_starts(short_tmp):
    """A busy control socket or metrics port is found before an engine (minutes, GPUs) is started."""
    import socket
    d = DaemonProc(short_tmp, "--concurrency", "2")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        d.wait_socket()
        res = run_daemon_once(short_tmp, "--db", str(short_tmp / "b.db"), "--socket", str(d.socket))
        assert res.returncode == 1
        assert res.stderr.strip().splitlines() == [
            f"spec-controller: control socket {d.socket} is in use by another daemon (pid {d.proc.pid}); stop it "
            f"(specctl --socket {d.socket} stop) or give another --socket"]
        port = busy.getsockname()[1]
        res = run_daemon_once(short_tmp, "--db", str(short_tmp / "c.db"), "--socket", str(short_tmp / "c.sock"),
                              "--metrics-port", str(port))
        assert res.returncode == 1
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"spec-controller: metrics port {port}: "), res.stderr
    finally:
        busy.close()
        assert d.stop() == 0
    # both clashes are found before the database is touched (no engine, no start recorded)
    assert not (short_tmp / "b.db").exists() and not (short_tmp / "c.db").exists()


@pytest.mark.parametrize("args,needle,code", [
    (["--policy", "nope"], "unknown policy 'nope'", 2),
    (["--profile", "nope"], "config: [sim] profile (--profile): unknown profile 'nope'", 2),
    (["--trace", "nope"], "config: [sim] trace (--trace): unknown trace 'nope'", 2),
    (["--speed", "0"], "speed=0 out of range", 2),
])
def test_daemon_bad_input_one_line(short_tmp, args, needle, code):
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s"), *args)
    assert res.returncode == code
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr


def test_corrupt_database_refused_and_untouched(short_tmp):
    """helper-172: exit 2, which the unit does not restart (exit 1 was restarted every 5 s; no restart mends the file)."""
    from tests.test_state import damaged_store
    db = damaged_store(short_tmp / "bad.db")
    before = db.read_bytes()
    res = run_daemon_once(short_tmp, "--db", str(db), "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and "corrupt" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "move it aside" in res.stderr and db.read_bytes() == before


def test_a_file_that_is_not_a_database_is_refused_and_untouched(short_tmp):
    db = short_tmp / "bad.db"
    db.write_bytes(b"garbage" * 1000)
    res = run_daemon_once(short_tmp, "--db", str(db), "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [     # (a config error, as config check's)
        f"spec-controller: {db} is not a spec-controller database (not an SQLite file); refusing it"], res.stderr
    assert db.read_bytes() == b"garbage" * 1000


def _count_events(db, kind: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM events WHERE kind = ?", [kind]).fetchone()[0]
    finally:
        conn.close()


def test_sighup_reloads_config(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[guard]\nexplore_share = 0.05\n")
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text("[guard]\nexplore_share = 0.01\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while _count_events(d.db, "reload") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert d.proc.poll() is None
    finally:
        assert d.stop() == 0
    assert _count_events(d.db, "reload") == 1


def _daemon_on_a_free_metrics_port(workdir: Path, *extra: str, tries: int = 3) -> tuple[DaemonProc, int]:
    """The daemon up with --metrics-port on a port free a moment ago; another process (a parallel test worker) can
    take it between the probe and the daemon's bind: then the daemon exits with its one line, and a new port is tried."""
    for _ in range(tries):
        port = _free_port()
        d = DaemonProc(workdir, *extra, "--metrics-port", str(port))
        try:
            d.wait_socket()
            return d, port
        except RuntimeError:        # (it has exited: reaped, its log closed, whichever way it goes on)
            d.close()
            if f"metrics port {port}:" not in d.log_text():
                raise
    raise RuntimeError(f"no free metrics port in {tries} tries")


def test_a_metrics_port_taken_after_the_probe_is_tried_again(short_tmp, monkeypatch):
    """The race the helper above closes: the first port it is given is held by someone else."""
    import socket
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    ports, probe = iter([busy.getsockname()[1]]), _free_port
    monkeypatch.setattr(sys.modules[__name__], "_free_port", lambda: next(ports, None) or probe())
    try:
        d, port = _daemon_on_a_free_metrics_port(short_tmp, "--concurrency", "2")
        try:
            assert port != busy.getsockname()[1]
        finally:
            assert d.stop() == 0
    finally:
        busy.close()


def test_the_metrics_port_helper_tries_a_taken_port_tries_times_and_nothing_else_again(short_tmp, monkeypatch):
    """Every port taken: `tries` daemons, then its own error; a daemon that fails otherwise: its error, at once."""
    import socket
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    probes, probe = [], _free_port
    try:
        monkeypatch.setattr(sys.modules[__name__], "_free_port", lambda: probes.append(1) or busy.getsockname()[1])
        with pytest.raises(RuntimeError, match="no free metrics port in 3 tries"):
            _daemon_on_a_free_metrics_port(short_tmp, "--concurrency", "2")
        assert len(probes) == 3
    finally:
        busy.close()
    probes.clear()
    monkeypatch.setattr(sys.modules[__name__], "_free_port", lambda: probes.append(1) or probe())
    with pytest.raises(RuntimeError, match="daemon exited"):
        _daemon_on_a_free_metrics_port(short_tmp, "--concurrency", "2", "--profile", "no-such-profile")
    assert len(probes) == 1


def test_a_start_refused_for_a_taken_metrics_port_creates_no_state_directory(short_tmp):
    """With the default paths the preflight made the state directory (the control socket's) first, so a start refused
    for a taken metrics port left an empty ~/.local/state/spec-controller behind (helper-103): bad input changes
    nothing."""
    import os
    import socket
    import subprocess
    root = Path(__file__).parent.parent
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port, xdg = busy.getsockname()[1], short_tmp / "xdg"
    xdg.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY", "SPECCTL_DB")}
    try:
        res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--metrics-port", str(port)],
                             capture_output=True, text=True, timeout=60, cwd=str(root),
                             env=dict(env, PYTHONPATH=str(root), XDG_STATE_HOME=str(xdg)))
    finally:
        busy.close()
    assert res.returncode != 0 and f"metrics port {port}:" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert list(xdg.iterdir()) == []


def test_prometheus_metrics_on_opt_in_port(short_tmp):
    import urllib.request
    d, port = _daemon_on_a_free_metrics_port(short_tmp, "--concurrency", "4")
    try:
        d.wait_for(lambda st: st["samples"]["total"] > 20, what="samples")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("specctl_") and " " in line}
        assert values["specctl_samples_total"] > 20
        assert 0 <= values["specctl_threshold_batch_size"] <= 256
        assert {"specctl_engine_up", "specctl_decisions_total", "specctl_samples_dropped_total",
                "specctl_throughput_tokens_per_second", "specctl_accept_length_tokens"} <= set(values)
        assert values["specctl_engine_up"] == 1.0 and values["specctl_database_write_errors_total"] == 0
        assert values["specctl_healthy"] == 1.0 and values['specctl_samples_rejected_total{reason="step_s"}'] == 0
        served = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE specctl_")}
        listed = set(re.findall(r"^\| `(specctl_\w+)", (ROOT / "docs" / "api.md").read_text(), re.M))
        assert served == listed, (served ^ listed)          # (docs/api.md's table: every metric served, no other)
    finally:
        assert d.stop() == 0


def test_sglang_engine_without_sglang_is_one_clear_line(short_tmp):
    """Exit 2 as config check says (was 1: the unit restarted it every 5 s for ever), refused before the database is
    made (was: a database with a start and an error event, rewritten at every restart)."""
    import importlib.util
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed here")
    from tests.conftest import unheld_port
    (short_tmp / "g.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\n'
                                      f'speculative_algorithm = "EAGLE3"\nport = {unheld_port()}\n')
    res = run_daemon_once(short_tmp, "--config", str(short_tmp / "g.toml"), "--db", str(short_tmp / "x.db"),
                          "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and not (short_tmp / "x.db").exists() and not (short_tmp / "x.db.lock").exists()
    import shlex
    import sys                                  # (the daemon runs on this interpreter: run_daemon_once)

    from controller.daemon.engines.sglang_install import install_source
    assert res.stderr.strip().splitlines() == [
        f"spec-controller: sglang engine: this interpreter ({sys.executable}) has no sglang installed "
        f"({sys.executable} -m pip install {shlex.quote(install_source() + '[sglang]')})"]


def test_a_busy_socket_whose_listener_has_exited_names_no_pid(short_tmp):
    """SO_PEERCRED gives the pid that called listen(): gone when a child kept the socket, so not named."""
    import os
    import subprocess
    import sys

    from controller.daemon.sockprobe import check_socket_free
    path = short_tmp / "kept.sock"
    script = (f"import os, socket, sys, time\ns = socket.socket(socket.AF_UNIX); s.bind({str(path)!r}); s.listen()\n"
              "if os.fork():\n    os._exit(0)\nprint(os.getpid(), flush=True); sys.stdout.close(); time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    kept = int(child.stdout.readline())
    child.wait(timeout=10)
    try:
        with pytest.raises(RuntimeError) as err:
            check_socket_free(path)
        assert str(err.value).startswith(f"control socket {path} is in use by another daemon; "), err.value
    finally:
        os.kill(kept, signal.SIGKILL)
