"""Every specctl command through click's CliRunner, against a real daemon on a real socket."""
import json

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from tests.daemon_proc import DaemonProc


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    import shutil
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp(prefix="sc-cli-", dir="/tmp"))
    proc = DaemonProc(d, "--concurrency", "4", "--profile", "crossover-b")
    proc.wait_socket()
    # samples reach the database in groups (every 0.5 s): the offline tests read them there
    proc.wait_for(lambda st: st["samples"]["total"] > 50 and st["mean_accept_length"] and st["samples"]["written"] > 50,
                  what="spec samples, written")
    yield proc
    assert proc.stop() == 0
    shutil.rmtree(d, ignore_errors=True)


def specctl(daemon, *args):
    return CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(daemon.db), *args])


def test_status_text_and_json(daemon):
    res = specctl(daemon, "status")
    assert res.exit_code == 0 and "threshold:" in res.output and "running" in res.output
    st = json.loads(specctl(daemon, "status", "--json").stdout)
    assert st["daemon"]["running"] and st["engine"]["engine"] == "sim"
    assert {"threshold", "pinned", "policy", "mean_accept_length", "acceptance_rate", "tok_per_s",
            "spec_share", "samples"} <= set(st)
    assert st["mean_accept_length"] > 1.0 and st["tok_per_s"] > 0


def test_policy_list_show_set(daemon):
    rows = json.loads(specctl(daemon, "policy", "list", "--json").stdout)
    assert "ucb" in {r["name"] for r in rows}
    # the module's daemon is shared: a switch to ucb says 'learning from scratch' or 'its saved state restored' after
    # whichever tests ran ucb before. From ucb running, new parameters keep what it learned, in any order (a fresh
    # daemon's 'learning from scratch': tests/test_stop_and_logs.py)
    assert specctl(daemon, "policy", "set", "ucb").exit_code == 0
    res = specctl(daemon, "policy", "set", "ucb", "--param", "c=1.5")
    assert res.exit_code == 0 and res.stdout.strip() == "policy ucb active (c=1.5); what it learned is kept", res.output
    shown = json.loads(specctl(daemon, "policy", "show", "--json").stdout)
    assert shown["name"] == "ucb" and shown["params"]["c"] == 1.5
    assert "ucb" in specctl(daemon, "policy", "show").output
    rows = json.loads(specctl(daemon, "policy", "list", "--json").stdout)
    assert [r["name"] for r in rows if r["active"]] == ["ucb"]
    assert "\nucb [active]: " in "\n" + specctl(daemon, "policy", "list").stdout
    assert specctl(daemon, "policy", "set", "bandit").exit_code == 0
    listed = specctl(daemon, "policy", "list").stdout
    assert "thompson (alias: bandit) [active as bandit]: " in listed and listed.count("[active") == 1, listed


@pytest.mark.parametrize("args,code,needle", [
    (["policy", "set", "nope"], 2, "unknown policy 'nope'"),
    (["policy", "set", "ucb", "--param", "c=-1"], 2, "out of range"),
    # (a pin's range, with a daemon up: its engine's, whatever the value; tests/test_pin_one_range.py)
    (["threshold", "pin", "--", "-3"], 2, "threshold -3 out of range (allowed 0 .. the engine's largest batch, 256)"),
    (["threshold", "pin", "-1"], 2, "threshold -1 out of range (allowed 0 .. the engine's largest batch, 256)"),
    (["threshold", "pin", "abc"], 2, "threshold 'abc' is not an integer"),
    (["threshold", "pin", "99999999"], 2, "threshold 99999999 out of range (allowed 0 .. the engine's largest batch, 256)"),
    (["threshold", "pin", "300"], 2, "out of range (allowed 0 .. the engine's largest batch, 256)"),
    (["history", "--limit", "0"], 2, "--limit 0 out of range (allowed 1 .. 10000)"),
    (["history", "--limit", "-5"], 2, "--limit -5 out of range"),
])
def test_bad_input_changes_nothing(daemon, args, code, needle):
    before = json.loads(specctl(daemon, "policy", "show", "--json").stdout)
    res = specctl(daemon, *args)
    assert res.exit_code == code, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0]
    assert json.loads(specctl(daemon, "policy", "show", "--json").stdout) == before


def test_threshold_alone_shows_statuss_threshold_line(daemon):
    assert specctl(daemon, "threshold", "pin", "4").exit_code == 0      # (pinned: no policy moves it in between)
    try:
        res = specctl(daemon, "threshold")
        line = next(l for l in specctl(daemon, "status").stdout.splitlines() if l.startswith("threshold:"))
        assert res.exit_code == 0 and res.stdout.strip() == line == (
            "threshold:   4 (pinned)   speculate iff batch size <= 4")
    finally:
        assert specctl(daemon, "threshold", "unpin").exit_code == 0


def test_pin_unpin_and_history(daemon):
    assert specctl(daemon, "threshold", "pin", "2").exit_code == 0
    st = json.loads(specctl(daemon, "status", "--json").stdout)
    assert st["threshold"] == 2 and st["pinned"] is True
    same = specctl(daemon, "threshold", "pin", "2")           # pinned there already: says so, changes nothing
    assert same.exit_code == 0 and same.output.strip() == "threshold already pinned at 2; nothing changed"
    assert specctl(daemon, "threshold", "pin", "3").output.strip() == "threshold pinned at 3"
    res = specctl(daemon, "threshold", "unpin")
    assert res.exit_code == 0 and "unpinned" in res.output
    assert json.loads(specctl(daemon, "status", "--json").stdout)["pinned"] is False
    again = specctl(daemon, "threshold", "unpin")            # nothing pinned: says so, changes nothing
    assert again.exit_code == 0 and again.output.startswith("threshold was not pinned (now ")
    assert again.output.rstrip().endswith("policy decides); nothing changed"), again.output
    hist = json.loads(specctl(daemon, "history", "--limit", "50", "--json").stdout)
    assert any(r["new"] == 2 and "pinned" in r["reason"] for r in hist)
    assert "->" in specctl(daemon, "history").output
    # one schema: exploratory a bool, live and from the database, as status's last_decision (newcomer-53: 0 / 1)
    live_status = json.loads(specctl(daemon, "status", "--json").stdout)
    assert type(live_status["last_decision"]["exploratory"]) is bool and {type(r["exploratory"]) for r in hist} == {bool}


def _copy_db(daemon, dest):
    """The live daemon's database, copied: read as a stopped daemon's (nobody holds its lock)."""
    import sqlite3
    src, dst = sqlite3.connect(daemon.db), sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return dest


def test_socket_missing_falls_back_to_database(daemon, tmp_path):
    assert specctl(daemon, "policy", "set", "thompson", "--param", "scale=1.3").exit_code == 0
    assert specctl(daemon, "history").exit_code == 0           # the daemon commits its queued writes first
    db = _copy_db(daemon, tmp_path / "copy.db")
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db), "status", "--json"])
    assert res.exit_code == 3           # nobody holds the copy: not running, the database's last state
    st = json.loads(res.stdout)
    assert st["daemon"]["running"] is False and st["threshold"] is not None
    assert st["clock_speed"] == 20.0 == json.loads(specctl(daemon, "status", "--json").stdout)["clock_speed"]
    text = CliRunner().invoke(cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db), "status"]).stdout
    assert "tok/s (simulated time)" in text        # the rates are the simulator's, running or not (helper-37)
    assert st["policy"]["name"] == "thompson" and float(st["policy"]["params"]["scale"]) == 1.3, st["policy"]
    assert st["tok_per_s"] > 0 and st["spec_share"] is not None and st["figures_age_s"] >= 0


def test_offline_status_has_the_live_schema(daemon, tmp_path):
    live = json.loads(specctl(daemon, "status", "--json").stdout)
    db = _copy_db(daemon, tmp_path / "copy.db")
    offline = json.loads(CliRunner().invoke(cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db),
                                                  "status", "--json"]).stdout)
    assert set(offline) == set(live)
    history = json.loads(CliRunner().invoke(cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db),
                                                  "history", "--json"]).stdout)
    assert history and {type(r["exploratory"]) for r in history} == {bool}
    assert type(offline["last_decision"]["exploratory"]) is bool
    for key in ("daemon", "policy", "samples"):
        assert set(offline[key]) == set(live[key]), key


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["stop"], ["threshold", "pin", "3"]])
def test_a_wrong_socket_beside_a_healthy_daemon_names_its_socket(daemon, tmp_path, command):
    """A mistyped --socket while the daemon holding the database serves its own: one line naming the
    socket it serves, exit 2 (bad argument); not 'engine starting', no advice to kill it, nothing changed."""
    before = json.loads(specctl(daemon, "status", "--json").stdout)
    wrong = tmp_path / "nonexistent.sock"
    res = CliRunner().invoke(cli, ["--socket", str(wrong), "--db", str(daemon.db), *command])
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(f"specctl: daemon pid {daemon.proc.pid} holding {daemon.db} serves its control "
                               f"socket at {daemon.socket}, not at {wrong}; give --socket {daemon.socket}"), lines
    assert "kill" not in res.output and "starting" not in res.output
    after = json.loads(specctl(daemon, "status", "--json").stdout)       # still up, nothing changed
    assert after["daemon"]["running"] and after["daemon"]["pid"] == before["daemon"]["pid"]
    assert after["pinned"] == before["pinned"]


def test_status_while_the_daemon_holds_the_db_but_does_not_serve_yet(daemon, tmp_path):
    """E.g. SGLang still loading: the control socket opens only once the engine is ready."""
    import os

    from tests.daemon_proc import StartingDaemon
    db, sock = _copy_db(daemon, tmp_path / "copy.db"), tmp_path / "not-yet.sock"
    base = ["--socket", str(sock), "--db", str(db)]
    with StartingDaemon(db, sock):
        res = CliRunner().invoke(cli, [*base, "status"])
        assert res.exit_code == 4
        assert f"daemon pid {os.getpid()} holds the database but its control socket is not open (engine starting, or the daemon stopping?)" \
            in res.output
        assert f"daemon:      STARTING, pid {os.getpid()}: control socket not open yet" in res.output
        st = json.loads(CliRunner().invoke(cli, [*base, "status", "--json"]).stdout)
        assert st["daemon"]["running"] is False and st["daemon"]["starting"] is True
        assert st["daemon"]["pid"] == os.getpid()
        pin = CliRunner().invoke(cli, [*base, "threshold", "pin", "3"])
        assert pin.exit_code == 1 and pin.output.strip() == (
            f"specctl: a daemon holds {db} but does not answer on {sock}; nothing changed")
        other = CliRunner().invoke(cli, ["--socket", str(tmp_path / "typo.sock"), "--db", str(db), "status"])
        assert other.exit_code == 2 and other.output.strip() == (
            f"specctl: daemon pid {os.getpid()} holding {db} will serve its control socket at {sock} once its "
            f"engine is ready, not at {tmp_path / 'typo.sock'}; give --socket {sock} (or SPECCTL_SOCKET)")


def test_status_when_the_holder_recorded_no_socket(daemon, tmp_path):
    """A daemon that recorded no socket (an older version, or its start not yet flushed): starting or
    another socket cannot be told apart, and the line says both."""
    import os

    from tests.daemon_proc import StartingDaemon
    db, sock = _copy_db(daemon, tmp_path / "copy.db"), tmp_path / "no.sock"
    with StartingDaemon(db, sock, record=False):
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "status"])
    assert res.exit_code == 4
    assert (f"daemon pid {os.getpid()} holds the database but does not answer on {sock} (engine starting, the "
            "daemon stopping, or is its socket another one? see --socket)") in res.output


def test_socket_permission_denied(daemon):
    """As root, acted out as another user, whom the daemon's 0700 directory keeps from the 0660 socket inside it; as a
    user not root, who can become no one else, kept from its own daemon's socket by the socket's mode taken to 0000
    (connect needs write access to it; root's is never refused)."""
    import os
    if os.geteuid() == 0:
        os.seteuid(65534)
    else:
        os.chmod(daemon.socket, 0)
    try:
        res = specctl(daemon, "status")
    finally:
        if os.geteuid() != os.getuid():
            os.seteuid(0)
        else:
            os.chmod(daemon.socket, 0o660)
    assert res.exit_code == 1
    step = "run as root or a member of its group" if os.getuid() == 0 else \
        f"the socket {daemon.socket} is yours but its mode 0 refuses you: chmod u+rw {daemon.socket}"
    assert res.output.strip().splitlines() == [f"specctl: permission denied on {daemon.socket} ({step})"]


def test_control_socket_is_0660(daemon):
    import os
    import stat
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o660


def test_offline_policy_and_pin_are_saved_for_the_next_start(short_tmp):
    from state.db import open_store
    db, sock = short_tmp / "off.db", short_tmp / "none.sock"
    open_store(db).conn.close()
    base = ["--socket", str(sock), "--db", str(db)]
    res = CliRunner().invoke(cli, [*base, "policy", "set", "ucb", "--param", "c=2"])
    assert res.exit_code == 0 and "policy ucb (c=2" in res.output and "saved" in res.output and "next start" in res.output
    res = CliRunner().invoke(cli, [*base, "threshold", "pin", "3"])
    assert res.exit_code == 0 and "applied at next start" in res.output
    # the flags given last win: the daemon starts on the prepared database and socket
    d = DaemonProc(short_tmp, "--concurrency", "2", "--db", str(db), "--socket", str(sock))
    d.db, d.socket = db, sock
    try:
        d.wait_socket()
        st = d.call("GET", "/status")
        assert st["policy"]["name"] == "ucb" and st["policy"]["params"]["c"] == 2.0
        assert st["threshold"] == 3 and st["pinned"] is True
        refused = CliRunner().invoke(cli, [*base, "threshold", "pin", "65536"])
        d.max_batch = int(refused.output.rstrip().rstrip(")").rsplit(" ", 1)[1])   # 'out of range (allowed 0 .. N)'
    finally:
        assert d.stop() == 0
    res = CliRunner().invoke(cli, [*base, "status"])                 # stopped: the database's last state
    assert res.exit_code == 3 and res.stderr.startswith("specctl: daemon is not running")
    assert f"daemon:      NOT RUNNING (read from {db})" in res.stdout
    assert "threshold:   3 (pinned)" in res.stdout and "policy:      ucb" in res.stdout
    top = d.max_batch                         # (the engine's largest batch, as the running daemon refused above it)
    res = CliRunner().invoke(cli, [*base, "threshold", "pin", str(top + 1)])     # pinned while down, above the engine
    assert res.exit_code == 0 and res.output.strip().endswith(
        f"applied at next start (above the engine's largest batch at its last start, {top}: taken as {top} if it is "
        "so then)"), res.output
    res = CliRunner().invoke(cli, [*base, "threshold", "pin", str(top)])
    assert res.exit_code == 0 and res.output.strip().endswith("applied at next start"), res.output
    assert CliRunner().invoke(cli, [*base, "threshold", "pin", "5"]).exit_code == 0     # pinned while down
    res = CliRunner().invoke(cli, [*base, "threshold"])     # alone: status's threshold line, and its exit code
    assert res.exit_code == 3 and res.stderr.startswith("specctl: daemon is not running")
    assert res.stdout.strip() == "threshold:   5 (pinned, at next start; last run at 3)   speculate iff batch size <= 5"
    res = CliRunner().invoke(cli, [*base, "status"])     # the saved pin, and what the engine last ran
    assert "threshold:   5 (pinned, at next start; last run at 3)" in res.stdout, res.stdout
    res = CliRunner().invoke(cli, [*base, "threshold", "unpin"])
    assert res.exit_code == 0 and "unpin saved" in res.output, res.output
    res = CliRunner().invoke(cli, [*base, "threshold", "unpin"])
    assert res.exit_code == 0 and res.output.strip() == (
        f"daemon is not running: the threshold was not pinned in {db}; nothing changed")
    res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(short_tmp / "none.db"), "threshold", "unpin"])
    assert res.exit_code == 2 and "no database at" in res.stderr and not (short_tmp / "none.db").exists()


def test_an_offline_pin_and_a_daemon_starting_meanwhile_agree(short_tmp):
    """helper-101: specctl checked that no daemon held the database, then wrote; a daemon that started in between
    read its settings before the write. specctl said 'daemon is not running: pin 5 saved, applied at next start'
    (exit 0), the daemon ran unpinned, an unpin given to it changed nothing, and the next start pinned 5. Here the
    write is held up by another connection's lock (as a busy database does) right after specctl's check; the daemon
    stand-in takes the lock and reads the settings as a start does. Now the start waits for the write, and reads it."""
    import fcntl
    import os
    import sqlite3
    import subprocess
    import sys
    import threading

    from state import queries
    from state.db import open_store
    from state.lock import DaemonLock
    from tests.daemon_proc import ROOT
    db = short_tmp / "s.db"
    open_store(db).conn.close()
    ran = DaemonLock(db)
    ran.acquire()                             # (a daemon ran here: its lock file is beside the database)
    ran.release()
    holding = sqlite3.connect(db, isolation_level=None)
    holding.execute("PRAGMA journal_mode=WAL")
    holding.execute("BEGIN IMMEDIATE")        # the write waits (up to 2 s); reads go on
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pin = subprocess.Popen([sys.executable, "-m", "controller.cli", "--db", str(db), "--socket", str(short_tmp / "no"),
                            "threshold", "pin", "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    def opened_db() -> bool:       # specctl has the database open to write: it checked that no daemon holds it
        def writing(fd: str) -> bool:
            try:
                with open(f"/proc/{pin.pid}/fdinfo/{fd}") as info:
                    flags = int(info.read().split("flags:")[1].split()[0], 8)
            except (OSError, IndexError):              # (closed meanwhile)
                return False
            return flags & os.O_ACCMODE == os.O_RDWR
        fds = f"/proc/{pin.pid}/fd"
        try:
            return any(os.path.realpath(f"{fds}/{fd}") == str(db) and writing(fd) for fd in os.listdir(fds))
        except FileNotFoundError:                      # (specctl has exited)
            return False
    while pin.poll() is None and not opened_db():
        threading.Event().wait(0.005)
    assert pin.poll() is None, pin.stdout.read()
    read = []

    def start() -> None:           # a daemon's start: the lock, then its settings
        daemon = DaemonLock(db)
        daemon.acquire()
        store = open_store(db, readonly=True)
        read.append(queries.settings(store).get("pinned"))
        store.conn.close()
        daemon.release()
    starting = threading.Thread(target=start)
    starting.start()
    lock = os.open(f"{db}.lock", os.O_RDONLY)

    def held_shared() -> bool:     # held, by a look or an offline write, not by a daemon
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(lock, fcntl.LOCK_UN)
                return True
            except BlockingIOError:
                return False
    while starting.is_alive() and not held_shared():    # (the old code: the start read its settings here)
        threading.Event().wait(0.005)
    holding.execute("ROLLBACK")
    holding.close()
    out, _ = pin.communicate(timeout=60)
    starting.join(60)
    os.close(lock)
    assert (pin.returncode, out.strip()) == (0, f"daemon is not running: pin 5 saved to {db}, applied at next start")
    assert read == [5]                                   # was [None]: the start had read its settings before the write


def test_status_names_failed_database_writes_only_when_there_are_some():
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 8, "samples": {"total": 5, "per_s": 1.0, "dropped": 0, "write_errors": 0, "write_dropped": 0}}
    assert "database:" not in render_status(st)
    st["samples"]["write_errors"] = 2
    assert "database:    2 failed writes, 0 samples not written" in render_status(st)
    st["daemon"].update(healthy=False, problems=["database disk full: database or disk is full"])
    st["samples"]["rejected"] = {"step_s": 3, "time": 0, "batch_size": 1}
    text = render_status(st)
    assert "UNHEALTHY" in text and "problem:     database disk full: database or disk is full" in text
    assert "4 rejected (step_s 3, batch_size 1)" in text


def test_offline_reads_close_their_connection(short_tmp):
    """Python 3.11's sqlite3 keeps a connection in a reference cycle: one dropped unclosed lived until the
    cyclic GC and held off the next offline write in the same process ('database is locked')."""
    import gc
    import sqlite3
    from state.db import open_store
    db = short_tmp / "r.db"
    open_store(db).conn.close()
    base = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    gc.disable()
    try:
        for args in (["policy", "set", "ucb"], ["policy", "show"], ["threshold", "pin", "3"], ["threshold", "unpin"],
                     ["history"], ["status"]):
            CliRunner().invoke(cli, [*base, *args])
            open_conns = [o for o in gc.get_objects() if isinstance(o, sqlite3.Connection)]
            live = []
            for c in open_conns:
                try:
                    files = [row[2] for row in c.execute("PRAGMA database_list")]
                except sqlite3.ProgrammingError:      # closed
                    continue
                if str(db) in files:                  # other tests' connections are not this one's business
                    live.append(c)
            assert live == [], args
    finally:
        gc.enable()


def test_unpin_says_when_the_policy_opens_with_a_trial():
    """The newcomer read `unpinned (now 105, policy decides)` for a trial that ended 0.3 s later at 40."""
    from controller.cli.steer import _trial_note
    assert _trial_note({"threshold": 105, "exploit_threshold": 40, "trial": True}) == \
        ": a trial; the policy's best so far is 40"
    assert _trial_note({"threshold": 40, "exploit_threshold": 40}) == ""
    assert _trial_note({"threshold": 40}) == ""


def test_status_shows_the_start_reapplying_a_threshold_as_no_change():
    """The newcomer read 'last change: 0 s ago: 40 -> 40, restored at start' after a restart."""
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 40, "samples": {"total": 5, "per_s": 1.0, "dropped": 0},
          "last_decision": {"old": 40, "new": 40, "reason": "restored at start", "wall": None}}
    text = render_status(st)
    assert "last applied: 40, restored at start" in text and "last change" not in text
    st["last_decision"].update(old=29, reason="best threshold 40")
    assert "last change: 29 -> 40, best threshold 40" in render_status(st)


def test_status_says_a_threshold_is_a_trial_and_names_the_policys_best_unless_pinned():
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 48, "exploit_threshold": 32, "trial": True, "samples": {"total": 5, "per_s": 1.0, "dropped": 0}}
    line = [x for x in render_status(st).splitlines() if x.startswith("threshold:")]
    assert line == ["threshold:   48 (a trial; the policy's best so far is 32)   speculate iff batch size <= 48"]
    # not a trial: the guard holds the way to the best (its rate cap, or no live batch size between: coalesced).
    # The newcomer read "26 (a trial; the policy's best so far is 12)" for a fixed threshold the guard held
    st["trial"] = False
    assert "threshold:   48 (held by the guard; the policy's best is 32)" in render_status(st)
    st["trial"] = None                      # not known (daemon down): no claim either way
    assert "threshold:   48 (the policy's best so far is 32)" in render_status(st)
    st["trial"] = True
    st["exploit_threshold"] = 48
    assert "trial" not in render_status(st)
    st.update(exploit_threshold=32, pinned=True)
    assert "threshold:   48 (pinned)" in render_status(st) and "trial" not in render_status(st)


@pytest.mark.parametrize("command", [["status", "--json"], ["history", "--json"], ["policy", "show"],
                                     ["threshold", "unpin"]])
def test_socket_and_db_after_the_command_reach_the_daemon_as_before_it(daemon, tmp_path, command, monkeypatch):
    # a newcomer's `specctl status --socket PATH` was refused ("No such option"); it overrides SPECCTL_SOCKET (one
    # typed before the command too must agree with it: helper-183)
    monkeypatch.setenv("SPECCTL_SOCKET", str(tmp_path / "wrong.sock"))
    after = CliRunner().invoke(cli, [*command, "--socket", str(daemon.socket), "--db", str(daemon.db)])
    assert after.exit_code == 0, after.output
    if command[0] == "status":
        assert json.loads(after.stdout)["daemon"]["pid"] == daemon.proc.pid


def _down(daemon, tmp_path) -> list[str]:
    """specctl's options for the daemon's database with the daemon down: a copy (SQLite's backup, its WAL in it) that no
    daemon holds. (A --socket where it does not answer is a mistyped one, refused as status refuses it: helper-180.)"""
    return ["--socket", str(tmp_path / "none.sock"), "--db", str(_copy_db(daemon, tmp_path / "down.db"))]


def test_policy_show_with_the_daemon_down_lists_the_parameters_as_the_daemon_does(daemon, tmp_path):
    # the module's daemon is shared: set the policy this test reads (another test may have left ucb running)
    assert specctl(daemon, "policy", "set", "thompson", "--param", "scale=2").exit_code == 0
    running = json.loads(specctl(daemon, "policy", "show", "--json").stdout)
    base = _down(daemon, tmp_path)
    offline = json.loads(CliRunner().invoke(cli, [*base, "policy", "show", "--json"]).stdout)
    assert offline["params"] == running["params"] and offline["params"]["scale"] == 2


def test_policy_show_names_what_an_alias_stands_for_running_and_offline(daemon, tmp_path):
    assert specctl(daemon, "policy", "set", "bandit").exit_code == 0
    assert specctl(daemon, "policy", "show").output.splitlines()[0] == "bandit (= thompson)"
    base = _down(daemon, tmp_path)
    assert CliRunner().invoke(cli, [*base, "policy", "show"]).stdout.splitlines()[0] == "bandit (= thompson)"
    assert specctl(daemon, "policy", "set", "ucb").exit_code == 0
    assert specctl(daemon, "policy", "show").output.splitlines()[0] == "ucb"


def test_policy_show_on_a_socket_the_daemon_holding_the_database_does_not_serve_is_refused_as_status_is(daemon):
    """helper-179's policy show said 'daemon is not running (no daemon socket at S.none)' of the daemon serving that
    database on S, and listed the saved policy, exit 0; status refuses the mistyped --socket, naming S (exit 2)."""
    base = ["--socket", str(daemon.socket) + ".none", "--db", str(daemon.db)]
    shown, status = (CliRunner().invoke(cli, [*base, *words]) for words in (["policy", "show"], ["status"]))
    assert (shown.exit_code, shown.stdout, shown.stderr) == (2, "", status.stderr), shown.output
    assert f"serves its control socket at {daemon.socket}, not at {daemon.socket}.none" in status.stderr, status.stderr


def test_status_says_which_time_its_figures_cover():
    """A newcomer read the figures (the last 30 engine seconds: 3 s at clock x10) against the load line (the phase
    now) and the sample rate (per real second) as one moment: each says its time."""
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 30, "healthy": True},
          "engine": {"engine": "sim", "profile": "crossover-b", "load": "C=32 accept 2.0", "state": "running"},
          "threshold": 29, "tok_per_s": 3542.0, "spec_share": 0.01, "window_s": 30.0, "clock_speed": 10,
          "mean_accept_length": 2.06, "acceptance_rate": 0.266,
          "samples": {"total": 7702, "per_s": 740.8, "dropped": 0}}
    lines = render_status(st).splitlines()
    assert any("load now C=32 accept 2.0" in line for line in lines if line.startswith("engine:")), lines
    assert "acceptance:  mean accept length 2.06, rate 26.6%, in the last 30 simulated s" in lines
    assert "throughput:  3,542 tok/s (simulated time), speculating 1% of batches, in the last 30 simulated s" in lines
    assert "samples:     740.8/s real time, 7,702 this run, 0 dropped" in lines     # (down: '... stored', all runs)
    st["clock_speed"] = 1                      # an engine on a GPU: one clock
    lines = render_status(st).splitlines()
    assert "throughput:  3,542 tok/s, speculating 1% of batches, in the last 30 s" in lines
    assert "samples:     740.8/s, 7,702 this run, 0 dropped" in lines
    # every count of the line is grouped as the total is (helper-150: '143,360 this run, 14443 dropped' at --speed 1000)
    st["samples"].update(dropped=14443, rejected={"time": 12345, "steps": 0}, write_errors=1200, write_dropped=56789)
    lines = render_status(st).splitlines()
    assert "samples:     740.8/s, 7,702 this run, 14,443 dropped, 12,345 rejected (time 12,345)" in lines
    assert any(line.startswith("database:    1,200 failed writes, 56,789 samples not written") for line in lines), lines


def test_status_read_from_the_database_names_no_live_window(daemon, tmp_path):
    """The throughput line's 'in the last N (simulated) s' is the running daemon's window; the figures status reads
    from the database (daemon down) say their age instead, not a window the daemon is no longer measuring."""
    def throughput(text):
        return [line for line in text.splitlines() if line.startswith("throughput:")]
    live = throughput(specctl(daemon, "status").stdout)
    assert len(live) == 1 and " of batches, in the last 30 simulated s" in live[0], live
    db = _copy_db(daemon, tmp_path / "copy.db")
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db), "status"])
    assert res.exit_code == 3 and json.loads(CliRunner().invoke(
        cli, ["--socket", str(tmp_path / "no.sock"), "--db", str(db), "status", "--json"]).stdout)["window_s"]
    offline = throughput(res.stdout)
    assert len(offline) == 1 and "tok/s (simulated time)" in offline[0] and "in the last" not in offline[0], offline


def test_a_db_the_daemon_on_the_socket_does_not_keep_is_never_steered_there(daemon, short_tmp, monkeypatch):
    """`--db B` with the daemon on the socket keeping A: a change is refused (it was applied to A's daemon), a read
    takes B's word, and the daemon holding B on another socket is the one asked when no --socket was given."""
    from state.db import open_store
    other = short_tmp / "other.db"
    open_store(other).conn.close()
    before = json.loads(specctl(daemon, "policy", "show", "--json").stdout)
    runner = CliRunner()
    for change in (["policy", "set", "never"], ["threshold", "pin", "5"], ["stop"]):
        res = runner.invoke(cli, ["--socket", str(daemon.socket), "--db", str(other), *change])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == (f"specctl: the daemon on {daemon.socket} keeps {daemon.db}, not {other} (--db / "
                                      f"SPECCTL_DB), and no daemon holds it: leave --db out to steer the one on "
                                      f"{daemon.socket}; nothing changed")
    st = daemon.call("GET", "/status")
    assert st["policy"]["name"] == before["name"] and not st["pinned"] and st["daemon"]["running"]
    res = runner.invoke(cli, ["--socket", str(daemon.socket), "--db", str(other), "status"])
    assert res.exit_code == 3 and f"NOT RUNNING (read from {other})" in res.stdout, res.output
    # a second daemon holds B on its own socket: asked there, unless --socket names the first
    (short_tmp / "b").mkdir()
    second = DaemonProc(short_tmp / "b", "--concurrency", "2")
    try:
        second.wait_socket()
        for default in (daemon.socket, short_tmp / "nobody.sock"):     # another daemon's socket, or none there
            monkeypatch.setattr("controller.cli.common.find_socket", lambda: default)
            res = runner.invoke(cli, ["--db", str(second.db), "status", "--json"])
            assert res.exit_code == 0 and json.loads(res.stdout)["daemon"]["pid"] == second.proc.pid, res.output
        res = runner.invoke(cli, ["--socket", str(daemon.socket), "--db", str(second.db), "threshold", "pin", "4"])
        assert res.exit_code == 2 and f"give --socket {second.socket}" in res.stderr, res.output
        assert not second.call("GET", "/status")["pinned"] and not daemon.call("GET", "/status")["pinned"]
    finally:
        assert second.stop() == 0


def test_a_db_spelled_another_way_is_the_daemons_own(daemon, monkeypatch):
    """Relative to where specctl runs, or through a link: the daemon holding it is the one asked (its lock's pid)."""
    monkeypatch.chdir(daemon.db.parent)
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", daemon.db.name, "status", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["daemon"]["pid"] == daemon.proc.pid, res.output


def test_a_daemon_given_a_relative_db_reports_it_absolute_and_is_not_steered_through_another(short_tmp):
    """A relative --db is the daemon's working directory's: reported as given, specctl could not compare it."""
    d = DaemonProc(short_tmp, "--concurrency", "2", "--db", "rel.db", cwd=short_tmp)     # (the last --db wins)
    try:
        d.wait_socket()
        assert d.call("GET", "/status")["daemon"]["db"] == str(short_tmp / "rel.db")
        res = CliRunner().invoke(cli, ["--socket", str(d.socket), "--db", str(short_tmp / "other.db"),
                                       "policy", "set", "never"])
        assert res.exit_code == 2 and "keeps " + str(short_tmp / "rel.db") in res.stderr, res.output
        assert d.call("GET", "/policy")["name"] != "never"
    finally:
        assert d.stop() == 0


def test_policy_list_marks_the_saved_policy_with_the_daemon_down(short_tmp):
    base = ["--socket", str(short_tmp / "none.sock")]
    res = CliRunner().invoke(cli, [*base, "--db", str(short_tmp / "none.db"), "policy", "list"])
    assert res.exit_code == 2, res.output                           # (a --db naming no database)
    res = CliRunner(env={"SPECCTL_DB": None}).invoke(cli, [*base, "policy", "list", "--json"])
    assert res.exit_code == 0 and not any(r["active"] for r in json.loads(res.stdout)), res.output
    from state.db import open_store
    open_store(short_tmp / "state.db").conn.close()
    base += ["--db", str(short_tmp / "state.db")]
    assert CliRunner().invoke(cli, [*base, "policy", "set", "ucb"]).exit_code == 0
    rows = json.loads(CliRunner().invoke(cli, [*base, "policy", "list", "--json"]).stdout)
    assert [r["name"] for r in rows if r["active"]] == ["ucb"]


def test_stops_timeout_out_of_range_names_the_flag():
    """Every option's range error names it as typed (`--limit`, `--timeout` said `limit 0`, `timeout 0`; helper-98)."""
    res = CliRunner().invoke(cli, ["stop", "--timeout", "0"])
    assert res.exit_code == 2 and "--timeout 0 out of range (allowed 1 .. 3600)" in res.output, res.output


def test_status_reads_threshold_zero_as_never_speculate():
    """helper-113: 'speculate iff batch size <= 0' for a pin at 0, the one value that means never."""
    from controller.cli.status import threshold_line
    st = {"daemon": {"running": True}, "threshold": 0, "pinned": True}
    assert threshold_line(st) == "threshold:   0 (pinned)   never speculate"
    assert threshold_line({**st, "threshold": 1}) == "threshold:   1 (pinned)   speculate iff batch size <= 1"


def test_status_reads_a_threshold_at_the_engines_largest_batch_as_always():
    """helper-139: `always` (and a pin at the engine's largest batch) read 'speculate iff batch size <= 256'."""
    from controller.cli.status import threshold_line
    st = {"daemon": {"running": True}, "threshold": 256, "pinned": True, "engine": {"max_batch_size": 256}}
    assert threshold_line(st) == "threshold:   256 (pinned)   always speculate (every batch: the engine's largest is 256)"
    assert threshold_line({**st, "threshold": 255}).endswith("speculate iff batch size <= 255")
    assert threshold_line({**st, "engine": None}).endswith("speculate iff batch size <= 256")    # (offline: not known)


def test_an_offline_unpin_where_there_is_no_database_says_so_and_creates_none(short_tmp, monkeypatch):
    """helper-128: it said 'the threshold was not pinned in D' of a database D that is not there (exit 0, nothing
    made): now that there is none."""
    from controller.paths import default_socket, find_db
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp))
    for name in ("SPECCTL_SOCKET", "SPECCTL_DB", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    db = find_db()                                  # (the user's: conftest hides a service installed on this host)
    # the default database's own socket (under short_tmp: no daemon there); another socket is refused, its database not
    # being this one (tests/test_mutation_today_p.py)
    res = CliRunner().invoke(cli, ["--socket", str(default_socket()), "threshold", "unpin"])
    assert res.exit_code == 0 and res.output == (
        f"daemon is not running and there is no database at {db}: nothing is pinned; nothing changed\n"), res.output
    assert not db.exists() and not (short_tmp / "spec-controller").exists()
