"""The state directories specctl and the daemon take from the environment ($XDG_STATE_HOME, systemd's
$STATE_DIRECTORY and $RUNTIME_DIRECTORY): a relative one is not taken, a name too long is one line."""
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.paths import default_db, default_socket


@pytest.fixture
def user_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    for name in ("SPECCTL_SOCKET", "SPECCTL_DB", "STATE_DIRECTORY", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def test_a_relative_systemd_directory_is_not_taken(user_state, monkeypatch):
    """STATE_DIRECTORY=rel (systemd sets absolute ones only): an offline pin made rel/spec-controller.db under the
    directory specctl ran in, as a relative $XDG_STATE_HOME did before it was ignored."""
    monkeypatch.setenv("STATE_DIRECTORY", "rel")
    monkeypatch.setenv("RUNTIME_DIRECTORY", "run")
    xdg = user_state / "xdg" / "spec-controller"
    assert (default_db(), default_socket()) == (xdg / "spec-controller.db", xdg / "control.sock")
    res = CliRunner().invoke(cli, ["threshold", "pin", "5"])
    assert res.exit_code == 0 and f"saved to {xdg / 'spec-controller.db'}" in res.output, res.output
    assert os.listdir(user_state / "cwd") == []
    monkeypatch.setenv("STATE_DIRECTORY", f"{user_state}/state:{user_state}/other")      # (systemd's own: taken)
    assert default_db() == user_state / "state" / "spec-controller.db"


@pytest.mark.parametrize("command,code", [(["status"], 3), (["history"], 3), (["threshold", "pin", "5"], 1)])
def test_a_state_directory_name_too_long_is_one_line(user_state, monkeypatch, command, code):
    """XDG_STATE_HOME of 5,000 characters: Path.exists() raised ENAMETOOLONG, a traceback out of every command."""
    monkeypatch.setenv("XDG_STATE_HOME", str(user_state / ("a" * 5000)))
    res = CliRunner().invoke(cli, command)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith("specctl: ")


@pytest.mark.parametrize("home", ["", "rel/home"])
def test_an_empty_or_relative_home_is_not_taken(user_state, monkeypatch, home):
    """HOME='' (XDG_STATE_HOME unset) put the state under /.local (Path.home() read it as '/'); a relative HOME under
    the directory the command ran in (helper-142's note). The account's home from the password database instead."""
    import pwd
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", home)
    account = pwd.getpwuid(os.getuid()).pw_dir
    assert default_db() == Path(account, ".local", "state", "spec-controller", "spec-controller.db")
    monkeypatch.setenv("HOME", str(user_state / "h"))          # (an absolute one: taken)
    assert default_db() == user_state / "h" / ".local" / "state" / "spec-controller" / "spec-controller.db"


def test_an_offline_write_notes_a_default_socket_the_daemon_would_refuse(tmp_path, monkeypatch):
    """newcomer-146: with an XDG_STATE_HOME whose control.sock is past a unix socket's 107 bytes, an offline pin said
    'applied at next start' (exit 0), while `run` in that environment refuses its socket (exit 2). Still saved, with
    a note that says so; none where the socket fits or one is given."""
    for name in ("SPECCTL_SOCKET", "SPECCTL_DB", "STATE_DIRECTORY", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    deep = tmp_path / ("d" * (110 - len(str(tmp_path))))
    monkeypatch.setenv("XDG_STATE_HOME", str(deep))
    res = CliRunner().invoke(cli, ["threshold", "pin", "5"])
    assert res.exit_code == 0 and "applied at next start" in res.stdout, res.output
    assert res.stderr.startswith("specctl: note: a daemon started in this environment refuses its control socket ")
    assert "too long for a unix socket" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    res = CliRunner().invoke(cli, ["policy", "set", "never"])
    assert res.exit_code == 0 and "too long for a unix socket" in res.stderr, res.output
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "x"))
    res = CliRunner().invoke(cli, ["threshold", "pin", "5"])
    assert res.exit_code == 0 and res.stderr == "", res.output
