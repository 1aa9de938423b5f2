import os
import sqlite3

import pytest

from controller.status import summarise
from state import queries
from state.db import StoreError, open_store
from state.lock import DaemonLock
from state.migrations import MIGRATIONS
from state.retention import Retention, apply_retention, rollup
from state.writer import Writer


def test_migrations_set_version_and_are_idempotent(tmp_path):
    db = open_store(tmp_path / "a.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert {"samples", "aggregates", "decisions", "policy_state", "settings", "events"} <= set(db.table_names())
    db.conn.close()
    db = open_store(tmp_path / "a.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_writer_batches_everything_and_flushes(tmp_path):
    db = open_store(tmp_path / "w.db")
    w = Writer(db).start()
    w.samples([(i * 0.01, 4, 2 if i % 2 else 0, 8 if i % 2 else 4, 0.1, 1) for i in range(1000)])
    w.decision(1.0, 0, 4, "ucb", "exploit", False)
    w.setting("pinned", 7)
    w.policy_state("ucb", {"c": 1}, {"x": [1, 2]})
    w.event("start", "test")
    assert w.flush(10)
    assert db["samples"].count == 1000
    assert queries.settings(db) == {"pinned": 7}
    assert queries.latest_policy_state(db, "ucb")["state"] == {"x": [1, 2]}
    assert queries.recent_decisions(db, 5)[0]["new"] == 4
    sums = queries.sample_sums(db, since_t=0.0)
    s = summarise(sums, sums["span_s"])
    assert s["spec_share"] == pytest.approx(0.5) and s["mean_accept_length"] == pytest.approx(2.0)
    w.stop()


def test_live_and_offline_figures_are_the_same_summary(tmp_path):
    """specctl status reads the same figures from the database as the daemon keeps in memory."""
    from controller.contract import Sample
    from controller.daemon.livestats import LiveStats
    rows = [(i * 0.01, 4 + i % 3, 3 if i % 4 else 0, (4 + i % 3) * (2 if i % 4 else 1), 0.01 + i * 1e-5, 1)
            for i in range(500)]
    db = open_store(tmp_path / "s.db")
    db["samples"].insert_all([dict(zip(("t", "batch_size", "steps", "tokens", "step_s", "decode_only"), r))
                              for r in rows])
    live = LiveStats(window_s=60.0)
    for r in rows:
        live.add(Sample(*r[:5], bool(r[5])))
    sums = queries.sample_sums(db)
    offline, online = summarise(sums, sums["span_s"]), live.snapshot(5.0)
    for key in ("tok_per_s", "spec_share", "mean_accept_length", "acceptance_rate", "batches_per_s", "batches"):
        assert offline[key] == pytest.approx(online[key]) and offline[key], key


def test_writer_drops_and_counts_when_full(tmp_path):
    db = open_store(tmp_path / "f.db")
    w = Writer(db, maxsize=2)           # not started: nothing drains
    assert w.samples([(0, 1, 0, 1, 0.1, 1)]) and w.samples([(0, 1, 0, 1, 0.1, 1)])
    assert not w.samples([(0, 1, 0, 1, 0.1, 1)])
    assert w.dropped == 1


def test_rollup_and_retention(tmp_path):
    db = open_store(tmp_path / "r.db")
    rows = [(t * 0.5, bs, 2 if bs <= 4 else 0, bs * 2 if bs <= 4 else bs, 0.05, 1)
            for t in range(40) for bs in (2, 20)]
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    assert rollup(db, 0.0, 10.0, 10.0, (1, 2, 4, 8, 16, 32)) == 2
    agg = {(r["bucket"], r["mode"]): r for r in db["aggregates"].rows}
    assert agg[(2, "spec")]["batches"] == 20 and agg[(32, "off")]["tokens"] == 400
    apply_retention(db, now_t=20.0, keep=Retention(samples_s=5.0, aggregates_s=1e9))
    assert db.execute("SELECT min(t) FROM samples").fetchone()[0] >= 15.0


def damaged_store(path):
    """A real spec-controller database with pages in its middle overwritten (a disk fault)."""
    import os

    from state.db import leave_wal
    db = open_store(path)
    db.conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?)", [(i, 1, 1, 1, 0.1, 1) for i in range(20000)])
    leave_wal(db)
    db.conn.close()
    with open(path, "r+b") as f:
        f.seek(4096 * 3)
        f.write(os.urandom(4096 * 5))
    return path


@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_that_is_not_sqlite_is_refused_as_not_ours_without_advice(tmp_path, readonly):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError) as err:
        open_store(bad, readonly=readonly)
    assert str(err.value) == f"{bad} is not a spec-controller database (not an SQLite file); refusing it"
    assert bad.read_bytes().startswith(b"this is not sqlite")        # nothing changed


@pytest.mark.parametrize("readonly", [False, True])
def test_a_damaged_spec_controller_database_is_corrupt_move_it_aside(tmp_path, readonly):
    bad = damaged_store(tmp_path / "d.db")
    with pytest.raises(StoreError, match="corrupt .*; move it aside to start afresh") as err:
        open_store(bad, readonly=readonly)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"database {bad} is corrupt (")


def test_a_damaged_sqlite_file_of_another_application_is_not_ours(tmp_path):
    other = tmp_path / "o.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE accounts (x)")
    conn.executemany("INSERT INTO accounts VALUES (?)", [("x" * 200,) for _ in range(2000)])
    conn.commit()
    conn.close()
    with open(other, "r+b") as f:
        f.seek(4096 * 2)
        f.write(b"\xff" * 4096 * 20)
    with pytest.raises(StoreError) as err:
        open_store(other)
    assert "not a spec-controller database" in str(err.value) and "move it aside" not in str(err.value)


def test_locked_database_is_reported(tmp_path):
    path = tmp_path / "l.db"
    open_store(path).conn.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    import state.db as sdb
    old = sdb.BUSY_TIMEOUT_MS
    sdb.BUSY_TIMEOUT_MS = 200
    try:
        with pytest.raises(StoreError, match="locked"):
            open_store(path)
    finally:
        sdb.BUSY_TIMEOUT_MS = old
        holder.execute("ROLLBACK")


def test_readonly_open_of_missing_db(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "none.db", readonly=True)


def test_one_daemon_per_database(tmp_path):
    a, b = DaemonLock(tmp_path / "x.db"), DaemonLock(tmp_path / "x.db")
    a.acquire()
    assert b.held_by_other()
    with pytest.raises(StoreError, match="another spec-controller"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()


def test_flush_returns_only_after_commit(tmp_path):
    """A flush() caller that reads on its own connection sees what was queued before it."""
    import threading
    import time

    db = open_store(tmp_path / "c.db")
    w = Writer(db)                          # not started: the queue fills in a known order
    w.decision(1.0, 0, 7, "ucb", "restored", False)
    flushed = threading.Event()
    t = threading.Thread(target=lambda: w.flush(10) and flushed.set())
    t.start()
    while w.q.qsize() < 2:                  # the flush barrier is queued behind the decision
        time.sleep(0.01)
    w.call(lambda _db: time.sleep(0.5))     # same batch, after the barrier: keeps the transaction open
    w.start()
    t.join(15)
    assert flushed.is_set()
    reader = open_store(tmp_path / "c.db", readonly=True, check=False)
    assert [r["reason"] for r in queries.recent_decisions(reader, 5)] == ["restored"]
    w.stop()


def test_one_bad_write_does_not_lose_its_batch(tmp_path):
    db = open_store(tmp_path / "b.db")
    w = Writer(db)
    w.decision(1.0, 0, 4, "ucb", "exploit", False)
    w.call(lambda d: d.execute("INSERT INTO no_such_table VALUES (1)"))
    w.setting("pinned", 3)
    w.samples([(0.5, 2, 2, 5, 0.01, 1)])
    w.start()
    assert w.flush(10)
    assert [r["new"] for r in queries.recent_decisions(db, 5)] == [4]
    assert queries.settings(db) == {"pinned": 3}
    assert db["samples"].count == 1 and w.written_samples == 1
    assert w.errors == 1
    w.stop()


def _hold_write_lock(path, seconds):
    """Another process's open write transaction (an operator's sqlite3 shell, a backup tool)."""
    import threading
    import time
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")

    def release():
        time.sleep(seconds)
        other.execute("ROLLBACK")
        other.close()
    t = threading.Thread(target=release)
    t.start()
    return t


def test_a_briefly_locked_database_loses_nothing(tmp_path):
    db = open_store(tmp_path / "l.db")
    db.execute("PRAGMA busy_timeout=50")              # the 5 s busy timeout, shortened for the test
    holder = _hold_write_lock(tmp_path / "l.db", 0.15)
    w = Writer(db).start()
    w.decision(1.0, 0, 4, "ucb", "exploit", False)
    w.samples([(0.5, 2, 2, 5, 0.01, 1)])
    assert w.flush(10)
    holder.join()
    assert [r["new"] for r in queries.recent_decisions(db, 5)] == [4] and db["samples"].count == 1
    assert w.errors == 0
    w.stop()


def test_a_database_locked_for_good_counts_what_it_lost(tmp_path):
    db = open_store(tmp_path / "k.db")
    db.execute("PRAGMA busy_timeout=10")
    holder = _hold_write_lock(tmp_path / "k.db", 2.0)
    w = Writer(db).start()
    w.decision(1.0, 0, 4, "ucb", "exploit", False)
    w.setting("pinned", 3)
    assert w.flush(10)                                # answered, with the writes counted as lost
    assert w.errors == 2
    holder.join()
    assert queries.recent_decisions(db, 5) == []
    w.stop()


def test_a_migration_that_fails_midway_leaves_nothing_and_the_next_start_makes_it_whole(tmp_path, monkeypatch):
    """One transaction per step: helper-82 found sqlite-utils 3.x (which pyproject allowed) committing inside
    Table.create, so a fresh database's first start failed ('cannot rollback - no transaction is active') and a step
    cut short left tables under user_version 0, refused at every later start as another application's file."""
    import sqlite3

    import sqlite_utils

    from state.db import StoreError
    real, made = sqlite_utils.db.Table.create, []

    def create_then_fail(self, *args, **kwargs):
        made.append(self.name)
        if len(made) == 3:
            raise sqlite3.OperationalError("disk I/O error (injected)")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(sqlite_utils.db.Table, "create", create_then_fail)
    with pytest.raises(StoreError):
        open_store(tmp_path / "m.db")
    conn = sqlite3.connect(tmp_path / "m.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()
    monkeypatch.setattr(sqlite_utils.db.Table, "create", real)
    db = open_store(tmp_path / "m.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    db.conn.close()


def test_a_start_waits_out_specctls_look_at_the_lock_but_not_a_daemon(tmp_path):
    """helper-82: DaemonLock.holder() (specctl status, stop, offline writes) takes the lock shared for a moment; a
    daemon starting in that moment refused as 'another spec-controller (pid of the last one) is running' (1 start in 10
    beside a `watch specctl status`). A look now delays the start; a daemon holding it still refuses it."""
    import fcntl
    import os
    import threading
    lock_path = tmp_path / "s.db.lock"
    lock_path.write_text("12345")
    look = os.open(lock_path, os.O_RDONLY)
    fcntl.flock(look, fcntl.LOCK_SH | fcntl.LOCK_NB)          # specctl's holder(), caught in the middle
    threading.Timer(0.1, lambda: fcntl.flock(look, fcntl.LOCK_UN)).start()
    lock = DaemonLock(tmp_path / "s.db")
    lock.acquire()
    os.close(look)
    assert lock_path.read_text() == str(os.getpid())
    with pytest.raises(StoreError, match=f"another spec-controller \\(pid {os.getpid()}\\) is running"):
        DaemonLock(tmp_path / "s.db").acquire()
    lock.release()


def test_a_fifo_at_the_lock_files_path_is_one_line_not_a_hang(short_tmp):
    """helper-101 (suspected, confirmed): a read-only open of a FIFO waits for a writer, so specctl's look at the lock
    (holder), an offline write (held_off) and the daemon's start on that database hung for good."""
    import threading
    lock = DaemonLock(short_tmp / "s.db")
    os.mkfifo(lock.path)
    outcome: dict = {}

    def attempt():
        for name, call in (("holder", lock.holder), ("acquire", lock.acquire)):
            try:
                call()
                outcome[name] = "no error"
            except StoreError as e:
                outcome[name] = str(e)
        with lock.held_off():
            outcome["held_off"] = "entered"
    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), outcome
    said = f"lock file {lock.path} is not a regular file; remove it (nothing else belongs there)"
    assert outcome == {"holder": said, "acquire": said, "held_off": "entered"}
