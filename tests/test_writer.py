"""state/writer.py's counters and limits: what a lost write counts, how long an essential write waits,
the queue's size, settings replaced in place, lock retries and their one warning, the thread itself."""
from __future__ import annotations

import logging
import queue
import sqlite3

from state import queries
from state.db import open_store
from state.writer import Writer


def test_a_lost_write_is_counted_once_per_write(tmp_path):
    w = Writer(open_store(tmp_path / "l.db"))
    waited = []

    def full(item, block=True, timeout=None):          # the queue stayed full for the whole wait
        waited.append((block, timeout))
        raise queue.Full
    w.q.put = full
    assert not w.decision(1.0, 0, 4, "ucb", "x", False) and not w.setting("pinned", 3)
    assert (w.dropped, w.errors) == (2, 2)
    assert waited == [(True, 30), (True, 30)]         # essential writes wait up to 30 s
    assert not w.samples([(0.5, 2, 2, 5, 0.01, 1)]) and not w.samples([(0.6, 2, 2, 5, 0.01, 1)])
    assert (w.dropped, w.errors) == (4, 2) and waited[2:] == [(False, None), (False, None)]


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


def test_a_lock_is_retried_with_one_warning(tmp_path, monkeypatch, caplog):
    w = Writer(open_store(tmp_path / "r.db"))
    real, calls = w._commit, []

    def locked_once(items):
        calls.append(len(items))
        return sqlite3.OperationalError("database is locked") if len(calls) == 1 else real(items)
    monkeypatch.setattr(w, "_commit", locked_once)
    w.decision(1.0, 0, 4, "ucb", "x", False)
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        w.start()
        assert w.flush(10)
    assert calls == [1, 1] and w.errors == 0 and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [4]
    assert [r.getMessage() for r in caplog.records] == [
        "state writer: database locked by another process, retrying: database is locked"]
    w.stop()
