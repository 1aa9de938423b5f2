"""A write that fails (a full disk, helper-159): a maintenance job rolled back with its batch is not taken for done,
and every sample it loses is counted."""
import logging
import threading

from state.items import INSERTS
from state.retention import Rollups
from tests.fakes import make_service
from tests.test_faults_storage import _fill_to_the_brim


def _rows(t0: float, n: int) -> list[tuple]:
    return [(t0 + i * 0.5, 4, 0, 4, 0.01, 1) for i in range(n)]


def _held(writer) -> threading.Event:
    """The writer held inside a batch of its own until the event is set: what is queued meanwhile is its next batch."""
    entered, release = threading.Event(), threading.Event()
    writer.call(lambda db: entered.set() or release.wait(60))
    assert entered.wait(10)
    return release


def test_a_rollup_rolled_back_with_its_batch_is_rolled_up_again(short_tmp):
    svc, writer = make_service(short_tmp, rollup_s=10.0)
    writer.samples(_rows(100.0, 200))                      # windows 100 .. 190
    assert writer.flush(10)
    writer.db.execute(f"PRAGMA max_page_count = {writer.db.execute('PRAGMA page_count').fetchone()[0] + 4}")
    _fill_to_the_brim(short_tmp / "s.db")
    release = _held(writer)
    svc.rollup()                  # rolls up 100 .. 180, then the samples of its batch meet the full disk: all rolled back
    writer.samples(_rows(200.0, 400))
    release.set()
    assert writer.flush(10) and writer.problem.startswith("database disk full")
    assert writer.db.execute("SELECT count(*) FROM aggregates").fetchone()[0] == 0
    writer.db.execute("PRAGMA max_page_count = 1073741823")          # space is back
    writer.samples(_rows(300.0, 40))
    svc.rollup()
    assert writer.flush(10)
    windows = [r[0] for r in writer.db.execute("SELECT DISTINCT window_start FROM aggregates ORDER BY 1")]
    assert windows == [100.0 + 10 * i for i in range(10)] + [300.0], windows    # was [190.0, 300.0]
    writer.stop()


def test_a_rollups_memory_moves_only_with_a_commit(tmp_path):
    from state.db import open_store
    db = open_store(tmp_path / "r.db")
    db.conn.executemany(INSERTS["samples"], _rows(0.0, 100))
    job = Rollups(10.0, (1, 2, 4, 8))
    assert job(db) > 0 and job.until is None         # run, not yet committed
    job.committed()
    assert job.until == 40.0
    job(db)                                          # nothing new: a later commit keeps what was committed
    job.committed()
    assert job.until == 40.0


def test_samples_lost_with_a_failed_write_are_counted_as_rows_not_stored(short_tmp, caplog):
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    writer.db.execute(f"PRAGMA max_page_count = {writer.db.execute('PRAGMA page_count').fetchone()[0] + 4}")
    _fill_to_the_brim(short_tmp / "s.db")
    caplog.set_level(logging.ERROR, logger="spec_controller.state")
    release = _held(writer)
    for t0 in (100.0, 200.0, 300.0):
        writer.samples(_rows(t0, 100))             # three groups, one batch: one failed write of 300 rows
    release.set()
    assert writer.flush(10)
    assert writer.errors == 3 and writer.dropped == 300 and writer.written_samples == 0     # dropped was 0
    assert svc.status()["samples"]["write_dropped"] == 300
    # a full disk's writes are lost, not retried (the line said 'writes are retried' of every fault)
    assert [r.getMessage() for r in caplog.records if r.name == "spec_controller.state"] == [
        "state writer: database disk full: database or disk is full (failed writes are lost, counted; commands are "
        "refused meanwhile)"]
    writer.stop()
