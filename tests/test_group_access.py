"""The access the unit promises operators in the service's group, acted out with a real daemon:
socket 0660 in a 0750 directory, database 0640 as the daemon creates it. A member reads status live and, once the daemon
has stopped, from the database (no write access to the directory needed); anyone else gets one
line. Needs root (to act as other users); skipped otherwise."""
import contextlib
import os

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from tests.daemon_proc import DaemonProc

GROUP, NOBODY = 4242, 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@contextlib.contextmanager
def acting_as(uid: int, groups: list[int]):
    saved = os.getgroups()
    os.setgroups(groups)
    os.setegid(groups[0] if groups else NOBODY)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(saved)


def _status(d):
    return CliRunner().invoke(cli, ["--socket", str(d.socket), "--db", str(d.db), "status"])


def test_members_of_the_group_use_specctl_without_root_and_others_get_one_line(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        d.wait_for(lambda st: st["samples"]["total"] > 20, what="samples")
        os.chown(short_tmp, 0, GROUP)
        os.chmod(short_tmp, 0o750)
        os.chown(d.socket, 0, GROUP)
        _status(d)                          # imports cached before acting as nobody
        with acting_as(NOBODY, [GROUP]):
            member = _status(d)
        with acting_as(NOBODY, []):
            stranger = _status(d)
    finally:
        assert d.stop() == 0
    assert member.exit_code == 0 and "daemon:      running" in member.stdout, member.output
    assert stranger.exit_code == 1
    assert stranger.output.strip().splitlines() == [
        f"specctl: permission denied on {d.socket} (run as root or a member of its group)"]
    assert _status(d).exit_code == 3      # as root first: imports cached (this Python may live in /root)
    assert not os.path.exists(f"{d.db}-wal") and not os.path.exists(f"{d.db}-shm")
    os.chown(d.db, 0, GROUP)                # (the unit's daemon creates it in its own group; its mode is the daemon's)
    with acting_as(NOBODY, [GROUP]):
        offline = _status(d)
    assert offline.exit_code == 3, offline.output
    assert "NOT RUNNING" in offline.stdout and "tok/s" in offline.stdout


def test_a_member_still_reads_the_database_after_an_offline_pin(short_tmp):
    """helper-82: the README's offline change (service stopped, `sudo -u spec-controller specctl threshold pin N`)
    opened the database as the daemon does, in WAL, and left it so: a member could then open it only with a -shm file
    it may not create in the 0750 folder ('cannot be opened for writing' on a read), until the daemon's next clean
    stop."""
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        d.wait_for(lambda st: st["samples"]["total"] > 20, what="samples")
    finally:
        assert d.stop() == 0
    os.chown(short_tmp, 0, GROUP)
    os.chmod(short_tmp, 0o750)
    os.chown(d.db, 0, GROUP)
    flags = ["--socket", str(d.socket), "--db", str(d.db)]
    assert _status(d).exit_code == 3                        # (imports cached as root)
    pin = CliRunner().invoke(cli, [*flags, "threshold", "pin", "5"])    # as the service's user (here root)
    assert pin.exit_code == 0 and "saved" in pin.output, pin.output
    assert not os.path.exists(f"{d.db}-wal") and not os.path.exists(f"{d.db}-shm")
    with acting_as(NOBODY, [GROUP]):
        status = _status(d)
        history = CliRunner().invoke(cli, [*flags, "history"])
    assert status.exit_code == 3 and "threshold:   5 (pinned" in status.stdout, status.output
    assert history.exit_code == 0, history.output


def test_a_database_left_in_wal_says_why_a_member_cannot_read_it(short_tmp):
    """A daemon killed (no clean stop) leaves the database in WAL: a member's read says so, not 'cannot be opened for
    writing' (it asked to read)."""
    import sqlite3
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
    finally:
        assert d.stop() == 0
    os.chown(short_tmp, 0, GROUP)
    os.chmod(short_tmp, 0o750)
    os.chown(d.db, 0, GROUP)
    assert _status(d).exit_code == 3
    conn = sqlite3.connect(d.db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    with acting_as(NOBODY, [GROUP]):
        status = _status(d)
    assert status.exit_code == 1 and status.output.startswith(
        f"specctl: database {d.db} cannot be read by this user (attempt to write a readonly database): it is in WAL "
        f"mode"), status.output
