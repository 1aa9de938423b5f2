"""helper-114's adversarial review of the boundaries: what it found, each test red before its fix."""
import logging
import math
import socket
import sqlite3
import subprocess
import threading

import pytest

from controller.daemon import clients
from state.db import StoreError, open_store
from tests.test_daemon_e2e import run_daemon_once
from tests.test_faults_cli import _one_line, specctl


def _sqlite_file(path, version: int, tables=("accounts",)):
    conn = sqlite3.connect(path)
    for table in tables:
        conn.execute(f"CREATE TABLE {table} (x)")
    conn.execute(f"PRAGMA user_version={version}")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("version", [-1, 1])
@pytest.mark.parametrize("readonly", [False, True])
def test_an_sqlite_file_of_another_application_at_any_schema_version_is_refused_and_left_alone(short_tmp, version,
                                                                                              readonly):
    """user_version 0 with tables was refused as another application's file; at 1 (this schema's number, which other
    applications use too) every query was a traceback (no such table: decisions); at -1 the migration ran from step
    -1, so the daemon added its tables to the file before failing on 'table "samples" already exists'."""
    db = short_tmp / "other.db"
    before = _sqlite_file(db, version)
    with pytest.raises(StoreError, match="is not a spec-controller database"):
        open_store(db, readonly=readonly)
    assert db.read_bytes() == before


def test_a_database_of_ours_missing_a_table_is_named(short_tmp):
    db = short_tmp / "d.db"
    open_store(db).conn.close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE decisions")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 1 without its table decisions; refusing it"):
        open_store(db)


@pytest.mark.parametrize("command", [["status"], ["history"], ["threshold", "pin", "3"]])
def test_specctl_on_another_applications_file_at_user_version_1_is_one_line(short_tmp, command):
    db = short_tmp / "v1.db"
    before = _sqlite_file(db, 1)
    _one_line(specctl(short_tmp, db, *command), f"specctl: {db} is not a spec-controller database")
    assert db.read_bytes() == before


@pytest.mark.parametrize("version", [-1, 1])
def test_the_daemon_refuses_another_applications_file_in_one_line_and_leaves_it(short_tmp, version):
    """Exit 2, a config error (helper-168; exit 1 before): no restart changes the file, and the unit restarted exit 1
    every 5 s for good, while config check said ok; the unit does not restart on 2 (RestartPreventExitStatus)."""
    db = short_tmp / "x.db"
    before = _sqlite_file(db, version)
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(db), "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"spec-controller: {db} is not a spec-controller database") and db.read_bytes() == before and not (short_tmp / "x.db.lock").exists()


# --- the metrics port: bounded as the control API is ------------------------------------------------------------------
class _Service:
    def status(self) -> dict:
        return {"threshold": 5, "pinned": False, "mean_accept_length": None, "tok_per_s": None, "spec_share": None,
                "engine": {"ok": True}, "daemon": {"healthy": True, "problems": []}, "decisions": 0, "job_errors": {},
                "samples": {"total": 0, "dropped": 0, "ingest_errors": 0, "write_errors": 0, "rejected": {}}}


@pytest.fixture
def metrics_server(monkeypatch):
    """start_metrics on a port of the kernel's choosing, with room for two clients at once; (port, set the read
    timeout)."""
    from controller.daemon import metrics
    monkeypatch.setattr(metrics, "METRICS_CLIENTS", 2, raising=False)
    monkeypatch.setattr(metrics, "READ_TIMEOUT_S", 30.0, raising=False)
    httpd = metrics.start_metrics(_Service(), 0)
    yield httpd.server_address[1], lambda s: monkeypatch.setattr(metrics, "READ_TIMEOUT_S", s, raising=False)
    httpd.stop()


def _scrape(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        return _until_closed(s)


def _until_closed(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_clients_beyond_the_metrics_cap_get_a_503_at_once_and_the_slots_come_back(metrics_server, monkeypatch):
    """prometheus_client's server started a thread per connection, without limit: a local user's thousands of idle
    connections held as many threads and descriptors in the daemon (3000 held 3000 threads, 137 MB)."""
    port, _ = metrics_server
    monkeypatch.setattr(clients, "CUT_AFTER_S", math.inf)     # (the idle ones keep their slots however slow the test)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    assert _scrape(port).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    for s in idle:
        s.close()
    for _ in range(200):            # (the server's threads see the hang-ups in their own time)
        if (got := _scrape(port)).split(b"\r\n", 1)[0].endswith(b" 200 OK"):
            break
        threading.Event().wait(0.05)
    assert b"specctl_threshold_batch_size 5.0" in got


def test_a_metrics_client_that_sends_nothing_is_dropped_without_a_traceback(metrics_server, capsys, caplog):
    """It kept its thread for as long as it stayed connected (no timeout at all)."""
    port, read_timeout = metrics_server
    read_timeout(0.2)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"GET /metr")
        assert _until_closed(s) == b""              # (was: a TimeoutError here, the daemon still holding it)
    assert "Traceback" not in capsys.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- a stop whose final writes fail says so ---------------------------------------------------------------------------
class _Stops:
    """The server, scheduler, retune ticker and lock as _drain meets them: each stops at once."""
    def stop(self, *args, **kwargs) -> None:
        pass
    shutdown = release = stop


def drained(svc, stop_reason: str = "SIGTERM", exit_code: int = 0):
    """The daemon's drain of svc, its other parts (server, scheduler, retune ticker, lock) stopping at once."""
    from controller.daemon.lifecycle import Daemon
    ingest = threading.Thread(target=lambda: None)
    ingest.start()
    daemon = Daemon(svc.cfg)
    daemon.stop_reason, daemon.exit_code = stop_reason, exit_code
    daemon._drain(svc.engine, svc, (_Stops(), _Stops(), ingest, _Stops()), svc.writer.db, _Stops())
    return daemon


def _drain_with(short_tmp, caplog, commit_error: Exception | None, exit_code: int = 0) -> str:
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)                                 # (the start's settings written)
    if commit_error is not None:
        writer._commit = lambda items: commit_error          # every write from here on rolled back
    with caplog.at_level(logging.INFO, "spec_controller"):
        daemon = drained(svc, "specctl stop", exit_code)
    lines = [r for r in caplog.records if "spec-controller stopped" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].getMessage().endswith(f"; exit {daemon.exit_code}")      # (the code it exits with)
    return f"{lines[0].levelname} {lines[0].getMessage()}"


def test_a_stop_whose_final_checkpoint_the_full_disk_refused_does_not_say_flushed(short_tmp, caplog):
    """On a full disk the daemon logged 'drained and flushed in 0.5 s; exit 0' while its final checkpoint (what the
    policy learned since the last one) and the stop event were rolled back; the writer's own error line was held back
    (one a minute), so nothing in the log said so."""
    line = _drain_with(short_tmp, caplog, sqlite3.OperationalError("database or disk is full"))
    assert line.startswith("ERROR spec-controller stopped (specctl stop): drained and not flushed: 3 final writes "
                           "lost (database disk full: database or disk is full)"), line
    # (helper-147: it exited 0, which told the unit nothing; 1 would restart a daemon the operator stopped)
    assert line.endswith("; exit 5"), line


def test_a_failed_daemons_lost_final_writes_keep_its_exit_1(short_tmp, caplog):
    """(a stalled loop or a gone engine exits 1 and is restarted: a loss on top changes nothing of that)"""
    line = _drain_with(short_tmp, caplog, sqlite3.OperationalError("database or disk is full"), exit_code=1)
    assert "not flushed" in line and line.endswith("; exit 1"), line


def test_a_stop_whose_writes_all_committed_says_flushed(short_tmp, caplog):
    line = _drain_with(short_tmp, caplog, None)
    assert line.startswith("INFO spec-controller stopped (specctl stop): drained and flushed in "), line
    assert line.endswith("; exit 0"), line


# --- a journal path that holds no file ----------------------------------------------------------------------------------
def _opened(db, side, readonly: bool):
    """open_store's StoreError (None: it opened), from a thread: the old code's open() of a FIFO at -journal waited
    for a writer for ever, which this releases before it fails the test."""
    import os
    got = {}

    def run():
        try:
            open_store(db, readonly=readonly).conn.close()
            got["error"] = None
        except StoreError as e:
            got["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():
        os.close(os.open(side, os.O_WRONLY | os.O_NONBLOCK))
        t.join(60)
        pytest.fail(f"opening {db} waited on the FIFO {side}")
    return got["error"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_journal_path_that_is_a_directory_or_a_fifo_is_refused_by_name(short_tmp, suffix, kind, readonly):
    """A directory at -wal read 'cannot be read by this user (unable to open database file) ... run as the service's
    user' to root; a FIFO at -wal let the daemon start, then every write failed (disk I/O error); a FIFO at -journal
    held specctl status, and the daemon's start (SIGTERM too), for ever: SQLite's open() of it waits for a writer."""
    import os
    db = short_tmp / "d.db"
    open_store(db).conn.close()
    side = short_tmp / f"d.db{suffix}"
    os.mkdir(side) if kind == "directory" else os.mkfifo(side)
    before = db.read_bytes()
    error = _opened(db, side, readonly)
    assert f"database journal {side} is not a regular file; remove it" in str(error)
    assert db.read_bytes() == before


@pytest.mark.parametrize("suffix", ["-wal", "-journal"])
def test_the_daemon_refuses_a_fifo_at_a_journal_path_in_one_line(short_tmp, suffix):
    import os
    db = short_tmp / "d.db"
    open_store(db).conn.close()
    os.mkfifo(short_tmp / f"d.db{suffix}")
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(db), "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [       # (helper-172: 1, restarted for good)
        f"spec-controller: database journal {db}{suffix} is not a regular file; remove it (SQLite keeps the "
        "database's journal there)"], res.stderr


# --- an event whose text UTF-8 cannot hold --------------------------------------------------------------------------------
def test_an_event_naming_a_path_with_an_undecodable_byte_is_written_not_lost(short_tmp):
    """`spec-controller run --socket $'/tmp/u\\xff.sock'`: Python reads the byte as '\\udcff', which SQLite's UTF-8
    refused: the start event was rolled back ('a events write failed'), a lost write in status."""
    from state.writer import Writer
    db = open_store(short_tmp / "e.db")
    writer = Writer(db).start()
    writer.event("start", "socket=/tmp/u\udcff.sock")
    assert writer.flush(10)
    writer.stop()
    assert writer.errors == 0
    assert db.execute("SELECT detail FROM events").fetchall() == [("socket=/tmp/u\\udcff.sock",)]


# --- --set: each key once -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "check"])
@pytest.mark.parametrize("sets, said", [
    (["policy.params=3", "policy.params.scale=2"], "--set 'policy.params.scale=2': policy.params.scale is set by "
                                                   "--set 'policy.params=3' already"),
    (["policy.params.scale=2", "policy.params={half_life_s=30}"], "--set 'policy.params={half_life_s=30}': "
                                                                 "policy.params is set by --set 'policy.params.scale=2'"),
    (["guard.min_threshold=3", "guard.min_threshold=4"], "guard.min_threshold is set by --set 'guard.min_threshold=3'")])
def test_a_key_given_twice_by_set_is_one_line(short_tmp, command, sets, said):
    """A table set whole and then by its key was a TypeError traceback out of `run` and `config check`; by its key and
    then whole, the key was dropped without a word; a key given twice, the last won (specctl's --param and the API
    refuse a key twice)."""
    import subprocess
    import sys

    from tests.daemon_proc import ROOT
    args = [a for s in sets for a in ("--set", s)]
    where = ["--concurrency", "2", "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s")]
    try:        # (a daemon that took it runs: stopped by the timeout)
        res = run_daemon_once(short_tmp, *args, *where, timeout=30) if command == "run" else subprocess.run(
            [sys.executable, "-m", "controller.daemon", "config", "check", *args], capture_output=True, text=True,
            cwd=ROOT, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} took {sets}")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and said in lines[0], res.stderr
    assert not (short_tmp / "x.db").exists()


@pytest.mark.parametrize("flag, value, option", [("--speed", "10", "sim.speed=5"), ("--policy", "ucb", 'policy.name="thompson"'),
                                                 ("--db", "FILE", 'storage.db="/tmp/other.db"')])
def test_a_run_flag_and_a_set_of_the_same_key_is_one_line(short_tmp, flag, value, option):
    """`run --set sim.speed=5 --speed 10` ran at 10 without a word (the flag won), as a second --set of one key did."""
    value = str(short_tmp / "x.db") if value == "FILE" else value
    where = ["--concurrency", "2", "--socket", str(short_tmp / "s")] + ([] if flag == "--db" else
                                                                         ["--db", str(short_tmp / "x.db")])
    try:
        res = run_daemon_once(short_tmp, "--set", option, flag, value, *where, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run took {flag} {value} and --set {option}")
    key = option.split("=")[0]
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"spec-controller: {flag} and --set {key}=... both set [{key.split('.')[0]}] {key.split('.')[1]}; give it once"]
    assert not (short_tmp / "x.db").exists()


def test_set_still_takes_keys_of_one_table_one_by_one():
    from controller.daemon.setpairs import parse_set
    assert parse_set(["policy.params.scale=2", "policy.params.half_life_s=30", "policy.name=\"ucb\""]) == {
        "policy": {"params": {"scale": 2, "half_life_s": 30}, "name": "ucb"}}


# --- a saved policy state nested too deeply to parse --------------------------------------------------------------------
@pytest.mark.parametrize("where", ["start", "switch"])
def test_a_saved_policy_state_nested_too_deeply_is_not_restored_and_the_policy_starts_fresh(short_tmp, caplog, where):
    """A policy_state row that is JSON nested past the parser's recursion limit: a row that is not JSON was 'not
    restored' (a warning, the policy fresh), this one refused every start ('spec-controller: maximum recursion depth
    exceeded while decoding a JSON array ...', exit 1: systemd restarted it for ever) and a switch to it was a 500."""
    import time

    from tests.fakes import make_service
    db = open_store(short_tmp / "s.db")
    db.conn.execute("INSERT INTO policy_state (wall, policy, params, state) VALUES (?, ?, '{}', ?)",
                    (time.time(), "thompson" if where == "start" else "ucb", "[" * 100000 + "]" * 100000))
    db.conn.close()
    with caplog.at_level(logging.WARNING, "spec_controller"):
        svc, writer = make_service(short_tmp)
        try:
            if where == "switch":
                assert svc.set_policy("ucb", {})["learned"] == "new"
            assert svc.loop.policy.name == ("thompson" if where == "start" else "ucb")
        finally:
            writer.stop()
    name = "thompson" if where == "start" else "ucb"
    assert any(f"saved state of {name} not restored: maximum recursion depth" in r.getMessage() for r in caplog.records)


# --- a database name with a byte that is not UTF-8, in the plot's title -------------------------------------------------
def test_specctl_plot_of_a_database_whose_name_is_not_utf8_draws_it(short_tmp):
    """`specctl --db $'u\\xfe.db' plot out.png` (Python reads the byte as '\\udcfe'): matplotlib's font code refused the
    title, a 97-line TypeError traceback, exit 1, no plot."""
    import os
    from click.testing import CliRunner

    from controller.cli.main import cli
    from tests.test_plots import PNG, _store
    db = os.fsdecode(bytes(short_tmp) + b"/u\xfe.db")
    _store(db).conn.close()
    out = short_tmp / "p.png"
    res = CliRunner().invoke(cli, ["--db", db, "--socket", str(short_tmp / "no.sock"), "plot", str(out)])
    assert res.exit_code == 0 and res.output.startswith(f"wrote {out}: "), (res.output, res.exception)
    assert out.read_bytes()[:4] == PNG


def test_the_stop_event_names_the_exit_code_a_lost_checkpoint_makes(short_tmp, caplog):
    """helper-149: the stop event was queued before the flush's outcome was known, so where the final checkpoint alone
    was rolled back the database said 'exit 0' of a daemon that then exited 5."""
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    commit = writer._commit
    writer._commit = lambda items: sqlite3.OperationalError("disk I/O error") \
        if any(kind == "policy_state" for kind, _ in items) else commit(items)     # the checkpoint alone is refused
    with caplog.at_level(logging.INFO, "spec_controller"):
        assert drained(svc, "specctl stop").exit_code == 5
    conn = sqlite3.connect(short_tmp / "s.db")
    stops = [d for (d,) in conn.execute("SELECT detail FROM events WHERE kind = 'stop'")]
    conn.close()
    assert stops == ["specctl stop: exit 5"], stops


def test_the_drain_checkpoints_before_it_waits_for_the_engine(short_tmp):
    """helper-153: a stalled SGLang held the drain (retune thread, health probe, exit: up to minutes) before its only
    checkpoint, so the unit's SIGKILL at TimeoutStopSec lost what the policy had learned since the last one."""
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    saved_when_stopping = []

    def stop(timeout: float = 30.0) -> None:       # the engine's exit: where a hung SGLang holds the drain
        assert writer.flush(10)
        conn = sqlite3.connect(short_tmp / "s.db")
        saved_when_stopping.append(conn.execute("SELECT count(*) FROM policy_state").fetchone()[0])
        conn.close()
    svc.engine.stop = stop
    drained(svc)
    assert saved_when_stopping == [1]
