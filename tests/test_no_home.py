"""No $HOME, no absolute $XDG_STATE_HOME and no home in the password database (a container run as a uid it does not
list): every command says so in one line, exit 1, instead of Path.home()'s 40-line RuntimeError traceback
(newcomer-146)."""
import pwd

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon import main as daemon_main

SAID = "no state directory: $HOME is unset and uid"


@pytest.fixture
def homeless(monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.delenv("SPECCTL_SOCKET", raising=False)
    monkeypatch.delenv("SPECCTL_DB", raising=False)

    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", no_entry)


@pytest.mark.parametrize("args", [["status"], ["--socket", "/tmp/sc-none.sock", "status"], ["threshold", "pin", "3"]])
def test_specctl_says_it_in_one_line(homeless, args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1 and res.output.splitlines() == [res.output.strip()], res.output
    assert res.output.startswith(f"specctl: {SAID}") and "XDG_STATE_HOME" in res.output


def test_config_check_says_it_in_one_line(homeless, tmp_path):
    (tmp_path / "empty.toml").write_text("")
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(tmp_path / "empty.toml")])
    assert res.exit_code == 1 and res.output.strip().startswith(f"spec-controller: {SAID}"), res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("entry", ["", "relative/home"])
def test_a_password_database_home_that_is_not_absolute_is_no_home_either(monkeypatch, entry):
    """The password database's home is taken only where it is an absolute path, as $HOME is: an empty one put the
    state under the working directory ('.local/state/spec-controller'), the case the empty $HOME's fix was for."""
    from controller.paths import NoHome, user_state_dir
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    real = pwd.getpwuid

    def entry_without_home(uid):
        e = real(uid)
        return pwd.struct_passwd((e.pw_name, e.pw_passwd, e.pw_uid, e.pw_gid, e.pw_gecos, entry, e.pw_shell))
    monkeypatch.setattr(pwd, "getpwuid", entry_without_home)
    with pytest.raises(NoHome):
        user_state_dir()
