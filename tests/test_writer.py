"""state/writer.py's counters and limits: what a dropped sample counts, essential writes past the cap,
the queue's size, settings replaced in place, lock retries and their one log line, the thread itself."""
from __future__ import annotations

import logging
import sqlite3

from state import queries
from state.db import open_store
from state.writer import Writer


def test_a_dropped_sample_group_counts_its_rows_and_essential_writes_pass_the_cap(tmp_path):
    w = Writer(open_store(tmp_path / "l.db"), maxsize=2)      # not started: nothing drains
    assert w.samples([(0.1, 2, 2, 5, 0.01, 1)]) and w.samples([(0.2, 2, 2, 5, 0.01, 1)])   # 2 queued: the cap
    rows = [(0.5, 2, 2, 5, 0.01, 1), (0.6, 2, 2, 5, 0.01, 1), (0.7, 2, 0, 2, 0.01, 1)]
    assert not w.samples(rows) and (w.dropped, w.errors) == (3, 0)   # one group of 3 rows: 3 dropped
    assert w.decision(1.0, 0, 4, "ucb", "x", False) is True and w.setting("pinned", 3) is True
    assert w.q.qsize() == 4 and (w.dropped, w.errors) == (3, 0)    # never dropped, never an error
    w.start()
    assert w.flush(10)
    assert (w.written_samples, w.db["samples"].count, w.db["decisions"].count) == (2, 2, 1)
    assert queries.settings(w.db) == {"pinned": 3}
    w.stop()


def test_the_default_queue_holds_ten_thousand_writes(tmp_path):
    w = Writer(open_store(tmp_path / "q.db"))          # not started: nothing drains
    assert all(w.samples([(float(i), 1, 0, 1, 0.01, 1)]) for i in range(10000))
    assert not w.samples([(1e4, 1, 0, 1, 0.01, 1)]) and w.dropped == 1


def test_the_writer_thread_is_named_and_does_not_hold_the_process(tmp_path):
    w = Writer(open_store(tmp_path / "t.db"))
    assert w._thread.name == "state-writer" and w._thread.daemon is True


def test_a_setting_written_twice_keeps_the_last_value(tmp_path):
    w = Writer(open_store(tmp_path / "s.db")).start()
    w.setting("pinned", 3)
    assert w.flush(10)
    w.setting("pinned", 5)
    assert w.flush(10)
    assert queries.settings(w.db) == {"pinned": 5} and w.errors == 0
    w.stop()


def test_written_samples_add_up_over_commits(tmp_path):
    w = Writer(open_store(tmp_path / "n.db")).start()
    w.samples([(0.5, 2, 2, 5, 0.01, 1), (0.6, 2, 2, 5, 0.01, 1)])
    assert w.flush(10)
    w.samples([(0.7, 2, 2, 5, 0.01, 1)])
    assert w.flush(10)
    assert w.written_samples == 3 == w.db["samples"].count
    w.stop()


def test_two_bad_writes_are_two_errors_and_the_rest_lands(tmp_path):
    w = Writer(open_store(tmp_path / "b.db"))
    w.call(lambda d: d.execute("INSERT INTO no_such_table VALUES (1)"))
    w.decision(1.0, 0, 4, "ucb", "exploit", False)
    w.call(lambda d: d.execute("INSERT INTO nor_this VALUES (1)"))
    w.start()
    assert w.flush(10)
    assert w.errors == 2 and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [4]
    w.stop()


def test_batches_lost_to_a_lock_add_up(tmp_path, monkeypatch):
    w = Writer(open_store(tmp_path / "k.db"))
    monkeypatch.setattr(w, "_commit", lambda items: sqlite3.OperationalError("database is locked"))
    w.start()
    w.decision(1.0, 0, 4, "ucb", "x", False)
    assert w.flush(10)
    w.decision(2.0, 4, 5, "ucb", "x", False)
    assert w.flush(10)
    assert w.errors == 2
    w.stop()


def test_a_lock_is_retried_with_one_log_line_and_recovery_is_told(tmp_path, monkeypatch, caplog):
    def locked_once(w, calls):
        real = w._commit

        def commit(items):
            calls.append(len(items))
            return sqlite3.OperationalError("database is locked") if len(calls) == 1 else real(items)
        monkeypatch.setattr(w, "_commit", commit)

    w, calls = Writer(open_store(tmp_path / "r.db")), []
    locked_once(w, calls)
    w.decision(1.0, 0, 4, "ucb", "x", False)
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        w.start()
        assert w.flush(10)
    assert calls == [1, 1] and w.errors == 0 and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [4]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.ERROR, (
        "state writer: database locked: database is locked (writes are retried; commands are refused meanwhile)"))]
    assert w.problem == "database locked: database is locked"      # not over until recover_s without a failure
    w.stop()
    caplog.clear()
    quick, calls = Writer(open_store(tmp_path / "q.db")), []
    quick.recover_s = 0.0
    locked_once(quick, calls)
    quick.decision(1.0, 0, 4, "ucb", "x", False)
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        quick.start()
        assert quick.flush(10)
    assert quick.problem is None and caplog.records[-1].getMessage() == (
        "state writer: the database takes writes again (0 writes lost so far)")
    quick.stop()
