"""A full disk (helper-159): the store keeps room for its own recovery, counts every sample it does not store, and a
maintenance job rolled back with its batch is not taken for done. The daemon on a real small file system (a tmpfs,
skipped where none can be mounted) stands for a disk the store itself fills: in WAL mode such a store wedged (every
write, retention's deletes too, needed room), and a floor of free space (a floor above the disk's free space in the
unit tests) is what keeps it writable."""
import logging
import sqlite3
import subprocess
import threading

import pytest

from state.items import INSERTS
from state.retention import Rollups
from state.room import MIB, Room
from tests.daemon_proc import DaemonProc
from tests.fakes import make_service
from tests.test_faults_storage import _fill_to_the_brim

NO_ROOM_MB = 1e9        # a floor above any disk's free space (a petabyte): the writer is always short of room


def _rows(t0: float, n: int) -> list[tuple]:
    return [(t0 + i * 0.5, 4, 0, 4, 0.01, 1) for i in range(n)]


def _held(writer) -> threading.Event:
    """The writer held inside a batch of its own until the event is set: what is queued meanwhile is its next batch."""
    entered, release = threading.Event(), threading.Event()
    writer.call(lambda db: entered.set() or release.wait(60))
    assert entered.wait(10)
    return release


def _count(writer, where: str = "1") -> int:
    return writer.db.execute(f"SELECT count(*) FROM samples WHERE {where}").fetchone()[0]


def test_a_rollup_rolled_back_with_its_batch_is_rolled_up_again(short_tmp):
    svc, writer = make_service(short_tmp, rollup_s=10.0)
    writer.samples(_rows(100.0, 200))                      # windows 100 .. 190
    assert writer.flush(10)
    _fill_to_the_brim(short_tmp / "s.db", writer)
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
    _fill_to_the_brim(short_tmp / "s.db", writer)
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


def test_short_of_room_samples_are_turned_away_and_counted_and_commands_still_saved(short_tmp, caplog):
    svc, writer = make_service(short_tmp, min_free_mb=NO_ROOM_MB)
    caplog.set_level(logging.ERROR, logger="spec_controller.state")
    writer.samples(_rows(100.0, 100))
    writer.decision(100.0, 0, 4, "thompson", "r", False)
    assert writer.flush(10)
    assert _count(writer) == 0 and writer.dropped == writer.turned_away == 100 and writer.errors == 0
    assert writer.db.execute("SELECT count(*) FROM decisions").fetchone()[0] == 1
    assert svc.pin(5)["pinned"] is True                      # a command: acknowledged, and on disk
    reader = svc.reader()
    assert reader.execute("SELECT value FROM settings WHERE key = 'pinned'").fetchone() == ("5",)
    reader.conn.close()
    st = svc.status()
    problems = [p for p in st["daemon"]["problems"] if p.startswith("database disk nearly full: ")]
    assert not st["daemon"]["healthy"] and len(problems) == 1 and "[storage] min_free_mb" in problems[0], problems
    assert st["samples"]["write_dropped"] == 100
    lines = [r.getMessage() for r in caplog.records if r.name == "spec_controller.state"]
    assert len(lines) == 1 and lines[0].startswith("state writer: database disk nearly full: "), lines
    writer.stop()


def test_short_of_room_retention_trims_the_oldest_samples_and_the_newest_go_where_they_were(short_tmp):
    svc, writer = make_service(short_tmp, min_free_mb=NO_ROOM_MB)
    old = _rows(100.0, 20000)                        # what filled the disk, written while there was room
    writer.call(lambda db: db.conn.executemany(INSERTS["samples"], old))
    svc.retention()                                  # nothing turned away yet: retention keeps its own rules
    assert writer.flush(10) and _count(writer) == 20000
    writer.samples(_rows(20000.0, 50))               # no room, no freed page: turned away
    assert writer.flush(10) and _count(writer, "t >= 20000") == 0 and writer.turned_away == 50
    svc.retention()                                  # samples were turned away: the oldest tenth goes
    assert writer.flush(10)
    assert _count(writer) == 18000 and writer.db.execute("SELECT min(t) FROM samples").fetchone()[0] == 1100.0
    writer.samples(_rows(30000.0, 50))               # into the pages the trim freed
    assert writer.flush(10) and _count(writer, "t >= 30000") == 50 and writer.turned_away == 50
    svc.retention()                                  # none turned away since: no second trim
    assert writer.flush(10) and _count(writer) == 18050
    writer.stop()


@pytest.mark.parametrize("floor, refused", [(0, False), (16, False), (15.9, True), (-1, True)])
def test_a_floor_under_what_a_checkpoint_needs_is_refused(floor, refused):
    from controller.daemon.config import ConfigError, load_config
    if not refused:
        assert load_config(None, {"storage": {"min_free_mb": floor}})["storage"]["min_free_mb"] == floor
        return
    with pytest.raises(ConfigError, match=r"^config: \[storage\] min_free_mb=.* out of range \(allowed 0"):
        load_config(None, {"storage": {"min_free_mb": floor}})


def test_room_is_the_free_space_of_the_databases_file_system(tmp_path):
    roomy = Room(tmp_path / "x.db", 1 / MIB)                                         # (a floor of one byte)
    cramped = Room(tmp_path / "x.db", NO_ROOM_MB, every_s=3600)     # (one reading: compared twice)
    assert roomy.free() > 0 and roomy.short() is None and roomy.problem() is None
    assert cramped.short() == cramped.free() and f"free in {tmp_path}, under the 1000000000 MiB" in cramped.problem()
    assert Room("", NO_ROOM_MB).short() is None and Room(tmp_path / "x.db", 0).short() is None


@pytest.fixture
def small_disk(short_tmp):
    """A 40 MiB file system with 19 MiB free (a filler file takes the rest): 3 MiB above a floor of 16, a disk the
    store fills in seconds."""
    mnt = short_tmp / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "filler").write_bytes(b"\0" * (21 * MIB))
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_daemon_on_a_disk_it_fills_keeps_room_for_commands_and_retention(short_tmp, small_disk):
    """Before: the disk filled, every write failed (a pin was refused 'disk full'), and retention, due for an hour of
    samples, never freed a byte: the database wedged until someone freed space by hand."""
    db, sock = small_disk / "s.db", short_tmp / "c.sock"
    d = DaemonProc(short_tmp, "--concurrency", "32", speed=100, paths_in_config=(db, sock),
                   config_text=f'[storage]\ndb = "{db}"\nmin_free_mb = 16\n'
                               f'[control]\nsocket = "{sock}"\n')
    try:
        d.wait_socket()
        first = d.wait_for(lambda st: st["samples"]["write_dropped"] > 0, timeout=120, what="samples turned away")
        assert any(p.startswith("database disk nearly full: ") for p in first["daemon"]["problems"]), first["daemon"]
        d.wait_for(lambda st: st["samples"]["written"] > first["samples"]["written"], timeout=60,
                   what="samples stored again, in room retention freed")
        assert d.call("POST", "/threshold/pin", {"threshold": 7})["pinned"] is True
        st = d.call("GET", "/status")
        assert st["samples"]["write_errors"] == 0, st["samples"]
        assert not any("disk full" in p for p in st["daemon"]["problems"]), st["daemon"]["problems"]
        assert d.stop() == 0, d.log_text()
    finally:
        d.close()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("SELECT value FROM settings WHERE key = 'pinned'").fetchone() == ("7",)
    conn.close()


def test_config_check_notes_a_database_disk_already_under_the_floor(short_tmp):
    """helper-170: on a disk with less free than [storage] min_free_mb the daemon stores no sample from its start, and
    config check said only `ok`. It notes it (exit 0: the daemon runs, commands are stored)."""
    from click.testing import CliRunner

    from controller.daemon import main as daemon_main
    args = ["config", "check", "--db", str(short_tmp / "a.db"), "--socket", str(short_tmp / "c.sock")]
    short = CliRunner().invoke(daemon_main.main, [*args, "--set", f"storage.min_free_mb={NO_ROOM_MB:.0f}"])
    assert short.exit_code == 0, short.output
    assert "database disk nearly full: " in short.stderr and f"in {short_tmp}, under the" in short.stderr, short.output
    roomy = CliRunner().invoke(daemon_main.main, [*args, "--set", "storage.min_free_mb=0"])
    assert roomy.exit_code == 0 and "nearly full" not in roomy.stderr, roomy.output
