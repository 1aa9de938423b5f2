"""state/writer.py's counters and limits: what a dropped sample counts, essential writes past the cap,
the queue's size, settings replaced in place, lock retries and their one log line, the thread itself."""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
import types

from state import queries
from state.db import open_store
from state.items import setting_item
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


class Clock:
    """A fake monotonic clock for the writer's recovery delay and its rate-limited log."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def failing_commits(monkeypatch, w, errors):
    """w._commit returns errors[i] on its i-th call while there are any (None: the real commit)."""
    real, calls = w._commit, []

    def commit(items):
        calls.append(len(items))
        err = errors[len(calls) - 1] if len(calls) <= len(errors) else None
        return err if err is not None else real(items)
    monkeypatch.setattr(w, "_commit", commit)
    return calls


def errors_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


def test_a_drain_commits_at_most_512_writes_in_one_transaction(tmp_path):
    w = Writer(open_store(tmp_path / "d.db"))              # not started: 513 groups wait
    for i in range(513):
        w.samples([(float(i), 2, 2, 5, 0.01, 1)])
    w.start()
    assert w.flush(10)
    assert (w.commits, w.written_samples, w.db["samples"].count) == (2, 513, 513)
    w.stop()


def test_writes_queued_after_a_transaction_in_the_same_drain_land(tmp_path):
    w = Writer(open_store(tmp_path / "a.db"))
    done = []
    t = threading.Thread(target=lambda: done.append(w.transaction([setting_item("pinned", 5)], timeout=10)))
    t.start()
    deadline = time.monotonic() + 10
    while w.q.qsize() < 1:                                  # the transaction is queued ...
        assert t.is_alive() and time.monotonic() < deadline, "the transaction never reached the queue"
        time.sleep(0.001)
    w.decision(1.0, 0, 4, "ucb", "x", False)                # ... and a decision after it, one drain
    w.start()
    t.join(10)
    assert w.flush(10) and done == [None] and w.errors == 0
    assert queries.settings(w.db) == {"pinned": 5} and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [4]
    w.stop()


def test_an_unexpected_error_in_a_drain_is_counted_logged_once_and_the_writer_goes_on(tmp_path, monkeypatch, caplog):
    w = Writer(open_store(tmp_path / "u.db"))
    real, raised = w._write, []
    arrived = threading.Semaphore(0)

    def write(items):
        if len(raised) < 2:
            raised.append(len(items))
            arrived.release()
            raise RuntimeError("boom")
        return real(items)
    monkeypatch.setattr(w, "_write", write)
    w.decision(1.0, 0, 4, "ucb", "x", False)
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        w.start()
        assert arrived.acquire(timeout=10)
        w.decision(2.0, 4, 5, "ucb", "x", False)
        assert arrived.acquire(timeout=10)
        w.decision(3.0, 5, 6, "ucb", "x", False)
        assert w.flush(10)
    assert w.errors == 2 and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [6]
    assert errors_logged(caplog) == ["state writer: unexpected RuntimeError: boom"]   # the second is held back
    w.stop()


def test_a_bad_write_is_logged_with_its_table_and_error_at_most_once_per_interval(tmp_path, caplog):
    for interval in (60.0, 10.0):
        kwargs = {} if interval == 60.0 else {"log_interval_s": interval}
        w = Writer(open_store(tmp_path / f"i{interval:g}.db"), **kwargs)
        clock = Clock(0.0)
        w._logs.clock = clock
        w.start()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
            w.call(lambda d: d.execute("INSERT INTO no_such_table VALUES (1)"))
            w.samples([(0.5, 2, 2, 5)])                         # 4 values for 6 columns: another table's fault
            assert w.flush(10)
            clock.t = interval - 0.5
            w.call(lambda d: d.execute("INSERT INTO no_such_table VALUES (1)"))
            assert w.flush(10)
            clock.t = interval
            w.call(lambda d: d.execute("INSERT INTO no_such_table VALUES (1)"))
            assert w.flush(10)
        logged = errors_logged(caplog)
        assert w.errors == 4 and len(logged) == 3
        assert logged[0] == ("state writer: a call write failed and was rolled back: "
                             "no such table: no_such_table")
        assert logged[1].startswith("state writer: a samples write failed and was rolled back: ")
        assert logged[2] == ("state writer: a call write failed and was rolled back: no such table: no_such_table"
                             f" (1 more like it in the last {interval:.0f} s)")
        w.stop()


def one_write_meets_a_lock(w: Writer, caplog) -> None:
    """A decision written into a locked database: one error, the writer's problem, one log line."""
    w.decision(1.0, 0, 4, "ucb", "x", False)
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        w.start()
        assert w.flush(10)
    assert w.errors == 1 and w.problem == "database locked: database is locked"
    assert errors_logged(caplog) == [
        "state writer: database locked: database is locked (writes are retried; commands are refused meanwhile)"]
    w.stop()


def test_a_lock_given_up_on_is_one_log_line(tmp_path, monkeypatch, caplog):
    w = Writer(open_store(tmp_path / "g.db"))
    monkeypatch.setattr(w, "_commit", lambda items: sqlite3.OperationalError("database is locked"))
    one_write_meets_a_lock(w, caplog)


def test_a_lock_met_by_a_write_retried_alone_is_the_writers_problem(tmp_path, monkeypatch, caplog):
    w = Writer(open_store(tmp_path / "p.db"))
    failing_commits(monkeypatch, w, [sqlite3.OperationalError("no such table: x"),     # the batch
                                     sqlite3.OperationalError("database is locked")])  # its one write, alone
    one_write_meets_a_lock(w, caplog)


def test_a_full_disk_losing_a_batch_is_the_writers_problem(tmp_path, monkeypatch):
    w = Writer(open_store(tmp_path / "f.db"))
    monkeypatch.setattr(w, "_commit", lambda items: sqlite3.OperationalError("database or disk is full"))
    w.decision(1.0, 0, 4, "ucb", "x", False)
    w.decision(2.0, 4, 5, "ucb", "x", False)
    w.start()
    assert w.flush(10)
    assert w.errors == 2 and w.problem == "database disk full: database or disk is full"
    w.stop()


def test_a_problem_is_over_after_recover_s_without_a_failure_and_the_next_is_logged_at_once(
        tmp_path, monkeypatch, caplog):
    clock = Clock(100.0)
    monkeypatch.setattr("state.writer.time", types.SimpleNamespace(monotonic=clock))
    w = Writer(open_store(tmp_path / "o.db"))
    w._logs.clock = clock
    locked = sqlite3.OperationalError("database is locked")
    failing_commits(monkeypatch, w, [locked, None, None, None, locked])
    w.start()
    with caplog.at_level(logging.WARNING, logger="spec_controller.state"):
        w.decision(1.0, 0, 4, "ucb", "x", False)        # locked at 100, then committed
        assert w.flush(10) and w.problem is not None
        clock.t = 104.9
        w.decision(2.0, 4, 5, "ucb", "x", False)
        assert w.flush(10) and w.problem is not None    # 4.9 s without a failure: not yet over
        clock.t = 105.0
        w.decision(3.0, 5, 6, "ucb", "x", False)
        assert w.flush(10) and w.problem is None        # recover_s (5 s): over
        clock.t = 106.0
        w.decision(4.0, 6, 7, "ucb", "x", False)        # locked again, 6 s after the first line
        assert w.flush(10)
    assert w.errors == 0 and w.problem == "database locked: database is locked"
    lock_line = ("state writer: database locked: database is locked "
                 "(writes are retried; commands are refused meanwhile)")
    assert [r.getMessage() for r in caplog.records] == [
        lock_line, "state writer: the database takes writes again (0 writes lost so far)", lock_line]
    w.stop()


def test_flush_waits_10_s_and_stop_30_s_by_default(tmp_path, monkeypatch):
    w = Writer(open_store(tmp_path / "w.db"))                # not started
    waited = []

    class Event:
        def wait(self, timeout):
            waited.append(timeout)
            return False

        def set(self):
            pass
    monkeypatch.setattr("state.writer.threading", types.SimpleNamespace(Event=Event))
    assert w.flush() is False and waited == [10.0]

    class Thread:
        def join(self, timeout):
            waited.append(timeout)
    w._thread = Thread()
    w.stop()
    assert waited == [10.0, 30.0]
