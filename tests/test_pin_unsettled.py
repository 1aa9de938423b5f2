"""A pin whose durable write outlived its wait ('it may yet be saved') and then lands must not outlast the operator's
unpin: the unpin was a no-op in memory (nothing pinned there), so nothing was written after the pin, and the next start
restored the pin (helper-123's unproven point, acted out with another connection holding SQLite's write lock)."""
import sqlite3
import threading

import pytest

from controller.daemon.commands import CommandRefused
from state import queries
from state.db import open_store
from tests.fakes import make_service


def _pin_that_may_yet_land(short_tmp, threshold: int):
    """A service whose pin(threshold) was answered 'may yet be saved' while another connection holds the write lock,
    and the lock's holder, who lets it go 0.5 s later (within SQLite's busy timeout: the pin's write then lands)."""
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s, writer.finish_timeout_s = 0.3, 0.3     # (a begun write is awaited for both)
    assert writer.flush(10)               # the start's own rows written: the pin's write is the one to wait
    other = sqlite3.connect(short_tmp / "s.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(CommandRefused, match="may yet be saved"):
        svc.pin(threshold)
    svc.command_timeout_s = 5.0
    threading.Timer(0.5, other.execute, ["COMMIT"]).start()
    return svc, writer


def _saved_pin(path):
    db = open_store(path, readonly=True, check=False)
    try:
        return queries.settings(db).get("pinned")
    finally:
        db.conn.close()


def test_an_unpin_after_a_pin_that_may_yet_land_is_written_after_it(short_tmp):
    svc, writer = _pin_that_may_yet_land(short_tmp, 7)
    assert svc.loop.pinned is None                 # not applied: the operator was told it may yet be saved
    answer = svc.pin(None)                          # waits for its turn behind the pin's write, then writes
    assert answer["pinned"] is False and answer["changed"] is False
    assert writer.flush(10)
    assert _saved_pin(short_tmp / "s.db") is None   # (before: 7, and the next start ran pinned at 7)
    writer.stop()
    again, writer2 = make_service(short_tmp)        # the next start
    assert again.loop.pinned is None
    writer2.stop()


def test_a_pin_back_to_the_running_pin_after_one_that_may_yet_land_is_written_after_it(short_tmp):
    svc, writer = make_service(short_tmp)
    svc.pin(5)
    writer.stop()
    svc, writer = _pin_that_may_yet_land(short_tmp, 9)
    assert svc.loop.pinned == 5
    assert svc.pin(5)["pinned_at"] == 5
    assert writer.flush(10)
    assert _saved_pin(short_tmp / "s.db") == 5      # (before: 9)
    writer.stop()


def test_once_a_write_has_landed_a_no_op_pin_writes_nothing_again(short_tmp):
    svc, writer = _pin_that_may_yet_land(short_tmp, 7)
    svc.pin(None)
    assert writer.flush(10)
    events = len(list(open_store(short_tmp / "s.db", readonly=True, check=False)["events"].rows))
    svc.pin(None)                                   # settled now: the no-op stays a no-op
    assert writer.flush(10)
    assert len(list(open_store(short_tmp / "s.db", readonly=True, check=False)["events"].rows)) == events
    writer.stop()
