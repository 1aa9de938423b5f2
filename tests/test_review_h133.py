"""helper-133: hostile input at the daemon's boundaries."""
from __future__ import annotations

import subprocess
import sys

import pytest

from controller.daemon.config import ConfigError, load_config


def _empty(tmp_path):
    (path := tmp_path / "config.toml").write_text("")
    return path


@pytest.mark.parametrize("rate", [1e-300, 1e-12, 0.0005])
def test_arrival_rate_below_the_simulators_lowest_is_refused(tmp_path, rate):
    """[sim] arrival_rate took anything in 0 .. 1e6, where a trace and `specctl simulate` take 0.001 .. 1e6: at 1e-300
    `spec-controller run --arrival-rate 1e-300` (and `config check`) hung for good at 100 % CPU building the engine,
    deaf to SIGTERM (the first arrival is drawn a period at a time: 1e296 passes)."""
    with pytest.raises(ConfigError, match=r"\[sim\] arrival_rate=.* out of range \(allowed 0 for none, or 0\.001 \.\. "):
        load_config(_empty(tmp_path), {"sim": {"arrival_rate": rate}})


@pytest.mark.parametrize("rate", [0.0, 0.001, 1e6])
def test_arrival_rate_at_the_bounds_is_taken(tmp_path, rate):
    assert load_config(_empty(tmp_path), {"sim": {"arrival_rate": rate}})["sim"]["arrival_rate"] == rate


def test_config_check_refuses_a_tiny_rate_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", "--config",
                           str(_empty(tmp_path)), "--set", "sim.arrival_rate=1e-300"],
                          capture_output=True, text=True, timeout=30, input="",
                          env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "arrival_rate=1e-300 out of range" in proc.stderr


def test_telemetry_socket_is_the_daemons_users_alone(short_tmp):
    """Under the unit's UMask=0007 the telemetry socket was 0770: every operator in the service's group could connect
    and push forged samples, up to RCVHWM x 64 KiB held in the daemon's memory (1.9 GB in 3 s from a non-root member),
    queued ahead of the engine's own. Only the SGLang the daemon starts, as its user, sends there."""
    import os
    import stat

    from controller.daemon.engines.child import telemetry_pull

    old = os.umask(0o007)
    try:
        pull = telemetry_pull(f"ipc://{short_tmp}/t.ipc")
    finally:
        os.umask(old)
    try:
        mode = os.stat(short_tmp / "t.ipc").st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) & 0o077 == 0, oct(mode)
        assert os.umask(old) == old          # the daemon's own umask is back
    finally:
        pull.close(linger=0)
