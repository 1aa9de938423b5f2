"""What a first-time operator's run of the README (helper-113) found: each kept here, red before its fix."""

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli.main import cli


@pytest.mark.parametrize("relative", ["rel", "./state", "rel/sub"])
def test_a_relative_xdg_state_home_is_ignored_as_the_xdg_spec_says(tmp_path, monkeypatch, relative):
    """XDG_STATE_HOME=rel put the daemon's database and socket under rel/ of whatever directory it started in
    (`socket rel/spec-controller/control.sock` in its log), where a specctl started elsewhere never found them. The
    XDG Base Directory spec: a relative path in these variables is invalid and is ignored."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", relative)
    for name in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    home_state = tmp_path / ".local" / "state" / "spec-controller"
    assert paths.user_state_dir() == home_state
    assert (paths.default_db(), paths.default_socket()) == (home_state / "spec-controller.db",
                                                             home_state / "control.sock")


def test_an_absolute_xdg_state_home_is_still_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert paths.user_state_dir() == tmp_path / "xdg" / "spec-controller"


def test_specctl_status_with_a_relative_xdg_state_home_names_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "rel")
    monkeypatch.chdir(tmp_path)
    for name in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY", "SPECCTL_DB", "SPECCTL_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    res = CliRunner().invoke(cli, ["status"])
    assert res.exit_code == 3, res.output
    (line,) = res.stderr.strip().splitlines()
    assert f"{tmp_path}/.local/state/spec-controller/control.sock" in line and " rel/" not in line, line
    assert not (tmp_path / "rel").exists()



def test_a_config_saved_with_a_byte_order_mark_says_so(tmp_path):
    """A config saved with a UTF-8 BOM (some Windows editors) read `not valid TOML (Invalid statement (at line 1,
    column 1))`: line 1 looks right in every editor, so the line named nothing to fix."""
    from controller.daemon.config import ConfigError, load_config
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf[sim]\nspeed = 10\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"config file {path}: not valid TOML (it starts with a byte-order mark (BOM): save it "
                              "as UTF-8 without one)"), str(err.value)
