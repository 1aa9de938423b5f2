"""The unit as scripts/install-service.sh (the README's install) installs it: `systemd-analyze
verify` green, the ExecStart where the script puts the package, the user and group, hardening
(exposure <= 4.0) that leaves /dev/nvidia* reachable; and the group access it promises."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from controller.daemon.config import load_config

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "systemd" / "spec-controller.service"
EXAMPLE = UNIT.parent / "config.example.toml"
INSTALL = ROOT / "scripts" / "install-service.sh"
PREFIX = "/opt/spec-controller"


def _analyze():
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze missing in CI (.ci/run installs it)")
        pytest.skip("systemd-analyze not installed")
    return tool


def _settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_the_install_script_installs_what_the_unit_names_and_verify_passes(tmp_path):
    tool = _analyze()
    env = dict(os.environ, ROOT=str(tmp_path), EXTRAS="", PIP_FLAGS="--no-deps")
    res = subprocess.run(["bash", str(INSTALL)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    installed = tmp_path / "etc/systemd/system/spec-controller.service"
    assert installed.read_text() == UNIT.read_text()
    exec_start = _settings(UNIT.read_text())["ExecStart"][0].split()[0]
    assert exec_start == f"{PREFIX}/bin/spec-controller"
    assert os.access(tmp_path / exec_start.lstrip("/"), os.X_OK)
    for doc in _settings(UNIT.read_text())["Documentation"]:
        assert (tmp_path / doc.removeprefix("file:///")).is_file(), doc
    assert (tmp_path / "usr/share/doc/spec-controller/CHANGELOG.md").read_text() == (ROOT / "CHANGELOG.md").read_text()
    assert (tmp_path / "usr/share/doc/spec-controller/config.example.toml").read_text() == EXAMPLE.read_text()
    assert (tmp_path / "etc/spec-controller/config.toml").read_text() == EXAMPLE.read_text()
    assert (tmp_path / "etc/spec-controller/config.toml").stat().st_mode & 0o777 == 0o640     # (others: no key for them)
    assert os.readlink(tmp_path / "usr/local/bin/specctl") == f"{PREFIX}/bin/specctl"
    # verify the installed unit, its paths under the test's root
    relocated = tmp_path / "spec-controller.service"
    relocated.write_text(installed.read_text().replace(PREFIX, f"{tmp_path}{PREFIX}"))
    res = subprocess.run([tool, "verify", str(relocated)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_the_unit_runs_as_its_own_user_and_group_and_keeps_the_gpus_reachable():
    s = _settings(UNIT.read_text())
    sysusers = (UNIT.parent / "spec-controller.sysusers").read_text()
    assert s["User"] == ["spec-controller"] and s["Group"] == ["spec-controller"]
    assert re.search(r"^u spec-controller - ", sysusers, re.M)
    assert s["RuntimeDirectoryMode"] == ["0750"] and s["StateDirectoryMode"] == ["0750"] and s["UMask"] == ["0007"]
    for line in ("Type", "WatchdogSec", "Restart", "StateDirectory", "RuntimeDirectory", "CacheDirectory",
                 "KillMode", "TimeoutStopSec"):
        assert line in s
    assert s.get("PrivateDevices", ["no"]) == ["no"]          # /dev/nvidia* must stay visible
    if s.get("DevicePolicy", ["auto"]) != ["auto"]:
        assert any("nvidia" in v for v in s.get("DeviceAllow", []))
    assert "MemoryDenyWriteExecute" not in s and "ProcSubset" not in s     # CUDA JIT, /proc/driver/nvidia


def test_a_reload_checks_the_file_that_start_reads_before_the_signal():
    """systemctl reload runs ExecReload in order and stops at the first failure: the check, then SIGHUP."""
    s = _settings(UNIT.read_text())
    start = s["ExecStart"][0].split()
    check, signal = (line.split() for line in s["ExecReload"])
    assert check == [start[0], "config", "check", *start[start.index("--config"):start.index("--config") + 2]]
    assert signal == ["/bin/kill", "-HUP", "$MAINPID"]


def test_hardening_exposure_is_at_most_4():
    tool = _analyze()
    res = subprocess.run([tool, "security", "--offline=yes", str(UNIT)], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    assert float(m[1]) <= 4.0


def test_the_readme_installs_with_the_script():
    readme = (ROOT / "README.md").read_text()
    assert "sudo scripts/install-service.sh" in readme
    assert "usermod -aG spec-controller" in readme


def test_example_config_is_accepted():
    cfg = load_config(EXAMPLE)
    assert cfg["engine"]["kind"] == "sglang" and cfg["sglang"]["speculative_eagle_topk"] == 1


def test_a_config_the_daemon_refuses_stops_the_unit_instead_of_restarting_it(tmp_path):
    """The daemon's config refusals exit 2, which the unit does not restart (one line, a failed unit); any other
    failure (SGLang gone, a hang, a stalled loop: exit 1) is restarted."""
    import sys
    s = _settings(UNIT.read_text())
    assert s["Restart"] == ["on-failure"]
    (tmp_path / "c.toml").write_text('[policy]\nname = "bandti"\n')
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(tmp_path / "c.toml")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state")))
    assert "bandti" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert str(res.returncode) in " ".join(s.get("RestartPreventExitStatus", [])).split()
    assert "1" not in " ".join(s.get("RestartPreventExitStatus", [])).split()
    from controller.cli.options import EXIT_UNFLUSHED       # (a stop asked for and done, its final writes lost)
    assert str(EXIT_UNFLUSHED) in " ".join(s.get("RestartPreventExitStatus", [])).split()


def test_the_install_scripts_next_steps_name_commands_it_puts_on_path():
    """Its closing 'next:' line named `spec-controller config from-launch` and `sudo spec-controller config check`
    bare, while the script links only specctl into /usr/local/bin: command not found (the README's steps give
    /opt/spec-controller/bin/spec-controller). Every spec-controller it names carries the venv's path."""
    text = INSTALL.read_text()
    linked = set(re.findall(r'ln -sf "\$PREFIX/bin/([\w-]+)"', text))
    assert linked == {"specctl"}
    start = text.index('echo "next:')
    hint = text[start:text.index("\nfi", start)].replace("$PREFIX", PREFIX)
    assert "spec-controller config from-launch" in hint and "spec-controller config check" in hint
    bare = re.findall(r"(?<![\w/-])spec-controller config", hint)
    assert not bare, hint
    assert f"{PREFIX}/bin/spec-controller config from-launch" in hint and f"sudo {PREFIX}/bin/spec-controller config check" in hint


@pytest.mark.parametrize("args, rc", [(["--help"], 0), (["-h"], 0), (["--root", "/x"], 2), (["torch==2.11.0"], 2)])
def test_the_install_script_takes_no_arguments_and_installs_nothing_for_them(tmp_path, args, rc):
    """Its settings are environment variables; an argument was ignored, so `sudo scripts/install-service.sh --help`
    (a newcomer's first look) ran the whole install as root. --help now prints the settings; any other argument is
    refused in one line naming the environment form; either way nothing is installed."""
    env = dict(os.environ, ROOT=str(tmp_path / "root"), EXTRAS="", PIP_FLAGS="--no-deps")
    res = subprocess.run(["bash", str(INSTALL), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == rc, res.stderr
    assert not (tmp_path / "root").exists()
    if rc == 0:
        assert "PIP_FLAGS" in res.stdout and "EXTRAS" in res.stdout and "ROOT" in res.stdout
    else:
        assert len(res.stderr.strip().splitlines()) == 1 and "PIP_FLAGS=" in res.stderr and args[0] in res.stderr


OLD_PYTHON = "#!/bin/sh\ncase \"$1\" in -V|--version) echo 'Python 3.10.12' ;; *) exit 1 ;; esac\n"


@pytest.mark.parametrize("made", [False, True])
def test_the_install_script_refuses_a_python_older_than_3_11_before_it_makes_anything(tmp_path, made):
    """Ubuntu 22.04's python3 is 3.10, RHEL 9's 3.9: the venv was made from it, pip then refused the package (Python
    >= 3.11) and every later run reused that venv; the script had no setting for another interpreter. PYTHON names
    one, an older one is refused in one line before anything is made, and so is a venv left by such a run."""
    old = tmp_path / "python3.10"
    old.write_text(OLD_PYTHON)
    old.chmod(0o755)
    root = tmp_path / "root"
    if made:                                     # (what the earlier run left: a venv whose pip refuses the package)
        for name in ("pip", "python"):
            (root / "opt/spec-controller/bin").mkdir(parents=True, exist_ok=True)
            (root / "opt/spec-controller/bin" / name).write_text(OLD_PYTHON)
            (root / "opt/spec-controller/bin" / name).chmod(0o755)
    env = dict(os.environ, ROOT=str(root), EXTRAS="", PIP_FLAGS="--no-deps", PYTHON=str(old))
    res = subprocess.run(["bash", str(INSTALL)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    line, = res.stderr.strip().splitlines()
    assert "Python 3.10.12" in line and "3.11 or newer" in line and "PYTHON=" in line and "nothing installed" in line
    assert ("rm -rf" in line) == made
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == (["pip", "python"] if made else [])


def test_a_python_that_does_not_exist_is_refused_in_one_line(tmp_path):
    """mutation pass q: `PYTHON=/nonexistent/python3.11` was refused over two lines (bash's own 'No such file'
    line caught by the -V capture), exit 2."""
    env = dict(os.environ, ROOT=str(tmp_path / "root"), EXTRAS="", PYTHON=str(tmp_path / "no" / "python3.11"))
    res = subprocess.run(["bash", str(INSTALL)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "is not an interpreter that runs; spec-controller needs Python 3.11" in res.stderr, res.stderr
    assert not (tmp_path / "root").exists()


def _earlier_install(root: Path, unit: str) -> dict:
    """What an earlier install left under root: its unit, a config, a venv whose pip succeeds (no real install)."""
    bin_dir = root / "opt/spec-controller/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{shutil.which("python3")}" "$@"\n')
    (bin_dir / "pip").write_text("#!/bin/sh\nexit 0\n")
    for name in ("python", "pip"):
        (bin_dir / name).chmod(0o755)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/spec-controller.service").write_text(unit)
    (root / "etc/spec-controller").mkdir(parents=True)
    (root / "etc/spec-controller/config.toml").write_text("[engine]\nkind = \"sim\"\n")
    return dict(os.environ, ROOT=str(root), EXTRAS="", PIP_FLAGS="--no-deps")


def test_a_rerun_over_an_earlier_install_keeps_the_unit_it_replaces_and_says_to_restart(tmp_path):
    """Rerun over an earlier install (0.1.0's unit ran /usr/local/bin/spec-controller as root, ProtectHome=read-only;
    or an operator edited the unit file itself), the script replaced the unit without a word, kept only the config,
    and never said that the running daemon stays the old version until a restart, nor that 0.1.0's pip-installed
    spec-controller was left on PATH. The unit it replaces, where it differed, is kept and named."""
    edited = UNIT.read_text().replace("[Service]\n", "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=2,3\n")
    root = tmp_path / "root"
    env = _earlier_install(root, edited)
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/spec-controller").write_text("#!/usr/bin/python3\n")     # (pip's console script)
    res = subprocess.run(["bash", str(INSTALL)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    kept = root / "etc/spec-controller/spec-controller.service.old"
    assert kept.read_text() == edited
    assert (root / "etc/systemd/system/spec-controller.service").read_text() == UNIT.read_text()
    assert f"kept as {kept}" in res.stdout and "systemctl edit spec-controller" in res.stdout
    assert "sudo systemctl restart spec-controller" in res.stdout
    assert f"{root}/usr/local/bin/spec-controller is an earlier install's" in res.stdout
    assert (root / "etc/spec-controller/config.toml").read_text() == "[engine]\nkind = \"sim\"\n"


def test_a_rerun_over_the_same_unit_keeps_no_copy(tmp_path):
    root = tmp_path / "root"
    env = _earlier_install(root, UNIT.read_text())
    res = subprocess.run(["bash", str(INSTALL)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (root / "etc/spec-controller/spec-controller.service.old").exists()
    assert "replaced" not in res.stdout and "earlier install's" not in res.stdout
    assert "sudo systemctl restart spec-controller" in res.stdout


def test_config_checks_list_of_what_the_unit_may_write_is_the_units_own():
    """config check's note on a database the service may not write names the unit's StateDirectory=, RuntimeDirectory=
    and CacheDirectory= (ProtectSystem=strict leaves everything else read-only)."""
    from controller.daemon.serviceaccess import UNIT_WRITABLE
    s = _settings(UNIT.read_text())
    assert s["ProtectSystem"] == ["strict"] and not s.get("ReadWritePaths")
    assert UNIT_WRITABLE == (Path("/var/lib") / s["StateDirectory"][0], Path("/run") / s["RuntimeDirectory"][0],
                             Path("/var/cache") / s["CacheDirectory"][0])
