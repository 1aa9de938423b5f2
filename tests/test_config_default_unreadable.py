"""The default config in a directory this user may not enter (/etc/spec-controller made 0750 root:spec-controller on a
host with the service): `run` and `config check` without --config raised PermissionError from Path.exists() as a
traceback. Now one line, exit 2, as for a file there that this user may not read."""
import errno
import os

import pytest
from click.testing import CliRunner

import controller.daemon.config as config
import controller.daemon.main as daemon_main
from controller.daemon.config import ConfigError, load_config


def _closed_directory(monkeypatch, target):
    """stat and open of `target` fail as in a directory without search permission, for root as well."""
    real_stat, real_open = os.stat, os.open

    def stat(path, *args, **kwargs):
        if os.fspath(path) == str(target):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real_stat(path, *args, **kwargs)

    def open_(path, *args, **kwargs):
        if os.fspath(path) == str(target):
            raise PermissionError(errno.EACCES, "Permission denied", str(target))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "open", open_)


def test_default_config_behind_a_closed_directory_is_one_line(monkeypatch, tmp_path):
    target = tmp_path / "etc" / "config.toml"
    monkeypatch.setattr(config, "DEFAULT_CONFIG", target)
    _closed_directory(monkeypatch, target)
    with pytest.raises(ConfigError, match=r"config file .*config\.toml: cannot read \(Permission denied\)") as err:
        load_config(None)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args", [["config", "check"], ["run", "--speed", "10"]])
def test_run_and_check_without_config_say_it_in_one_line(monkeypatch, tmp_path, args):
    from controller.daemon import logs
    target = tmp_path / "etc" / "config.toml"
    monkeypatch.setattr(logs, "setup", lambda level: None)
    monkeypatch.setattr(config, "DEFAULT_CONFIG", target)
    monkeypatch.setattr(daemon_main, "DEFAULT_CONFIG", target)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _closed_directory(monkeypatch, target)
    res = CliRunner().invoke(daemon_main.main, args)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.output == (f"spec-controller: config file {target}: cannot read (Permission denied): it is the default, "
                          "read when --config is not given; give --config FILE for another\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root searches any directory")
def test_a_real_directory_without_search_permission(monkeypatch, tmp_path):
    closed = tmp_path / "etc"
    closed.mkdir()
    (closed / "config.toml").write_text('[engine]\nkind = "sim"\n')
    closed.chmod(0o600)          # read, no search: stat of the file inside fails with EACCES
    try:
        monkeypatch.setattr(config, "DEFAULT_CONFIG", closed / "config.toml")
        with pytest.raises(ConfigError, match=r"cannot read \(Permission denied\)"):
            load_config(None)
    finally:
        closed.chmod(0o700)
