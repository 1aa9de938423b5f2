"""helper-176: review of helper-172's split of store failures into what a restart may pass (exit 1) and what only the
operator changes (exit 2). A folder gone meanwhile is retried; a file at the database folder's path, and a journal
this user may not write (root's, restored with the database), are exit 2 with run's line, which config check gives too;
config check words a database folder this user may not write as run does."""
import errno
import os
import subprocess
import sys

import pytest

from controller.daemon.preflight import store_refusal
from state.db import open_nofollow, open_store
from state.faults import Lasting, StoreError
from tests.daemon_proc import ROOT
from tests.test_review_h172 import NOBODY, _as_nobody

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="acts as nobody: needs root")


def test_a_file_whose_folder_vanished_before_its_open_is_retried_not_kept_down(short_tmp):
    """The start makes the folder, then the file in it: a folder removed in between (a clean-up racing a restart) was
    'cannot be created there', Lasting, exit 2, and the unit stayed down; a restart makes the folder again."""
    with pytest.raises(StoreError) as err:
        open_nofollow(short_tmp / "gone" / "x.db", os.O_RDWR | os.O_CREAT, "database")
    assert not isinstance(err.value, Lasting) and store_refusal(err.value).code == 1
    assert str(err.value) == f"database {short_tmp}/gone/x.db cannot be created: its folder {short_tmp}/gone vanished"


def _proc_create_errno() -> int:
    """What this kernel answers this user creating a file in /proc: ENOENT for root, and for a user on Linux 6.18;
    EACCES for a user on older kernels (a permission refusal, worded as one elsewhere)."""
    try:
        os.close(os.open("/proc/h176-probe.db", os.O_RDWR | os.O_CREAT))
    except OSError as e:
        return e.errno
    return 0


@pytest.mark.skipif(_proc_create_errno() != errno.ENOENT, reason="this kernel refuses this user's file in /proc "
                                                                 "otherwise than with ENOENT")
def test_a_folder_that_takes_no_file_stays_exit_2_naming_what_to_do():
    with pytest.raises(Lasting) as err:
        open_nofollow(__import__("pathlib").Path("/proc/h176.db"), os.O_RDWR | os.O_CREAT, "database")
    assert str(store_refusal(err.value)) == ("database /proc/h176.db cannot be created there (No such file or "
                                             "directory); give a --db on a file system that takes new files")


def _env(tmp):
    (tmp / "e.toml").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("INVOCATION_ID", None)
    return env


def test_a_file_at_the_database_folders_path_is_exit_2_from_run_with_checks_line(short_tmp):
    """$XDG_STATE_HOME/spec-controller a file: run said 'cannot create ...: File exists', exit 1, restarted every 5 s
    for good; config check refused it, exit 2, in other words."""
    (short_tmp / "state").mkdir()
    (short_tmp / "state" / "spec-controller").write_text("")
    env = _env(short_tmp)
    said = {}
    for words in (["run", "--concurrency", "2"], ["config", "check"]):
        res = subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(short_tmp / "e.toml"),
                              "--socket", str(short_tmp / "c.sock")], capture_output=True, text=True, env=env,
                             timeout=120)
        said[words[0]] = (res.returncode, res.stderr.strip().splitlines())
    line = [f"spec-controller: cannot create {short_tmp}/state/spec-controller: Not a directory; give another --db"]
    assert said == {"run": (2, line), "config": (2, line)}, said


@root_only
@pytest.mark.parametrize("journal", ["-wal", "-journal"])
def test_a_journal_this_user_may_not_write_is_exit_2_from_run_and_check_in_one_line(short_tmp, journal):
    """A -wal root restored with the database (0644, root's): run started and failed every write ('database read-only',
    the stop 'not flushed'); a -journal root left: run exited 1 ('unable to open database file'), restarted for good.
    config check said ok of both (of the second with a note calling it WAL mode)."""
    os.chmod(short_tmp, 0o755)
    folder = short_tmp / "f"
    folder.mkdir()
    db = folder / "x.db"
    store = open_store(db)
    store.execute("PRAGMA journal_mode=DELETE")
    store.conn.close()
    (folder / "x.db.lock").unlink(missing_ok=True)
    for path in (folder, db):
        os.chown(path, NOBODY, NOBODY)
    side = folder / f"x.db{journal}"
    side.write_bytes(b"")
    side.chmod(0o644)
    line = [f"spec-controller: database journal {side}: Permission denied; let this user write there (its owner, its "
            "mode), or give another --db"]
    for words in (["run"], ["config", "check"]):
        code, said = _as_nobody(short_tmp, *words, "--db", str(db))
        assert (code, said.strip().splitlines()) == (2, line), (words, said)
    assert side.read_bytes() == b"" and not (folder / "x.db.lock").exists()


@root_only
def test_config_check_words_a_database_folder_this_user_may_not_write_as_run_does(short_tmp):
    """check said 'cannot create the database's files in F: Permission denied', naming nothing to do; run's line names
    it (helper-172's README: one line naming what to do, from run as from config check)."""
    os.chmod(short_tmp, 0o755)
    folder = short_tmp / "f"
    folder.mkdir(mode=0o555)
    try:
        db = folder / "x.db"
        run = _as_nobody(short_tmp, "run", "--db", str(db))
        check = _as_nobody(short_tmp, "config", "check", "--db", str(db))
    finally:
        folder.chmod(0o755)
    line = [f"spec-controller: lock file {db}.lock cannot be created in {folder} ({os.strerror(errno.EACCES)}); let "
            "this user write there (its owner, its mode), or give another --db"]
    assert (run[0], run[1].strip().splitlines()) == (2, line), run
    assert (check[0], check[1].strip().splitlines()) == (2, line), check
