"""helper-172: restart loops. What no restart changes (a corrupt database, a newer schema, a mode, a mount, a file in the
way) is exit 2 from `run`, which the unit does not restart (RestartPreventExitStatus=2), with the line `config check`
gives; what a retry may pass (a lock another process holds) stays exit 1, and config check's note."""
import errno
import os
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner

from controller.daemon import main as daemon_main
from state.db import open_store
from tests.conftest import as_nobody
from tests.daemon_proc import ROOT

NOBODY = 65534


def _daemon(tmp, *words: str) -> subprocess.CompletedProcess:
    """The real command in its own process: `run` (the simulator) or `config check`, on tmp's database and socket."""
    (tmp / "e.toml").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("INVOCATION_ID", None)
    extra = ["--concurrency", "2"] if words[0] == "run" else []
    return subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(tmp / "e.toml"), *extra],
                          capture_output=True, text=True, env=env, timeout=120)


def _both(tmp, db):
    args = ["--db", str(db), "--socket", str(tmp / "c.sock")]
    return _daemon(tmp, "run", *args), _daemon(tmp, "config", "check", *args)


def _as_nobody(tmp, *words: str) -> tuple[int, str]:
    """The command in a child process acting as nobody where the test runs as root (whom no mode refuses; this
    interpreter may live in /root, which nobody cannot enter: the child runs what the parent imported, in-process)."""
    import controller.daemon.service  # noqa: F401  (run's imports, before nobody cannot read them)
    import controller.daemon.engines.sim  # noqa: F401
    (tmp / "e.toml").write_text("")
    (sockets := tmp / "s").mkdir(mode=0o700, exist_ok=True)     # (the control socket's folder: nobody's own)
    if os.geteuid() == 0:
        os.chown(sockets, NOBODY, NOBODY)
    args = [*words, "--config", str(tmp / "e.toml"), "--socket", str(sockets / "c.sock")] + \
        (["--concurrency", "2"] if words[0] == "run" else [])
    CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(tmp / "e.toml"), "--db",
                                          str(tmp / "warm.db"), "--socket", str(tmp / "c.sock")])
    def answer():
        res = CliRunner(env={"XDG_STATE_HOME": str(tmp / "state")}).invoke(daemon_main.main, args)
        return (res.exit_code, res.stderr)
    return as_nobody(answer)


def _newer(db):
    store = open_store(db)
    store.execute("PRAGMA user_version=7")
    store.conn.close()
    return db


def _corrupt(db):
    from tests.test_state import damaged_store
    return damaged_store(db)


def _other_app(db):
    from tests.test_review_h114 import _sqlite_file
    _sqlite_file(db, 0)
    return db


@pytest.mark.parametrize("make,said", [
    (_corrupt, "is corrupt (database disk image is malformed); move it aside to start afresh"),
    (_newer, "schema version 7 is newer than this spec-controller knows (1): a newer version wrote it; upgrade "
             "spec-controller, or give another --db"),
    (_other_app, "it belongs to another application (tables: accounts); refusing it")])
def test_a_database_no_restart_changes_is_exit_2_from_run_and_check_in_one_line(short_tmp, make, said):
    """run exited 1 on a corrupt database and on one of a newer schema (a downgrade): the unit restarted it every 5 s
    for good. config check printed a traceback on the corrupt one and said ok of the newer one; another application's
    file ended 'refusing to add tables to it' from run, 'refusing it' from check."""
    db = make(short_tmp / "x.db")
    before = db.read_bytes()
    run, check = _both(short_tmp, db)
    line = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(line) == 1 and line[0].endswith(said), run.stderr
    assert check.returncode == 2 and check.stdout == "" and check.stderr.strip().splitlines() == line, check.stderr
    assert db.read_bytes() == before and not (short_tmp / "x.db.lock").exists()


def test_a_database_another_process_locks_is_exit_1_from_run_and_a_note_from_check(short_tmp):
    """A lock passes: run exits 1 (the unit retries in 5 s), config check says ok and notes it."""
    db = short_tmp / "x.db"
    store = open_store(db)
    store.execute("PRAGMA journal_mode=DELETE")     # (a rollback journal: an exclusive lock keeps readers out too)
    store.conn.close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        run, check = _both(short_tmp, db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    line = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(line) == 1 and f"database {db} is locked by another process" in line[0], run.stderr
    assert check.returncode == 0 and check.stdout.strip().endswith("; policy bandit)"), check.stderr
    assert f"could not be read: database {db} is locked by another process" in check.stderr, check.stderr


@pytest.fixture
def closed_folder(short_tmp):
    """A folder this user may enter but not write in (root acts as nobody: no mode refuses root)."""
    os.chmod(short_tmp, 0o755)
    folder = short_tmp / "f"
    folder.mkdir(mode=0o555)
    yield folder
    folder.chmod(0o755)


def test_a_database_folder_this_user_may_not_write_is_exit_2_naming_what_to_do(short_tmp, closed_folder):
    """'lock file ... cannot be created in ... (Permission denied)' was exit 1, restarted every 5 s for good."""
    db = closed_folder / "x.db"
    code, said = _as_nobody(short_tmp, "run", "--db", str(db))
    remedy = ("; let this user write there (its owner, its mode), or give another --db" if os.geteuid() == 0 else
              f" (the folder {closed_folder} is yours but its mode 555 refuses you: chmod u+rwx {closed_folder})")
    assert code == 2 and said.strip().splitlines() == [     # (as root the child is nobody: root's folder, not its own)
        f"spec-controller: lock file {db}.lock cannot be created in {closed_folder} (Permission denied){remedy}"], said
    code, said = _as_nobody(short_tmp, "config", "check", "--db", str(db))
    assert code == 2 and "Permission denied" in said, said
    assert not db.exists()


def test_a_folder_that_takes_no_journal_beside_a_writable_database_is_exit_2(short_tmp, closed_folder):
    """The database and its lock file writable, their folder not: SQLite cannot make its -wal there ('cannot be opened
    for writing (unable to open database file)', exit 1, restarted for good)."""
    closed_folder.chmod(0o755)
    db = closed_folder / "x.db"
    store = open_store(db)
    store.execute("PRAGMA journal_mode=DELETE")
    store.conn.close()
    (closed_folder / "x.db.lock").write_text("")
    if os.geteuid() == 0:
        for path in (closed_folder, db, closed_folder / "x.db.lock"):
            os.chown(path, NOBODY, NOBODY)
    closed_folder.chmod(0o555)
    code, said = _as_nobody(short_tmp, "run", "--db", str(db))
    line = said.strip().splitlines()
    assert code == 2 and line == [
        f"spec-controller: database {db} cannot be opened for writing: its folder {closed_folder} takes no new file "
        "(SQLite's journals); let this user write there (its owner, its mode), or give another --db"], said
    # (helper-180: config check said 'lock file ... cannot be created', of a lock file there: run's line now, its check)
    assert _as_nobody(short_tmp, "config", "check", "--db", str(db)) == (code, said)


def test_the_split_of_a_refusal_by_errno():
    """One split for every path refusal: a mode, a mount or a file in the way stays (2); a full disk or an I/O error
    may pass (1)."""
    from controller.daemon.preflight import store_refusal
    from state.faults import Lasting, StoreError, refused
    for lasting in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
        assert isinstance(refused("x", lasting), Lasting) and store_refusal(refused("x", lasting)).code == 2
    for passing in (errno.ENOSPC, errno.EIO, errno.EMFILE, errno.EAGAIN, None):
        e = refused("cannot create /x: No space left on device", passing)
        assert type(e) is StoreError and store_refusal(e).code == 1 and str(store_refusal(e)) == str(e)


def test_config_check_opens_the_database_once(short_tmp, monkeypatch):
    """It opened it in its look at the files, then again to read the policy a start resumes."""
    import state.db
    db = short_tmp / "x.db"
    open_store(db).conn.close()
    opened = []
    real = state.db.open_store
    monkeypatch.setattr(state.db, "open_store", lambda *a, **k: opened.append(a) or real(*a, **k))
    (short_tmp / "e.toml").write_text("")
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(short_tmp / "e.toml"), "--db", str(db),
                                                "--socket", str(short_tmp / "c.sock")])
    assert res.exit_code == 0, res.output
    assert len(opened) == 1, opened
