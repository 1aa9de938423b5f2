"""`specctl stop` through the control API against a real subprocess daemon, and the daemon's log:
start, stop and reload each one line, no skipped retunes, repeated errors rate-limited."""
import logging
import signal
import sqlite3
import threading
import time

from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.logs import RepeatFilter
from controller.daemon.ticker import Ticker
from state.lock import DaemonLock
from tests.daemon_proc import DaemonProc


def specctl(d, *args):
    return CliRunner().invoke(cli, ["--socket", str(d.socket), "--db", str(d.db), *args])


def _events(db) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT kind, detail FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


def test_specctl_stop_drains_and_waits_for_the_exit(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "4", speed=40)
    try:
        d.wait_socket()
        # the arrival rate needs two ingest passes (one every 50 ms): wait for it, not only for samples
        live = d.wait_for(lambda st: st["samples"]["total"] > 200 and st["samples"]["per_s"], what="samples")
        assert live["samples"]["per_s"] > 0
        assert specctl(d, "threshold", "pin", "5").exit_code == 0
        from controller.paths import pid_namespace        # (the daemon's lock says where its pid names it)
        assert DaemonLock(d.db).holder_namespace() == pid_namespace()
        res = specctl(d, "policy", "set", "ucb")
        assert res.exit_code == 0 and res.stdout.strip() == "policy ucb active (default parameters); learning from scratch"
        assert res.stderr.strip() == ("specctl: note: the threshold is pinned at 5; ucb learns from every batch "
                                      "but decides nothing until `specctl threshold unpin`")
        assert specctl(d, "threshold", "unpin").exit_code == 0
        res = specctl(d, "policy", "set", "bandit")
        assert res.stderr == "" and res.stdout.strip() == ("policy bandit active (default parameters); its saved state "
                                                           "restored (as it was at its last switch away; the threshold "
                                                           "moves from where it is at the guard's pace)")
        res = specctl(d, "policy", "set", "bandit", "--param", "scale=2")
        assert res.stdout.strip() == "policy bandit active (scale=2); what it learned is kept"
        res = specctl(d, "stop")
        assert res.exit_code == 0, res.output
        assert res.output.strip() == f"daemon pid {d.proc.pid} stopped"
        # specctl returned once the lock was free and the process had exited (a zombie until reaped here)
        assert d.proc.poll() == 0
        assert DaemonLock(d.db).holder() is None and not d.socket.exists()
        assert d.proc.wait(10) == 0
    finally:
        d.close()
    log = d.log_text(tail=10**6)
    assert log.count("spec-controller ready") == 1
    assert log.count("spec-controller stopped (specctl stop)") == 1
    assert "maximum number of running instances" not in log
    assert _events(d.db)[-1] == ("stop", "specctl stop: exit 0")
    # the stopped daemon's database: status says so (exit 3) with the live schema, and plots
    offline = specctl(d, "status")
    assert offline.exit_code == 3 and "NOT RUNNING" in offline.stdout and "None" not in offline.stdout
    res = specctl(d, "plot", str(short_tmp / "live.png"))
    assert res.exit_code == 0 and (short_tmp / "live.png").read_bytes()[:4] == b"\x89PNG", res.output


def test_stop_waits_for_the_process_to_exit_not_only_for_the_lock(short_tmp):
    """The daemon lets go of its lock, then logs and exits: 'stopped' is said once the pid is gone."""
    import subprocess
    import sys

    from controller.cli.stop import exited, wait_gone
    db = short_tmp / "x.db"
    code = ("import sys, time; from state.lock import DaemonLock; l = DaemonLock(sys.argv[1]); l.acquire(); "
            "print('locked', flush=True); sys.stdin.readline(); l.release(); time.sleep(0.6)")
    from tests.daemon_proc import ROOT
    child = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             cwd=str(ROOT), text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        assert not exited(child.pid) and not wait_gone(db, child.pid, timeout=0.3)     # still holding
        child.stdin.write("go\n")
        child.stdin.flush()
        began = time.monotonic()
        assert wait_gone(db, child.pid, timeout=10)
        assert time.monotonic() - began >= 0.5 and exited(child.pid)      # a zombie until reaped: exited
        assert child.poll() == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sigterm_and_sighup_are_logged_once_each(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "configuration reloaded" not in d.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        assert d.stop() == 0
    log = d.log_text(tail=10**6)
    assert log.count("configuration reloaded (SIGHUP)") == 1
    assert log.count("spec-controller stopped (SIGTERM)") == 1 and log.count("stopped") == 1


def test_stop_without_a_daemon_is_one_line_and_exit_3(short_tmp):
    from state.db import open_store
    open_store(short_tmp / "state.db").conn.close()       # (a --db naming none is a usage error: exit 2)
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "no.sock"), "--db", str(short_tmp / "state.db"), "stop"])
    assert res.exit_code == 3
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specctl: daemon is not running"), res.output


def test_stop_while_the_engine_is_starting_names_the_pid_and_exit_4(short_tmp):
    import os

    from tests.daemon_proc import StartingDaemon
    db, sock = short_tmp / "state.db", short_tmp / "no.sock"
    with StartingDaemon(db, sock):        # what a daemon loading SGLang holds: the lock, no socket yet
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop"])
        typo = CliRunner().invoke(cli, ["--socket", str(short_tmp / "typo.sock"), "--db", str(db), "stop"])
    assert res.exit_code == 4
    assert res.output.strip().splitlines() == [
        f"specctl: daemon pid {os.getpid()} holds {db} but its control socket is not open yet "
        f"(engine starting?); stop it with: kill -TERM {os.getpid()}"]
    assert typo.exit_code == 2 and "kill" not in typo.output, typo.output      # a wrong path: no advice to kill
    assert f"will serve its control socket at {sock} once its engine is ready" in typo.output


def test_stop_when_the_holder_recorded_no_socket_says_both_cases(short_tmp):
    import os

    from tests.daemon_proc import StartingDaemon
    db, sock = short_tmp / "state.db", short_tmp / "no.sock"
    with StartingDaemon(db, sock, record=False):
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop"])
    assert res.exit_code == 4
    assert res.output.strip().splitlines() == [
        f"specctl: daemon pid {os.getpid()} holds {db} but does not answer on {sock}: if that is its socket, its "
        f"engine is still starting (kill -TERM {os.getpid()} stops it); if not, give its --socket"]


def test_a_wrong_socket_never_advises_killing_a_healthy_daemon(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        wrong = short_tmp / "nonexistent.sock"
        res = CliRunner().invoke(cli, ["--socket", str(wrong), "--db", str(d.db), "stop"])
        assert res.exit_code == 2 and res.output.strip() == (
            f"specctl: daemon pid {d.proc.pid} holding {d.db} serves its control socket at {d.socket}, not at "
            f"{wrong}; give --socket {d.socket} (or SPECCTL_SOCKET)")
        assert d.proc.poll() is None and d.call("GET", "/status")["daemon"]["running"]
    finally:
        assert d.stop() == 0


def test_nothing_in_the_repository_kills_by_process_name():
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    names = ("p" + "kill", "kill" + "all")           # spelled apart: this file does not count itself
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, text=True)
    if listed.returncode == 0:        # the project's files (not caches, wheels or virtualenvs it ignores)
        paths = [root / line for line in listed.stdout.splitlines()]
    else:
        paths = [p for p in root.rglob("*") if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    offenders = []
    for path in paths:
        # (a symbolic link is its target's name, not a file of the project: an untracked venv's bin/python pointing
        # into a 0700 /root was followed, and stat's PermissionError failed this test for a user not root)
        if path.is_symlink() or not path.is_file() or "egg-info" in str(path) or \
                path.suffix in (".png", ".pyc", ".db", ".whl", ".xz"):
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(root)}: {n}" for n in names if n in text]
    assert not offenders


def _record(msg: str, *args, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("spec_controller", level, __file__, 1, msg, args, None)


def test_repeated_errors_pass_once_per_interval_and_say_how_many_were_held():
    now = [0.0]
    f = RepeatFilter(interval_s=60, clock=lambda: now[0])
    assert f.filter(_record("could not apply threshold %d: %s", 5, "gone"))
    passed = [f.filter(_record("could not apply threshold %d: %s", i, "gone")) for i in range(100)]
    assert not any(passed)
    assert f.filter(_record("another message"))                     # a different message is not held
    assert f.filter(_record("info %s", "x", level=logging.INFO))     # nor anything below WARNING
    now[0] = 61.0
    rec = _record("could not apply threshold %d: %s", 7, "gone")
    assert f.filter(rec)
    assert rec.getMessage() == "could not apply threshold 7: gone (repeated 100 more times in the last 61 s)"


def test_one_format_with_different_text_arguments_is_not_held_back():
    """helper-94: the key was the format string alone, so a second job's "%s failed (%s: %s)" within the minute of the
    first's, or any log.warning("%s", x) after another, never reached the log."""
    f = RepeatFilter(interval_s=60, clock=lambda: 0.0)
    job = "%s failed (%s: %s); carrying on"
    assert f.filter(_record(job, "rollup", "OperationalError", OSError("disk I/O error")))
    assert f.filter(_record(job, "retention", "OperationalError", OSError("disk I/O error")))
    assert not f.filter(_record(job, "rollup", "OperationalError", OSError("disk I/O error 2")))   # the same job: held
    assert f.filter(_record("%s", "[policy] bandit in the config is not used")) and f.filter(_record("%s", "other"))
    assert not f.filter(_record("%s", "other"))
    assert f.filter(_record("x %s", "a" * 300)) and not f.filter(_record("x %s", "a" * 200 + "b" * 100))


def test_a_slow_job_delays_the_next_run_and_never_overlaps():
    running, most, calls = [0], [0], [0]
    first_started, release = threading.Event(), threading.Event()
    lock = threading.Lock()

    def job():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            calls[0] += 1
        if calls[0] == 1:
            first_started.set()
            release.wait(10)       # a retune stuck on the service lock, 100s of intervals long
        with lock:
            running[0] -= 1

    ticker = Ticker("job", 0.001, job).start()
    assert first_started.wait(10)
    time.sleep(0.2)
    stuck_calls = calls[0]
    release.set()
    while calls[0] < 5:
        time.sleep(0.01)
    ticker.stop()
    assert stuck_calls == 1 and most[0] == 1
