"""The writer's durable writes (state/writer.py transaction, state/items.py Ticket): a command's write
commits in queue order and is awaited; one that cannot start in time is cancelled and never lands;
a failed or unknown outcome is one line; what a systemic fault leaves in `problem`."""
from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from state import queries
from state.db import open_store
from state.items import Ticket, decision_item, event_item, policy_state_item, setting_item
from state.writer import WriteFailed, Writer


def test_a_transaction_commits_in_queue_order_and_returns_once_on_disk(tmp_path):
    w = Writer(open_store(tmp_path / "t.db")).start()
    w.setting("pinned", 3)                                         # queued before: committed first
    w.transaction([setting_item("pinned", 5), event_item("pin", "5")], timeout=10)
    assert queries.settings(w.db) == {"pinned": 5} and [r["detail"] for r in w.db["events"].rows] == ["5"]
    assert w.commits == 2 and w.errors == 0
    w.stop()


def test_a_transaction_that_cannot_start_in_time_is_refused_and_never_lands(tmp_path):
    w = Writer(open_store(tmp_path / "c.db"))                      # not started: nothing drains
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 7)], timeout=0.05)
    assert str(err.value) == "the database writer is busy (a slow write)" and err.value.maybe_saved is False
    w.problem = "database locked: x"
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 8)], timeout=0.05)
    assert str(err.value) == "the database writer is busy (database locked: x)"
    w.start()
    assert w.flush(10)
    assert queries.settings(w.db) == {} and w.commits == 0 and w.errors == 0
    w.stop()


@pytest.mark.parametrize("message,kind,problem", [
    ("no such table: x", "error", None), ("database or disk is full", "disk full", "database disk full: "),
    ("database is locked", "locked", "database locked: ")])
def test_a_failed_transaction_is_one_line_and_not_counted_as_lost(tmp_path, message, kind, problem):
    w = Writer(open_store(tmp_path / "f.db"))
    w._commit = lambda items: sqlite3.OperationalError(message)
    w.start()
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 7)], timeout=10)
    assert str(err.value) == f"the database write failed: {kind} ({message})" and not err.value.maybe_saved
    assert w.errors == 0                                           # refused to its caller: nothing lost unseen
    assert w.problem == (None if problem is None else problem + message)
    w.stop()


def test_a_transaction_under_way_for_too_long_may_yet_be_saved(tmp_path, monkeypatch):
    waited = []

    class Stuck(Ticket):
        def __init__(self, items):
            super().__init__(items)
            self.begin()                                           # started at once, never finished
            self.done = type("E", (), {"wait": lambda _, timeout: waited.append(timeout) and False})()
    monkeypatch.setattr("state.writer.Ticket", Stuck)
    w = Writer(open_store(tmp_path / "s.db"))
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 7)], timeout=0.01)
    assert str(err.value) == "the database write did not finish in 120 s; it may yet be saved"
    assert err.value.maybe_saved is True
    with pytest.raises(WriteFailed):
        w.transaction([setting_item("pinned", 7)])
    # it waits `timeout` (5 s by default) for the write to start, then 120 s for it to finish
    assert waited == [0.01, 120.0, 5.0, 120.0]


def test_a_ticket_is_begun_or_cancelled_once():
    t = Ticket([1])
    assert t.cancel() and not t.begin() and not t.cancel()         # cancelled: it never starts
    u = Ticket([1])
    assert u.begin() and not u.cancel()                            # under way: too late to cancel
    u.finish("boom")
    assert u.done.is_set() and u.error == "boom" and not u.cancel()
    assert Ticket([]).error is None and not Ticket([]).done.is_set()


def test_items_are_the_rows_of_their_tables():
    assert setting_item("pinned", 3)[0] == "settings"
    kind, row = decision_item(1.5, 4, 9, "ucb", "why", True)
    assert kind == "decisions" and {k: row[k] for k in ("t", "old", "new", "policy", "reason", "exploratory")} == {
        "t": 1.5, "old": 4, "new": 9, "policy": "ucb", "reason": "why", "exploratory": 1}
    assert decision_item(1.5, 4, 9, "ucb", "why", False)[1]["exploratory"] == 0
    kind, row = event_item("pin")
    assert kind == "events" and (row["kind"], row["detail"]) == ("pin", "") and row["wall"] > 0
    kind, row = policy_state_item("ucb", {"c": 1}, {"k": [1.5]})
    assert kind == "policy_state" and (row["policy"], json.loads(row["params"]), json.loads(row["state"])) == (
        "ucb", {"c": 1}, {"k": [1.5]}) and row["wall"] > 0
    for bad in ({"k": float("nan")}, {"k": [float("inf")]}):
        with pytest.raises(ValueError):
            policy_state_item("ucb", {}, bad)
    with pytest.raises(ValueError):
        policy_state_item("ucb", {"c": float("nan")}, {})


def test_a_write_queued_by_another_thread_lands_too(tmp_path):
    w = Writer(open_store(tmp_path / "o.db")).start()
    t = threading.Thread(target=lambda: w.decision(2.0, 0, 6, "ucb", "x", False))
    t.start()
    t.join(10)
    assert w.flush(10) and [r["new"] for r in queries.recent_decisions(w.db, 5)] == [6]
    w.stop()


def test_a_transaction_after_the_writer_stopped_is_refused_as_stopping_and_never_lands(tmp_path):
    """A pin in the daemon's drain, after its writer stopped: was 'the database writer is busy (a slow write)' after the
    whole command timeout, for a writer that would never run it (helper-116)."""
    w = Writer(open_store(tmp_path / "s.db")).start()
    w.stop()
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 9)], timeout=30)
    assert str(err.value) == "the daemon is stopping: its database writer has stopped" and not err.value.maybe_saved
    assert queries.settings(w.db) == {} and w.q.empty()
