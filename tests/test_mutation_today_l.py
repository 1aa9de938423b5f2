"""Tests for the gaps the mutation pass of 2026-12-06l found in the lines changed since 0b44f5a (the pin's one range,
the privileged metrics port, the control socket's directory, the database's access by effective ids;
bench/results/mutation-today-2026-12-06l.md). Each test is named after the mutants it kills (test_<id>_...). Each was
checked red with its mutant applied and green on the original."""
import errno
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.contract import MAX_BATCH
from state import queries
from state.db import StoreError, leave_wal, open_store
from tests.test_unprivileged import unwritable  # noqa: F401  (a fixture: a directory this user may not write)

EACCES, EROFS = os.strerror(errno.EACCES), os.strerror(errno.EROFS)


# --- cli/options.py Bounded.check, steer.PIN: the contract's largest batch itself is a pin saved offline ----------
def test_op3_an_offline_pin_at_the_contracts_largest_batch_is_saved(short_tmp):
    """PIN.check (no daemon answers) takes 0 .. MAX_BATCH, both ends: `pin 65536` is saved, not refused as out of a
    range that names 65536 as allowed. (OP3 was killed by test_finite.py's --seed 2**32 - 1, at parse; this is the
    offline pin's own check, after the daemon's try.)"""
    db = short_tmp / "off.db"
    open_store(db).conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "threshold", "pin",
                                   str(MAX_BATCH)], prog_name="specctl")
    assert res.exit_code == 0 and res.output == (
        f"daemon is not running: pin {MAX_BATCH} saved to {db}, applied at next start\n"), res.output
    store = open_store(db, readonly=True)
    try:
        assert queries.settings(store).get("pinned") == MAX_BATCH
    finally:
        store.conn.close()


# --- preflight.privileged_port: the kernel's own start, 1024 where it cannot be read, port 0 none -------------------
@pytest.fixture
def port_start_file(tmp_path, monkeypatch):
    """Set the sysctl privileged_port reads: its text, or None for a file that is not there."""
    from controller.daemon import preflight

    def set_to(text: str | None):
        path = tmp_path / "ip_unprivileged_port_start"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(preflight, "PORT_START", path)
    return set_to


def _below(start: int) -> str:
    return (f"below {start}: only root or CAP_NET_BIND_SERVICE may bind it, and the unit's user has neither; choose a "
            f"port from {start} up")


@pytest.mark.parametrize("text,port,start", [
    ("500\n", 499, 500), ("500\n", 500, None), ("500\n", 600, None),        # PF9: the host's sysctl, not 1024
    ("1024\n", 1, 1024), ("1024\n", 0, None),                                # PF6: port 1; PF5: 0 is no metrics port
    (None, 80, 1024), (None, 1024, None),                                    # PF7: no sysctl file: 1024
    ("garbage\n", 80, 1024), ("\n", 1023, 1024)])                            # PF8: unreadable text: 1024
def test_pf5_pf6_pf7_pf8_pf9_a_privileged_port_is_judged_by_the_hosts_start(port_start_file, text, port, start):
    from controller.daemon.preflight import privileged_port
    port_start_file(text)
    assert privileged_port(port) == (_below(start) if start is not None else None)


def test_pf5_config_check_notes_nothing_for_no_metrics_port(port_start_file):
    """metrics_port = 0 (the default) serves no metrics: nothing to bind, no note that 0 is below 1024."""
    from controller.daemon.main import main
    port_start_file("1024\n")
    res = CliRunner().invoke(main, ["config", "check", "--set", "control.metrics_port=0"])
    assert res.exit_code == 0 and "metrics_port" not in res.stderr, res.output


# --- preflight._uncreatable: a directory without search permission; a statvfs that fails ----------------------------
@pytest.mark.skipif(os.geteuid() == 0, reason="root searches any directory: the missing X_OK is a user's")
def test_pf12_a_socket_directory_this_user_may_write_but_not_search_is_refused(short_tmp):
    """A 0666 directory: writable, not searchable, so no socket can be bound in it (nor a directory made)."""
    from controller.daemon.preflight import _uncreatable
    d = short_tmp / "noexec"
    d.mkdir()
    d.chmod(0o666)
    step = f" (the folder {d} is yours but its mode 666 refuses you: chmod u+rwx {d})"      # (helper-168)
    try:
        assert _uncreatable(d) == EACCES + step
        assert _uncreatable(d / "sub") == EACCES + step
    finally:
        d.chmod(0o755)


def test_pf15_a_directory_whose_file_system_cannot_be_asked_is_said_permission_denied(unwritable, monkeypatch):
    """statvfs failing (a fault injected here; the directory is a real one this user may not write in) says nothing
    of a read-only mount: the refusal is the plain 'Permission denied', not 'Read-only file system'."""
    from controller.daemon.preflight import _uncreatable
    d, why = unwritable

    def refused(path):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(os, "statvfs", refused)
    assert _uncreatable(d) == (EACCES if why == EROFS else why)     # (as root: a read-only mount, mode 755: no chmod)


# --- preflight.check_no_clash: the default socket's directory, missing under one this user may not write in --------
def test_pf18_a_missing_socket_directory_under_an_unwritable_one_is_named_as_the_directory(short_tmp, unwritable):
    """The default socket ($XDG_STATE_HOME/spec-controller/control.sock), its directory not there yet and its parent
    one this user may not write in: 'cannot create the control socket's directory', not '... in' a directory that
    does not exist."""
    from tests.daemon_proc import ROOT
    d, why = unwritable
    (short_tmp / "c.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY", "SPECCTL_DB")}
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(short_tmp / "c.toml"),
                          "--db", str(short_tmp / "v.db")], capture_output=True, text=True, timeout=60,
                         env=dict(env, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(d)))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [       # (helper-172: 1, restarted for good)
        f"spec-controller: cannot create the control socket's directory {d / 'spec-controller'}: {why}"], res.stderr
    assert not (short_tmp / "v.db").exists()


# --- lifecycle.Daemon._start: an OSError of the control socket's bind with no errno, and its exit code -------------
def test_lc3_lc5_a_bind_error_without_an_errno_is_named_and_exits_1(short_tmp):
    """ControlServer's OSError without strerror (a path too long for AF_UNIX; the preflight, bypassed here, refuses it
    first) is said by its text, not 'None'; exit 1 as the preflight's own refusal of that directory."""
    from controller.daemon.lifecycle import Daemon
    from controller.daemon.preflight import Fatal
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    sock = short_tmp / ("s" * 120 + ".sock")
    svc.cfg["control"]["socket"] = str(sock)
    try:
        with pytest.raises(Fatal) as e:
            Daemon(svc.cfg)._start(svc.engine, svc, writer)
    finally:
        svc.ingest.stop()
    assert str(e.value) == f"control socket {sock}: AF_UNIX path too long" and e.value.code == 1


# --- state/db._pin_file: who may not even read it is told 'Permission denied', by its effective ids ---------------
def _stranger(short_tmp, db):
    """A user who may neither read nor write db: as root, nobody in no group (acted out by effective ids, as
    tests/test_group_access.py does); otherwise this user, the file made 000."""
    import contextlib

    from tests.test_group_access import NOBODY, acting_as
    if os.geteuid() == 0:
        os.chmod(short_tmp, 0o711)              # (the stranger reaches the file; its 0640 refuses them)
        return acting_as(NOBODY, [])
    os.chmod(db, 0)
    return contextlib.nullcontext()


def test_db3_db6_a_write_by_one_who_may_not_even_read_is_permission_denied(short_tmp):
    """'cannot be opened for writing' is for one who may read and not write (a member of the service's group); one
    who may not read either gets the plain refusal, judged by the effective ids (as open(2) does) also for the read
    look (by the real ids a root process acting as nobody was judged as root, and told it could read)."""
    db = short_tmp / "s.db"
    store = open_store(db)
    leave_wal(store)
    store.conn.close()
    try:
        with _stranger(short_tmp, db):
            with pytest.raises(StoreError) as e:
                open_store(db)
    finally:
        os.chmod(db, 0o640)
    assert str(e.value) == f"database {db}: {EACCES}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a read-only tmpfs and act as another user")
def test_db4_a_read_refused_on_a_read_only_file_system_is_permission_denied(short_tmp):
    """A read refused by the file's mode on a read-only mount: 'Permission denied' (the mount refuses writes only;
    reading is what was asked), not 'Read-only file system'."""
    from tests.test_group_access import NOBODY, acting_as
    mnt = short_tmp / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        db = mnt / "r.db"
        store = open_store(db)
        leave_wal(store)
        store.conn.close()
        os.chmod(db, 0o600)
        os.chmod(short_tmp, 0o711)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        flags = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
        assert CliRunner().invoke(cli, [*flags, "status"]).exit_code == 3     # (imports cached as root)
        with acting_as(NOBODY, []):
            status = CliRunner().invoke(cli, [*flags, "status"])
            with pytest.raises(StoreError) as e:
                open_store(db, readonly=True)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    assert status.exit_code == 1 and status.output == f"specctl: database {db}: {EACCES}\n", status.output
    assert str(e.value) == f"database {db}: {EACCES}"
