"""Fault injection at the store: commands are acknowledged only once on disk, a full / locked
database is reported (one log line, healthy false, commands refused) and recovered from, samples go
to disk in groups, every table has a retention, and rollups never skip a window."""
import logging
import signal
import sqlite3
import threading

import pytest

from controller.daemon.commands import CommandRefused
from state import queries
from state.retention import Retention, Rollups, apply_retention
from tests.daemon_proc import DaemonProc
from tests.fakes import good, make_service


def _stall_writer(writer) -> threading.Event:
    release = threading.Event()
    writer.call(lambda db: release.wait(60))
    return release


def test_a_command_is_refused_and_nothing_changes_while_its_write_cannot_happen(short_tmp):
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s = 0.2
    release = _stall_writer(writer)                # a disk that does not answer
    with pytest.raises(CommandRefused, match="nothing changed"):
        svc.pin(7)                                 # the old code answered 200 with nothing on disk
    with pytest.raises(CommandRefused):
        svc.set_policy("ucb", {})
    assert svc.loop.pinned is None and svc.policy_info()["name"] == "thompson"
    release.set()
    assert writer.flush(10)
    assert queries.settings(writer.db).get("pinned") is None      # the refused write never lands later
    assert svc.pin(7)["pinned"] is True
    reader = svc.reader()
    assert queries.settings(reader)["pinned"] == 7             # acknowledged = committed, no flush needed
    reader.conn.close()
    writer.stop()


def _fill_to_the_brim(path, writer=None) -> None:
    """No room left for one more row in any table (SQLite's page cap stands for a full disk); writer: its connection
    capped too, first."""
    if writer is not None:
        writer.db.execute(f"PRAGMA max_page_count = {writer.db.execute('PRAGMA page_count').fetchone()[0] + 4}")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0] + 4}")
    for size in (4000, 400, 40, 1):
        for table, sql in (("events", "INSERT INTO events (wall, kind, detail) VALUES (1, 'x', ?)"),
                           ("settings", "INSERT INTO settings (key, value, wall) VALUES (hex(randomblob(8)), ?, 1)"),
                           ("decisions", "INSERT INTO decisions (t, wall, old, new, policy, reason, exploratory) "
                                         "VALUES (1, 1, 0, 0, 'x', ?, 0)")):
            try:
                while True:
                    conn.execute(sql, ["x" * size])
            except sqlite3.OperationalError as e:
                assert "full" in str(e)
    conn.close()


def test_disk_full_one_log_line_healthy_false_commands_refused_then_recovery(short_tmp, caplog):
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    _fill_to_the_brim(short_tmp / "s.db", writer)
    caplog.set_level(logging.WARNING, logger="spec_controller.state")
    for i in range(2000):                          # a busy daemon's writes on a full disk
        writer.decision(100.0 + i, 0, 1, "x", "r" * 100, False)
        writer.samples([(100.0 + i, 4, 0, 4, 0.01, 1)])
    assert writer.flush(30)
    assert writer.errors >= 2000 and writer.problem.startswith("database disk full")
    with pytest.raises(CommandRefused, match="disk full"):
        svc.pin(3)
    st = svc.status()
    assert svc.loop.pinned is None and not st["daemon"]["healthy"]
    assert any("disk full" in p for p in st["daemon"]["problems"])
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) <= 2, [r.getMessage() for r in lines]     # the old code: one line per lost write
    writer.db.execute("PRAGMA max_page_count = 1073741823")        # space is back
    writer.recover_s = 0.0                                          # (healthy after 5 s without a failure)
    assert svc.pin(3)["pinned"] is True
    assert svc.status()["daemon"]["healthy"] and writer.problem is None
    assert any("takes writes again" in r.getMessage() for r in caplog.records)
    writer.stop()


def test_a_database_locked_by_another_process_refuses_commands_clearly(short_tmp):
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)                        # the first start's own writes are in
    writer.db.execute("PRAGMA busy_timeout = 100")
    other = sqlite3.connect(short_tmp / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(CommandRefused, match="locked"):
        svc.pin(4)
    assert svc.loop.pinned is None and "locked" in " ".join(svc.status()["daemon"]["problems"])
    other.execute("ROLLBACK")
    other.close()
    writer.recover_s = 0.0
    assert svc.pin(4)["pinned"] is True
    assert svc.status()["daemon"]["healthy"] and writer.errors == 0     # a refused command is no lost write
    writer.stop()


def test_an_acknowledged_pin_survives_a_sigkill_at_once(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "4", speed=40)
    try:
        d.wait_socket()
        assert d.call("POST", "/threshold/pin", {"threshold": 11})["pinned"] is True
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    finally:
        d.close()
    conn = sqlite3.connect(d.db)
    assert conn.execute("SELECT value FROM settings WHERE key = 'pinned'").fetchone() == ("11",)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_ingest_hands_the_writer_groups_not_one_transaction_per_batch(short_tmp):
    svc, writer = make_service(short_tmp)
    clock, groups = [0.0], []
    svc.ingest.clock = lambda: clock[0]
    hand = writer.samples
    writer.samples = lambda rows: groups.append(len(rows)) or hand(rows)    # each is one transaction, or more
    for i in range(1000):                          # a decode batch every ~2 ms (2**-9 s), one ingest pass each
        svc.ingest.on_sample(good(100.0 + i * 0.002, bs=1 + i % 8))
        clock[0] += 2 ** -9
        svc.ingest.step()
    svc.ingest.step(final=True)
    assert writer.flush(10)
    assert writer.written_samples == 1000
    assert groups == [257, 257, 257, 229], groups   # ~2 s of batches: a group every 0.5 s
    writer.stop()


def test_rollups_catch_up_on_every_window_whatever_the_clock_speed(short_tmp):
    svc, writer = make_service(short_tmp, rollup_s=10.0)
    rows = [(100.0 + i * 0.5, 4, 0, 4, 0.01, 1) for i in range(2000)]       # 1000 s: 100 windows
    writer.samples(rows)
    svc.rollup()                                    # one run after 100 windows (a clock at 100x)
    assert writer.flush(10)
    windows = [r[0] for r in writer.db.execute("SELECT DISTINCT window_start FROM aggregates ORDER BY 1")]
    assert windows == [100.0 + 10 * i for i in range(99)]           # the newest, still open, waits
    assert writer.db.execute("SELECT sum(batches) FROM aggregates").fetchone()[0] == 1980
    writer.samples([(1100.0 + i * 0.5, 4, 0, 4, 0.01, 1) for i in range(40)])
    svc.rollup()
    assert writer.flush(10)
    assert writer.db.execute("SELECT count(DISTINCT window_start) FROM aggregates").fetchone()[0] == 101
    writer.stop()


def test_a_restarted_rollup_resumes_after_the_newest_window(tmp_path):
    from state.db import open_store
    db = open_store(tmp_path / "r.db")
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", [(i * 1.0, 4, 0, 4, 0.01, 1) for i in range(100)])
    Rollups(10.0, (1, 2, 4, 8))(db)
    db.execute("UPDATE aggregates SET batches = -1")          # marks what the first run wrote
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", [(100 + i * 1.0, 4, 0, 4, 0.01, 1)
                                                                     for i in range(30)])
    Rollups(10.0, (1, 2, 4, 8))(db)
    got = dict(db.execute("SELECT window_start, batches FROM aggregates").fetchall())
    assert got == {**{10.0 * i: -1 for i in range(9)}, 90.0: 10, 100.0: 10, 110.0: 10}


def test_retention_bounds_every_table(tmp_path):
    from state.db import open_store
    db = open_store(tmp_path / "k.db")
    hour = 3600.0
    wall0 = 1_000_000 * hour
    for i in range(300):                           # a checkpoint every 2 minutes for 10 hours
        db.execute("INSERT INTO policy_state (wall, policy, params, state) VALUES (?, 'ucb', '{}', '{}')",
                   [wall0 + i * 120.0])
    for i in range(500):
        db.execute("INSERT INTO decisions (t, wall, old, new, policy, reason, exploratory) "
                   "VALUES (?, 0, 0, 1, 'ucb', 'r', 0)", [float(i)])
        db.execute("INSERT INTO events (wall, kind, detail) VALUES (?, 'x', '')", [wall0 + i * 60.0])
    keep = Retention(states_keep=10, states_hourly_s=5 * hour, decisions_s=400.0, max_decisions=300, events_s=4 * hour,
                     max_events=100)
    now_wall = wall0 + 300 * 120.0
    apply_retention(db, now_t=500.0, keep=keep, wall=now_wall)
    states = [r[0] for r in db.execute("SELECT wall FROM policy_state ORDER BY id")]
    assert len(states) == 10 + 4                   # the newest 10, and one per hour for the 5 hours before
    assert states[-10:] == [wall0 + i * 120.0 for i in range(290, 300)]
    assert db.execute("SELECT min(t), count(*) FROM decisions").fetchone() == (200.0, 300)
    assert db.execute("SELECT min(wall) - ?, count(*) FROM events", [wall0]).fetchone() == (400 * 60.0, 100)
