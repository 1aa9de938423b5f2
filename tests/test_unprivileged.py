"""What the daemon meets where it may not write, as the unit's user (spec-controller, not root) or an operator's
own account does. A user not root is stopped by a directory's mode; root by nothing but a read-only mount: each
test takes the one its user has (a 0555 directory, or as root a read-only tmpfs, skipped where none mounts)."""
import os
import subprocess

import pytest

from tests.test_daemon_e2e import run_daemon_once


@pytest.fixture
def unwritable(short_tmp):
    """(a directory this user may enter and not write in, the error a write there gets)."""
    d = short_tmp / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        try:
            yield d, os.strerror(13)                    # EACCES
        finally:
            d.chmod(0o755)                              # (so that short_tmp can be removed)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("root writes whatever the mode, and no read-only tmpfs can be mounted here")
    try:
        yield d, os.strerror(30)                        # EROFS
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_socket_in_a_directory_this_user_may_not_write_is_refused_before_anything_starts(short_tmp, unwritable):
    """--socket /run/x.sock, as a user not root: the preflight asked only whether a missing directory could be made,
    so an existing one it may not write in passed; the database was made, the engine started (SGLang: minutes on the
    GPUs) and the bind then failed with 'start-up failed: PermissionError: [Errno 13] Permission denied'."""
    d, why = unwritable
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "v.db"), "--socket", str(d / "c.sock"))
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        f"spec-controller: cannot create the control socket in {d}: {why}"], res.stderr
    assert not (short_tmp / "v.db").exists()            # refused before the database, and so before the engine


def test_a_bind_refused_after_the_preflight_names_the_control_socket(short_tmp, unwritable):
    """The directory changed between the preflight and the bind (the preflight is bypassed here): the line names the
    socket, where it was a bare 'start-up failed: PermissionError: [Errno 13] Permission denied'."""
    from controller.daemon.lifecycle import Daemon
    from controller.daemon.preflight import Fatal
    from tests.fakes import make_service
    d, why = unwritable
    svc, writer = make_service(short_tmp)
    svc.cfg["control"]["socket"] = str(d / "c.sock")
    try:
        with pytest.raises(Fatal) as e:
            Daemon(svc.cfg)._start(svc.engine, svc, writer)
    finally:
        svc.ingest.stop()
    assert str(e.value) == f"control socket {d / 'c.sock'}: {why}"
