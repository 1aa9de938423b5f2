"""The daemon's database and control socket removed or replaced under it (`rm -rf` of its state directory while it
ran, helper-113): it ran on unreachable, writing into a database no one could open again. Now it exits 1 naming the
file, as for a dead engine, and systemd starts it on fresh files; untouched files keep it running."""
import os
import subprocess
from pathlib import Path

import pytest

from controller.daemon.ownfiles import OwnFiles
from tests.daemon_proc import DaemonProc


def own_files(tmp_path: Path) -> tuple[OwnFiles, Path, Path]:
    """A state directory's database and socket (plain files here), remembered: (files, database, socket)."""
    state = tmp_path / "state"
    state.mkdir()
    db, sock = state / "state.db", state / "ctl.sock"
    db.write_text("x")
    sock.write_text("y")
    files = OwnFiles()
    files.add("database", db)
    files.add("control socket", sock)
    return files, db, sock


def test_own_files_tell_removed_from_replaced_from_untouched(tmp_path):
    files, db, sock = own_files(tmp_path)
    assert files.changed() is None
    db.write_text("rewritten in place")                 # the same file: SQLite writes it in place
    assert files.changed() is None
    sock.unlink()
    assert files.changed() == f"control socket {sock} was removed under the daemon"
    sock.write_text("y")
    (tmp_path / "other").write_text("z")
    os.replace(tmp_path / "other", sock)
    assert files.changed() == f"control socket {sock} was replaced under the daemon"


def test_a_state_directory_replaced_by_a_file_is_removed(tmp_path):
    """lstat through a directory that is now a regular file raises NotADirectoryError, which the `unreadable` branch
    took as no proof of anything: the daemon ran on with both its files gone (helper-115's mutation pass). Nothing is
    at the path: removed, as for ENOENT."""
    files, db, sock = own_files(tmp_path)
    db.unlink()
    sock.unlink()
    db.parent.rmdir()
    db.parent.write_text("a file where the state directory was")
    assert files.changed() == f"database {db} was removed under the daemon"


def test_a_state_directory_replaced_by_a_symlink_loop_is_removed(tmp_path):
    """lstat through a symlink loop raises ELOOP, which the `unreadable` branch took as no proof: nothing can be
    reached at the path again, as for a directory replaced by a file."""
    files, db, sock = own_files(tmp_path)
    db.unlink()
    sock.unlink()
    db.parent.rmdir()
    db.parent.symlink_to(db.parent.name)       # state -> state: every lookup through it loops
    assert files.changed() == f"database {db} was removed under the daemon"


def test_an_unreadable_state_directory_is_no_proof_of_removal(tmp_path):
    """A directory whose search permission went (EACCES) still holds the files: the daemon runs on."""
    if os.geteuid() == 0:
        pytest.skip("root searches any directory")
    files, db, sock = own_files(tmp_path)
    db.parent.chmod(0o600)
    try:
        assert files.changed() is None
    finally:
        db.parent.chmod(0o700)

@pytest.mark.parametrize("what", ["database", "control socket", "state directory"])
def test_the_daemon_exits_1_when_its_files_are_removed_under_it(short_tmp, what):
    state = short_tmp / "state"
    state.mkdir()
    d = DaemonProc(state, "--profile", "crossover-b", speed=20)
    try:
        d.wait_socket()
        d.wait_for(lambda st: st["samples"]["written"] > 0, what="samples committed")
        if what == "state directory":
            subprocess.run(["rm", "-rf", str(state)], check=True)
        else:
            (d.db if what == "database" else d.socket).unlink()
        code = d.proc.wait(30)
    finally:
        d.close()
    log = d.log_text(20000) if what != "state directory" else ""
    assert code == 1
    if what != "state directory":      # (its log went with the directory)
        gone = d.db if what == "database" else d.socket
        assert f"{what} {gone} was removed under the daemon; exiting so that the service is restarted" in log, log


def test_a_daemon_whose_database_was_replaced_leaves_the_new_ones_journal_alone(short_tmp):
    """rm -rf of the state directory and a second daemon started on fresh files there (helper-116): the first one's
    drain switched its own, now unlinked, database out of WAL and SQLite then deleted the -wal and -shm *by path*:
    the second daemon's, which failed its start with 'disk I/O error' or ran on with its journal unlinked. The first
    now leaves the database it lost unclosed, and the files at its paths untouched."""
    state, old = short_tmp / "state", short_tmp / "state.old"
    state.mkdir()
    d = DaemonProc(state, "--profile", "crossover-b", speed=20)
    try:
        d.wait_socket()
        d.wait_for(lambda st: st["samples"]["written"] > 0, what="samples committed")
        state.rename(old)                      # (the daemon's log goes with it, still open)
        state.mkdir()
        others = [Path(f"{d.db}{suffix}") for suffix in ("", "-wal", "-shm")]   # a newer daemon's files, stand-ins
        for path in others:
            path.write_bytes(b"")
        code = d.proc.wait(30)
    finally:
        d.close()
    log = (old / "daemon.log").read_text()
    assert code == 1, log
    assert f"database {d.db} was replaced under the daemon" in log, log
    assert [p.name for p in others if not p.exists()] == [], log


def test_a_database_removed_while_the_engine_starts_is_named_at_the_first_check(short_tmp):
    """The database is remembered as opened, before the engine's start (minutes on a GPU), not after it: removed
    meanwhile, the daemon says so once the engine is up (it was 'start-up failed: FileNotFoundError ...')."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from faultkit import fake_sglang_config
    work = short_tmp / "w"
    work.mkdir()
    d = DaemonProc(work, config_text=fake_sglang_config(work, ready_s=4.0), speed=None,
                   env_extra={"STATE_DIRECTORY": str(work), "RUNTIME_DIRECTORY": str(work)})
    try:
        assert d.wait_start_recorded() and not d.socket.exists(), d.log_text()      # written, the engine not ready yet
        d.db.unlink()
        code = d.proc.wait(60)
    finally:
        d.close()
    assert code == 1
    assert f"database {d.db} was removed under the daemon; exiting so that the service is restarted" in d.log_text(), \
        d.log_text()
