"""specctl status with the daemon down, after a run that left no stop on record (helper-164): a SIGKILL or the OOM
killer writes no line anywhere, and the offline status read as after a clean stop."""
import json
import signal

from click.testing import CliRunner

from controller.cli.main import cli
from state.db import open_store
from state.items import INSERTS, event_item
from tests.daemon_proc import DaemonProc

KILLED = "ended without a stop on record"


def _problems(db, sock) -> tuple[int, list[str]]:
    res = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(sock), "status", "--json"])
    return res.exit_code, json.loads(res.stdout)["daemon"]["problems"]


def _events(db, rows) -> None:
    store = open_store(db)
    for kind, detail in rows:
        store.conn.execute(INSERTS["events"], event_item(kind, detail)[1])
    store.conn.commit()
    store.conn.close()


def test_status_after_a_sigkilled_daemon_says_the_run_ended_without_a_stop(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "4", speed=40)
    try:
        d.wait_socket()
        pid = d.proc.pid
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
        d.log.close()
    res = CliRunner().invoke(cli, ["--db", str(d.db), "--socket", str(d.socket), "status"])
    lines = [line for line in res.stdout.splitlines() if line.startswith("problem:")]
    assert res.exit_code == 3 and len(lines) == 1, res.output
    assert f"the last run (pid {pid}) {KILLED}: killed (SIGKILL" in lines[0], lines


def test_a_clean_stop_an_error_and_no_start_say_no_such_thing(tmp_path):
    cases = {"stopped": [("start", "engine=sim pid=7"), ("stop", "SIGTERM: exit 0")],
             "error": [("start", "engine=sim pid=7"), ("error", "SGLang exited 1")],
             "never started": [("pin", "5")]}
    for name, rows in cases.items():
        db = tmp_path / f"{name}.db"
        _events(db, rows)
        code, problems = _problems(db, tmp_path / "none.sock")
        assert code == 3 and not any(KILLED in p for p in problems), (name, problems)


def test_a_start_after_a_clean_stop_with_no_stop_of_its_own_is_the_one_named(tmp_path):
    db = tmp_path / "x.db"
    _events(db, [("start", "engine=sim pid=7"), ("stop", "SIGTERM: exit 0"), ("start", "engine=sim pid=8")])
    code, problems = _problems(db, tmp_path / "none.sock")
    assert code == 3 and problems == [f"the last run (pid 8) {KILLED}: killed (SIGKILL, the OOM killer), crashed "
                                      "or its final writes lost; a start resumes from its last checkpoint"], problems


def test_a_daemon_still_starting_is_not_said_to_have_ended(tmp_path):
    from state.lock import DaemonLock
    db = tmp_path / "x.db"
    _events(db, [("start", "engine=sim pid=8")])
    lock = DaemonLock(str(db))
    lock.acquire(None)      # (this process holds it, as a daemon loading its engine does)
    try:
        code, problems = _problems(db, tmp_path / "none.sock")
    finally:
        lock.release()
    assert code == 4 and not any(KILLED in p for p in problems), problems



def test_a_daemon_still_starting_whose_lock_this_user_cannot_read_is_not_said_to_have_ended(short_tmp):
    """An operator of the service's group reads the database (0640) but not the lock file (0600, the service user's):
    who holds it cannot be told, so a start still loading its engine is not said to have ended (the unreadable lock
    was taken for no daemon: 'the last run (pid N) ended without a stop on record' while N loaded its engine)."""
    import os

    from state.lock import DaemonLock
    from tests.test_denied_step import NOBODY
    os.chmod(short_tmp, 0o755)
    db = short_tmp / "x.db"
    _events(db, [("start", "engine=sim pid=8")])
    for p in short_tmp.iterdir():
        os.chmod(p, 0o644)
    lock = DaemonLock(str(db))
    lock.acquire(None)      # (a daemon loading its engine: its start event written, its socket not open yet)
    _problems(db, short_tmp / "none.sock")      # (imports cached before acting as another user)
    root = os.geteuid() == 0
    try:
        os.chmod(lock.path, 0o600 if root else 0)       # (root reads any file: this user is then nobody)
        if root:
            os.setegid(NOBODY)
            os.seteuid(NOBODY)
        try:
            code, problems = _problems(db, short_tmp / "none.sock")
        finally:
            if root:
                os.seteuid(0)
                os.setegid(0)
    finally:
        os.chmod(lock.path, 0o600)
        lock.release()
    assert not any(KILLED in p for p in problems), problems
