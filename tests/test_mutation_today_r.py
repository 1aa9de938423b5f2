"""helper-137's mutation check of the lines changed since e8302e6 (bench/results/mutation-today-2026-12-07r.md): a test
for each surviving mutant that an operator would notice, named by its id."""
from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner

import controller.daemon.config as config
import controller.daemon.main as daemon_main
from controller.numtext import plain
from tests.test_run_flags import _Daemon, _run
from tests.test_systemd_unit import INSTALL, UNIT, _earlier_install


def _sglang_config(tmp_path):
    (path := tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n')
    return path


def _default_config(monkeypatch, path):
    monkeypatch.setattr(config, "DEFAULT_CONFIG", path)
    monkeypatch.setattr(daemon_main, "DEFAULT_CONFIG", path)


# --- controller/daemon/main.py: _sim_flags_ignored ---------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--concurrency", "--arrival-rate"])
def test_ignored_truthy_a_simulator_flag_of_zero_for_sglang_is_refused_too(tmp_path, monkeypatch, flag):
    """ignored-truthy: `flags.get(name) is not None` -> `flags.get(name)`. A flag given as 0 is still given: with the
    config's SGLang engine it was dropped without a word, as --speed 10 was before newcomer-53."""
    res = _run(tmp_path, monkeypatch, ["--config", str(_sglang_config(tmp_path)), flag, "0"])
    assert res.exit_code == 2 and not _Daemon.started, res.output
    assert res.output.startswith(f"spec-controller: {flag}: the simulator's, but the engine is sglang "), res.output


# --- controller/daemon/config.py: cfg["_path"] of the default file -----------------------------------------------------
def test_path_explicit_only_the_refusal_names_the_default_config_that_chose_sglang(tmp_path, monkeypatch):
    """path-explicit-only: `_path` only for --config. Without --config the daemon reads /etc/spec-controller/config.toml;
    `run --speed 10` there must name that file as where [engine] kind came from (it said 'in )')."""
    target = _sglang_config(tmp_path)
    _default_config(monkeypatch, target)
    res = _run(tmp_path, monkeypatch, ["--speed", "10"])
    assert res.exit_code == 2 and not _Daemon.started, res.output
    assert f"([engine] kind in {target});" in res.output, res.output


# --- controller/daemon/main.py: config check's 'absent' --------------------------------------------------------------
@pytest.mark.parametrize("exists", [False, True])
def test_check_where_not_config_check_says_whether_the_default_file_is_there(tmp_path, monkeypatch, exists):
    """check-where-not: `'' if present(DEFAULT_CONFIG)` flipped. The one line before a restart says which file was
    checked; a missing default must read '(absent: built-in defaults)', a present one not."""
    target = tmp_path / "etc" / "config.toml"
    if exists:
        target.parent.mkdir()
        target.write_text('[engine]\nkind = "sim"\n')
    _default_config(monkeypatch, target)
    res = CliRunner().invoke(daemon_main.main, ["config", "check"])
    assert res.exit_code == 0, res.output
    line, = res.stdout.splitlines()
    where = str(target) if exists else f"{target} (absent: built-in defaults)"
    assert line.startswith(f"{where}: ok (engine sim"), line


# --- controller/daemon/config.py: the arrival-rate refusal's range ----------------------------------------------------
@pytest.mark.parametrize("rate", [config.MIN_ARRIVAL_RATE / 2, None])
def test_min_rate_msg_upper_the_refusal_names_the_range_the_config_takes(tmp_path, rate):
    """min-rate-msg-upper / min-rate-range-first: the tiny-rate refusal spells the allowed range out; its top must be the
    one validate() holds [sim] arrival_rate to (each side changed alone left them disagreeing)."""
    (path := tmp_path / "c.toml").write_text("")
    top = next(hi for section, key, lo, hi in config.RANGES if (section, key) == ("sim", "arrival_rate"))
    assert config.load_config(path, {"sim": {"arrival_rate": top}})["sim"]["arrival_rate"] == top
    with pytest.raises(config.ConfigError, match="out of range"):
        config.load_config(path, {"sim": {"arrival_rate": top * 2}})
    if rate is not None:
        with pytest.raises(config.ConfigError) as err:
            config.load_config(path, {"sim": {"arrival_rate": rate}})
        assert f"or {plain(config.MIN_ARRIVAL_RATE)} .. {plain(top)} requests/s" in str(err.value), str(err.value)


# --- controller/daemon/engines/child.py: telemetry_pull's umask --------------------------------------------------------
def test_umask_not_restored_the_daemons_umask_is_back_after_the_bind(short_tmp):
    """umask-not-restored: telemetry_pull left 0177 in place. Everything the daemon made afterwards (a directory: no
    search bit for its own user; a file: no group read for the service's group) would take it."""
    from controller.daemon.engines.child import telemetry_pull
    old = os.umask(0o027)
    try:
        pull = telemetry_pull(f"ipc://{short_tmp}/t.ipc")
        after = os.umask(0o027)
    finally:
        os.umask(old)
    pull.close(linger=0)
    assert after == 0o027, oct(after)


# --- scripts/install-service.sh: the earlier pip install's note --------------------------------------------------------
def test_sh_pip_symlink_too_a_link_at_usr_local_bin_is_not_called_pips(tmp_path):
    """sh-pip-symlink-too: the `[ ! -L ... ]` test dropped. A symbolic link there (an operator's link to the venv's
    spec-controller) is not 0.1.0's pip console script: the note would tell them to pip uninstall what pip never
    installed."""
    root = tmp_path / "root"
    env = _earlier_install(root, UNIT.read_text())
    (root / "usr/local/bin").mkdir(parents=True)
    (venv := root / "opt/spec-controller/bin/spec-controller").write_text("#!/bin/sh\n")    # (what pip would put)
    (root / "usr/local/bin/spec-controller").symlink_to(venv)
    res = subprocess.run(["bash", str(INSTALL)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "earlier install's" not in res.stdout and "pip uninstall" not in res.stdout, res.stdout
