"""config check refuses what run's start would refuse at the database's and the control socket's opening (newcomer-146:
check said `ok`, exit 0, and run then refused the database with exit 1: a file that is no SQLite, a read-only database,
a state folder under a file or in a folder this user may not write)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def daemon(tmp: Path, *words: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp / "state"), **(env or {})}
    env.pop("INVOCATION_ID", None)
    return subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(tmp / "empty.toml")],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def tmp(short_tmp):
    (short_tmp / "empty.toml").write_text("")
    return short_tmp


def test_a_database_that_is_no_sqlite_file_is_refused_by_check_as_run_refuses_it(tmp):
    db = tmp / "bad.db"
    db.write_bytes(b"garbage" * 1000)
    args = ["--db", str(db), "--socket", str(tmp / "s")]
    check = daemon(tmp, "config", "check", *args)
    run = daemon(tmp, "run", "--concurrency", "2", *args)
    said = f"spec-controller: {db} is not a spec-controller database (not an SQLite file); refusing it"
    assert run.stderr.strip().splitlines() == [said], run.stderr
    assert check.returncode == 2 and check.stdout == "" and check.stderr.strip().splitlines() == [said], check.stderr
    assert db.read_bytes() == b"garbage" * 1000


def test_an_empty_file_and_a_new_path_pass_the_check(tmp):
    (tmp / "empty.db").write_bytes(b"")
    for db in (tmp / "empty.db", tmp / "new.db"):
        res = daemon(tmp, "config", "check", "--db", str(db), "--socket", str(tmp / "s"))
        assert res.returncode == 0 and "ok" in res.stdout, res.stderr
    assert not (tmp / "new.db").exists()


def test_a_state_folder_under_a_file_is_refused_by_check_as_run_refuses_it(tmp):
    (tmp / "afile").write_text("")
    env = {"XDG_STATE_HOME": str(tmp / "afile")}
    check = daemon(tmp, "config", "check", env=env)
    run = daemon(tmp, "run", "--concurrency", "2", env=env)
    assert run.returncode != 0 and "Not a directory" in run.stderr, run.stderr
    lines = check.stderr.strip().splitlines()
    assert check.returncode == 2 and len(lines) == 1 and "Not a directory" in lines[0], check.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes any file and folder")
def test_a_database_this_user_may_not_write_is_refused_by_check_as_run_refuses_it(tmp):
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        args = ["--db", str(ro / "x.db"), "--socket", str(tmp / "s")]
        check = daemon(tmp, "config", "check", *args)
        run = daemon(tmp, "run", "--concurrency", "2", *args)
        assert run.returncode != 0 and "Permission denied" in run.stderr, run.stderr
        lines = check.stderr.strip().splitlines()
        assert check.returncode == 2 and len(lines) == 1 and "Permission denied" in lines[0], check.stderr
    finally:
        ro.chmod(0o755)
    db = tmp / "r.db"
    db.write_bytes(b"")
    db.chmod(0o444)
    check = daemon(tmp, "config", "check", "--db", str(db), "--socket", str(tmp / "s"))
    assert check.returncode == 2 and "cannot be opened for writing" in check.stderr, check.stderr


@pytest.mark.parametrize("plant", ["fifo lock", "linked wal", "folder shm"])
def test_what_run_refuses_beside_the_database_is_refused_by_check(tmp, plant):
    """The lock file and SQLite's journals beside the database, seen without opening them (lstat): a FIFO at the lock
    file, a symbolic link at -wal, a folder at -shm. run refused each at its opening, exit 1, after check said ok.
    helper-172: run's exit is 2 (no restart removes them; exit 1 was restarted every 5 s for good), check's line."""
    db = tmp / "x.db"
    db.write_bytes(b"")
    if plant == "fifo lock":
        os.mkfifo(f"{db}.lock")
    elif plant == "linked wal":
        (tmp / "elsewhere").write_text("")
        os.symlink(tmp / "elsewhere", f"{db}-wal")
    else:
        os.mkdir(f"{db}-shm")
    args = ["--db", str(db), "--socket", str(tmp / "s")]
    check = daemon(tmp, "config", "check", *args)
    run = daemon(tmp, "run", "--concurrency", "2", *args)
    said = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(said) == 1, run.stderr
    assert check.returncode == 2 and check.stdout == "" and check.stderr.strip().splitlines() == said, check.stderr
