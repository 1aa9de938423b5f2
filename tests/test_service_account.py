"""The account config check asks about: the installed unit's User= / Group= as systemd reads them (an operator's drop-in
included), the packaged spec-controller where there is no systemd or no such unit. A real systemctl cannot run here
(no systemd as PID 1), so a stand-in executable of that name on PATH answers as systemctl show does."""
import grp
import os
import pwd
import stat

import pytest
from click.testing import CliRunner

from controller.daemon import serviceaccess
from controller.daemon.launchcmd import secret_mode_note
from controller.daemon.main import main
from controller.daemon.serviceaccess import service_account


def _systemctl(tmp_path, monkeypatch, body: str) -> None:
    """A systemctl on PATH (first) that answers `show -p User -p Group spec-controller.service` with body; any other
    words: exit 9 (so a query for another unit or property reads as no answer)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text('#!/bin/sh\n[ "$*" = "show -p User -p Group spec-controller.service" ] || exit 9\n' + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_no_systemctl_is_the_packaged_account(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))          # (nothing there)
    assert service_account() == ("spec-controller", "spec-controller")


@pytest.mark.parametrize("body", ["printf 'User=\\nGroup=\\n'\n",                  # the unit not installed
                                  "echo 'System has not been booted with systemd' >&2; exit 1\n",
                                  "printf 'User=nobody\\n'; exit 1\n",                    # (a failed show's words)
                                  "sleep 30\n"])
def test_no_answer_is_the_packaged_account(tmp_path, monkeypatch, body):
    monkeypatch.setattr(serviceaccess, "SYSTEMCTL_TIMEOUT_S", 0.5)
    _systemctl(tmp_path, monkeypatch, body)
    assert service_account() == ("spec-controller", "spec-controller")


def test_a_drop_in_user_is_the_account_and_its_own_group_when_none_is_named(tmp_path, monkeypatch):
    nobody = pwd.getpwnam("nobody")
    _systemctl(tmp_path, monkeypatch, "printf 'User=nobody\\nGroup=\\n'\n")
    assert service_account() == ("nobody", grp.getgrgid(nobody.pw_gid).gr_name)
    _systemctl(tmp_path, monkeypatch, "printf 'Group=models\\nnot a property\\nUser= nobody \\n'\n")
    assert service_account() == ("nobody", "models")
    _systemctl(tmp_path, monkeypatch, f"printf 'User={nobody.pw_uid}\\nGroup=\\n'\n")     # (systemd takes a UID)
    assert service_account() == (str(nobody.pw_uid), grp.getgrgid(nobody.pw_gid).gr_name)


def test_the_secret_note_names_the_units_group(tmp_path, monkeypatch):
    path = tmp_path / "c.toml"
    path.write_text("x")
    os.chmod(path, 0o644)
    assert secret_mode_note(path, {"api_key": "k"}, "models") == [
        f"{path} holds an API key or a token and other users may read it (mode 644): "
        f"sudo chown root:models {path} && sudo chmod 640 {path}"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_config_check_asks_as_the_drop_ins_user(short_tmp, tmp_path, monkeypatch):
    """The packaged account does not exist on this host; the unit's drop-in names nobody, who cannot read the model."""
    from tests.conftest import stub_sglang_python
    os.chmod(short_tmp, 0o755)
    model = short_tmp / "model"
    model.mkdir(mode=0o700)
    python = stub_sglang_python(tmp_path / "s")
    (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "{model}"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n')
    _systemctl(tmp_path, monkeypatch, "printf 'User=nobody\\nGroup=\\n'\n")
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and f"model_path = {model}: the service's user nobody cannot read it" in res.stderr, \
        res.output
