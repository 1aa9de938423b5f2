"""A refused connect names what to do: the group where the socket is another user's, chmod where the part of the path
that refuses is the user's own (helper-164: a state folder at mode 000 said 'run as root or a member of its group')."""
import contextlib
import os
import socket

import pytest
from click.testing import CliRunner

from controller.cli.main import cli

NOBODY = 65534


@contextlib.contextmanager
def _as_owner(*paths):
    """The test's user owns paths; as root (whom no mode refuses) that user is nobody, acted out with seteuid."""
    if os.geteuid() != 0:
        yield
        return
    for p in paths:
        os.chown(p, NOBODY, NOBODY)
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def bound(short_tmp):
    os.chmod(short_tmp, 0o755)      # (nobody passes into the test's folder)
    state = short_tmp / "state"
    state.mkdir()
    path = state / "control.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        sock.listen(1)
        _status(short_tmp / "none.sock")        # imports cached before acting as nobody (this Python may live in /root)
        yield state, path
    os.chmod(state, 0o700)


def _status(path):
    return CliRunner().invoke(cli, ["--socket", str(path), "--db", str(path.parent / "none.db"), "status"])


def test_own_folder_at_000_names_chmod_on_the_folder(bound):
    state, path = bound
    with _as_owner(state, path):
        os.chmod(state, 0)
        res = _status(path)
        os.chmod(state, 0o700)
    assert res.exit_code == 1, res.output
    assert res.output.strip() == (f"specctl: permission denied on {path} (the folder {state} is yours but its mode 0 "
                                  f"refuses you: chmod u+rwx {state})"), res.output


def test_own_socket_without_write_names_chmod_on_the_socket(bound):
    state, path = bound
    with _as_owner(state, path):
        os.chmod(path, 0o500)
        res = _status(path)
    assert res.exit_code == 1, res.output
    assert res.output.strip() == (f"specctl: permission denied on {path} (the socket {path} is yours but its mode 500 "
                                  f"refuses you: chmod u+rw {path})"), res.output


def test_another_users_socket_keeps_the_group_advice(bound):
    state, path = bound
    if os.geteuid() != 0:
        pytest.skip("a socket of another user needs root to make")
    os.chmod(path, 0o660)
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        res = _status(path)
    finally:
        os.seteuid(0)
        os.setegid(0)
    assert res.exit_code == 1, res.output
    assert res.output.strip() == f"specctl: permission denied on {path} (run as root or a member of its group)"
