import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.daemon.config import load_config

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "spec-controller.service"
EXAMPLE = UNIT.parent / "config.example.toml"


def _analyze():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze missing in CI (.ci/run installs it)")
        pytest.skip("systemd-analyze not installed")
    return tool


def test_unit_passes_systemd_analyze_verify(tmp_path):
    tool = _analyze()
    exe = shutil.which("spec-controller") or str(Path(sys.executable).with_name("spec-controller"))
    if not Path(exe).exists():
        pytest.fail("spec-controller console script not installed (pip install .)")
    unit = tmp_path / "spec-controller.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/spec-controller", exe))
    res = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_unit_has_the_operator_contract():
    text = UNIT.read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "StateDirectory=spec-controller",
                 "RuntimeDirectory=spec-controller", "CacheDirectory=spec-controller", "KillMode=control-group",
                 "TimeoutStopSec="):
        assert line in text
    import re
    assert not re.search(r"^(PrivateDevices|DevicePolicy)=", text, re.M)     # /dev/nvidia* must stay visible


def test_example_config_is_accepted():
    cfg = load_config(EXAMPLE)
    assert cfg["engine"]["kind"] == "sglang" and cfg["sglang"]["speculative_eagle_topk"] == 1
