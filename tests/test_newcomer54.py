"""newcomer-54: what a first-time operator met following the README.

1. On a host with the service, a user outside its group (before the new login the README's `usermod -aG` needs) runs
   the README's simulator in a clone: `specctl status` and `specctl stop` took the service's socket and said only
   "permission denied", nothing about the user's own daemon running beside it.
2. `spec-controller status` / `stop` / `start` said "no such command" with the daemon's two commands, not where the
   operator's commands are (specctl) or how the daemon is started (run)."""
from __future__ import annotations

import socket as socketlib
import types

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli import client, common
from controller.cli.main import cli
from controller.daemon.main import main as daemon_main


@pytest.fixture
def refused_service(short_tmp, monkeypatch):
    """The service's socket under short_tmp/unit, refusing this user (EACCES, as for one outside its group, also
    when the tests run as root); the user's state under short_tmp/home."""
    unit = short_tmp / "unit"
    unit.mkdir()
    for module in (paths, common):
        monkeypatch.setattr(module, "UNIT_SOCKET", unit / "control.sock")
        monkeypatch.setattr(module, "UNIT_DB", unit / "spec-controller.db")
    service = socketlib.socket(socketlib.AF_UNIX)
    service.bind(str(unit / "control.sock"))

    class Refusing(socketlib.socket):
        def connect(self, address):
            if str(address) == str(unit / "control.sock"):
                raise PermissionError(13, "Permission denied")
            return super().connect(address)

    monkeypatch.setattr(client, "socket", types.SimpleNamespace(
        socket=Refusing, AF_UNIX=socketlib.AF_UNIX, SOCK_STREAM=socketlib.SOCK_STREAM))
    yield short_tmp / "home", unit / "control.sock"
    service.close()


def _specctl(home, *args):
    return CliRunner().invoke(cli, list(args), env={"XDG_STATE_HOME": str(home), "SPECCTL_DB": None,
                                                   "SPECCTL_SOCKET": None, "RUNTIME_DIRECTORY": None,
                                                   "STATE_DIRECTORY": None})


@pytest.mark.parametrize("command", [["status"], ["stop"], ["threshold", "pin", "5"]])
def test_a_refused_service_socket_names_the_users_own_daemon(refused_service, command):
    home, unit_socket = refused_service
    own = home / "spec-controller" / "control.sock"
    own.parent.mkdir(parents=True)
    with socketlib.socket(socketlib.AF_UNIX) as mine:
        mine.bind(str(own))
        mine.listen(1)
        res = _specctl(home, *command)
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert "\n" not in line, res.output
    assert line.startswith(f"specctl: permission denied on {unit_socket} (run as root or a member of its group)")
    assert f"your own daemon's socket is {own}: specctl --socket {own}" in line, line


def test_no_own_daemon_no_hint_and_a_given_socket_no_hint(refused_service):
    home, unit_socket = refused_service
    expected = f"specctl: permission denied on {unit_socket} (run as root or a member of its group)"
    res = _specctl(home, "status")
    assert (res.exit_code, res.output.strip()) == (1, expected), res.output
    own = home / "spec-controller" / "control.sock"
    own.parent.mkdir(parents=True)
    with socketlib.socket(socketlib.AF_UNIX) as mine:
        mine.bind(str(own))
        res = _specctl(home, "--socket", str(unit_socket), "status")      # the service's, named: as asked
    assert (res.exit_code, res.output.strip()) == (1, expected), res.output


@pytest.mark.parametrize("name", ["status", "stop", "history", "policy", "threshold"])
def test_spec_controller_points_specctl_commands_to_specctl(name):
    res = CliRunner().invoke(daemon_main, [name])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and line.startswith(f"spec-controller: no such command '{name}'"), res.output
    assert f"specctl {name}" in line, line


def test_spec_controller_start_points_to_run():
    res = CliRunner().invoke(daemon_main, ["start"])
    assert res.exit_code == 2
    assert "spec-controller run" in res.output and "\n" not in res.output.strip(), res.output


def test_a_typo_of_its_own_commands_is_unchanged():
    res = CliRunner().invoke(daemon_main, ["rnu"], prog_name="spec-controller")
    assert res.exit_code == 2 and "did you mean 'spec-controller run'?" in res.output, res.output


def test_the_commands_pointed_to_specctl_are_specctls_own():
    """The daemon's list of specctl's commands cannot drift from specctl's (a new specctl command pointed to, a
    removed one not)."""
    import click

    from controller.daemon.main import SPECCTL_COMMANDS
    assert sorted(SPECCTL_COMMANDS) == sorted(set(cli.list_commands(click.Context(cli))) - set(daemon_main.commands))
