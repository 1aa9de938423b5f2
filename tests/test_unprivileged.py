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
        try:      # EACCES, and the step a folder of the user's own asks (helper-168)
            yield d, f"{os.strerror(13)} (the folder {d} is yours but its mode 555 refuses you: chmod u+rwx {d})"
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
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [       # (helper-172: 1, restarted for good)
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


@pytest.fixture
def port_start(tmp_path, monkeypatch):
    """The kernel's lowest unprivileged port, 1024, whatever this host's sysctl says (a container may set 0)."""
    from controller.daemon import preflight
    (tmp_path / "start").write_text("1024\n")
    monkeypatch.setattr(preflight, "PORT_START", tmp_path / "start")


def test_a_privileged_metrics_port_is_a_config_error_saying_why_and_a_taken_one_is_not(port_start):
    """The unit's user may not bind --metrics-port 80: it was 'metrics port 80: Permission denied', exit 1, which
    systemd restarted every 5 s for ever. A port another process holds may come free: exit 1 as before."""
    import errno

    from controller.daemon.preflight import port_taken
    refused = port_taken(80, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    assert refused.code == 2 and str(refused) == (
        "metrics port 80: Permission denied (below 1024: only root or CAP_NET_BIND_SERVICE may bind it, and the unit's "
        "user has neither; choose a port from 1024 up)")
    taken = port_taken(80, OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE)))
    assert taken.code == 1 and str(taken) == "metrics port 80: Address already in use"
    other = port_taken(9464, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))     # (a security module's)
    assert other.code == 1 and str(other) == "metrics port 9464: Permission denied"


@pytest.mark.parametrize("port,noted", [(80, True), (1023, True), (1024, False), (9464, False)])
def test_config_check_notes_a_metrics_port_the_units_user_may_not_bind(port_start, port, noted):
    """config check runs as root, for whom any port binds; the service's user then failed at every start. (A user not
    root who may not bind it is refused as run refuses it: the test below.)"""
    from click.testing import CliRunner

    from controller.daemon.main import main
    res = CliRunner().invoke(main, ["config", "check", "--set", f"control.metrics_port={port}"])
    if os.geteuid() != 0 and port < _kernel_port_start():
        assert res.exit_code == 2, res.output
        return
    note = f"spec-controller: note: [control] metrics_port = {port}: below 1024: only root or CAP_NET_BIND_SERVICE"
    assert res.exit_code == 0 and (note in res.stderr) == noted, res.output


def _kernel_port_start() -> int:
    from pathlib import Path
    return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())


def test_config_check_refuses_a_metrics_port_this_user_may_not_bind_as_run_does(short_tmp):
    """helper-142: as a user not root, `config check --metrics-port 80` said ok (exit 0, a note about the unit's user)
    and `run --metrics-port 80` then refused it (exit 2): the check is 'ok, or the refusal run would give'. As root,
    acted out as nobody (whose effective capabilities are gone with its euid)."""
    import contextlib

    from click.testing import CliRunner

    import controller.daemon.metrics  # noqa: F401  (the bind's imports cached before acting as nobody: this
    from controller.daemon.main import main           # Python may live in /root)
    from tests.test_group_access import NOBODY, acting_as
    start = _kernel_port_start()
    if start <= 1:
        pytest.skip(f"every port is unprivileged here (ip_unprivileged_port_start = {start})")
    short_tmp.chmod(0o777)
    (short_tmp / "empty.toml").write_text("")
    args = ["config", "check", "--config", str(short_tmp / "empty.toml"), "--db", str(short_tmp / "v.db"),
            "--socket", str(short_tmp / "c.sock"), "--metrics-port", str(start - 1)]
    assert CliRunner().invoke(main, args[:-2]).exit_code == 0          # (imports cached before acting as nobody)
    with acting_as(NOBODY, []) if os.geteuid() == 0 else contextlib.nullcontext():
        res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.strip().splitlines() == [
        f"spec-controller: metrics port {start - 1}: Permission denied (below {start}: only root or "
        f"CAP_NET_BIND_SERVICE may bind it, and the unit's user has neither; choose a port from {start} up)"], res.output
    assert not (short_tmp / "v.db").exists()


def test_run_refuses_a_privileged_metrics_port_before_anything_starts(short_tmp):
    """The real bind, as a user not root (root binds any port: nothing to refuse there)."""
    from pathlib import Path
    if os.geteuid() == 0:
        pytest.skip("root binds a port below the unprivileged range; the refusal is a user's without the capability")
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 1:
        pytest.skip(f"every port is unprivileged here (ip_unprivileged_port_start = {start})")
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "v.db"), "--socket", str(short_tmp / "c.sock"),
                          "--metrics-port", str(start - 1))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"spec-controller: metrics port {start - 1}: Permission denied (below {start}: only root or "
        f"CAP_NET_BIND_SERVICE may bind it, and the unit's user has neither; choose a port from {start} up)"], res.stderr
    assert not (short_tmp / "v.db").exists()


def test_config_check_refuses_a_metrics_address_this_host_does_not_have_as_run_does(short_tmp):
    """helper-145: `--metrics-addr` of another host: check said ok, run refused ('Cannot assign requested address'). A
    port another process holds stays no refusal for the check (the running daemon's own metrics server)."""
    import socket

    from click.testing import CliRunner

    from controller.daemon.main import main
    (short_tmp / "empty.toml").write_text("")
    base = ["config", "check", "--config", str(short_tmp / "empty.toml"), "--db", str(short_tmp / "v.db"),
            "--socket", str(short_tmp / "c.sock")]
    res = CliRunner().invoke(main, [*base, "--metrics-port", "9187", "--set", "control.metrics_addr=192.0.2.7"])
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        "spec-controller: metrics address 192.0.2.7 ([control] metrics_addr), port 9187: Cannot assign requested "
        "address (no interface of this host has it)"], res.output
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        res = CliRunner().invoke(main, [*base, "--metrics-port", str(held.getsockname()[1])])
    assert res.exit_code == 0 and ": ok (" in res.stdout, res.output
