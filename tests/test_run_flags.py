"""run's flags (and config check's, the same bundle) refused where they cannot mean what they say, one line, exit 2,
before anything is made. Simulator flags (--speed, --trace, --profile, --concurrency, --arrival-rate) while the engine
is SGLang: named with where the engine kind came from (newcomer-53: the quick start's `run --speed 10` on a host with the
service's config started SGLang and dropped --speed without a word). An empty path or name (helper-133)."""
import pytest
from click.testing import CliRunner

import controller.daemon.main as daemon_main


class _Daemon:
    """Stands in for the daemon: records the config run would start it with."""
    started: list = []

    def __init__(self, cfg):
        self.started.append(cfg)

    def run(self) -> int:
        return 0


def _run(tmp_path, monkeypatch, args, config_text=None):
    monkeypatch.setattr("controller.daemon.logs.setup", lambda level: None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(_Daemon, "started", [])
    monkeypatch.setattr(daemon_main, "Daemon", _Daemon)
    if config_text is not None:
        (tmp_path / "c.toml").write_text(config_text)
        args = ["--config", str(tmp_path / "c.toml"), *args]
    return CliRunner().invoke(daemon_main.main, ["run", *args])


def test_speed_with_the_configs_sglang_engine_is_refused(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, ["--speed", "10"], '[engine]\nkind = "sglang"\n')
    assert res.exit_code == 2 and not _Daemon.started, res.output
    assert res.output == (f"spec-controller: --speed: the simulator's, but the engine is sglang ([engine] kind in "
                          f"{tmp_path / 'c.toml'}); add --engine sim to run the simulator, or leave them out\n")


@pytest.mark.parametrize("args, source", [
    (["--engine", "sglang", "--trace", "steady", "--concurrency", "8"], "--engine"),
    (["--set", "engine.kind='sglang'", "--profile", "crossover-b"], "--set engine.kind"),
])
def test_every_simulator_flag_is_named_with_the_source(tmp_path, monkeypatch, args, source):
    res = _run(tmp_path, monkeypatch, args)
    assert res.exit_code == 2 and not _Daemon.started, res.output
    flags = [a for a in args if a in ("--trace", "--concurrency", "--profile")]
    assert res.output.startswith(f"spec-controller: {', '.join(flags)}: the simulator's, but the engine is sglang "
                                 f"({source}); "), res.output


def test_engine_sim_takes_them(tmp_path, monkeypatch):
    """--engine sim over the config's sglang: the flags are the simulator's, the daemon starts with them."""
    res = _run(tmp_path, monkeypatch, ["--engine", "sim", "--speed", "10"], '[engine]\nkind = "sglang"\n')
    assert res.exit_code == 0, res.output
    assert [(c["engine"]["kind"], c["sim"]["speed"]) for c in _Daemon.started] == [("sim", 10.0)]


@pytest.mark.parametrize("args, named", [
    (["--db", ""], "--db"), (["--socket", " "], "--socket"), (["--config", ""], "--config"),
    (["--trace", "", "--profile", ""], "--profile, --trace"),
])
def test_an_empty_path_or_name_is_refused_not_taken_as_the_default(tmp_path, monkeypatch, args, named):
    """(helper-133: `run --db ''` ran on the default database, as from an unset "$DB"; `--config ''` read '.')"""
    res = _run(tmp_path, monkeypatch, args)
    it = "them" if "," in named else "it"
    assert (res.exit_code, res.output) == (2, f"spec-controller: {named}: empty; leave {it} out for the default\n")
    assert not _Daemon.started
    check = CliRunner().invoke(daemon_main.main, ["config", "check", *args])
    assert (check.exit_code, check.output) == (2, res.output)


def test_a_database_where_no_file_can_be_made_says_so(tmp_path):
    """`run --db /proc/version` said 'lock file /proc/version.lock does not exist' (helper-133): the file is one run
    makes, in a directory that takes none. helper-172: exit 2 (no restart makes a file there; 1 was restarted for good)."""
    import subprocess
    import sys
    (config := tmp_path / "empty.toml").write_text("")
    proc = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--db", "/proc/version", "--config",
                           str(config)], capture_output=True, text=True, timeout=60,
                          env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    # (helper-180: the start's own check, config check's line: it was the open's 'cannot be created there (No such file
    # or directory)' as root, and told a user to get write access to /proc)
    assert (proc.returncode, proc.stderr) == (2, "spec-controller: lock file /proc/version.lock cannot be created in "
                                                 "/proc (nothing can be made in it (proc: the kernel's own file "
                                                 "system)); give a --db on a writable file system (under the unit: "
                                                 "leave [storage] db empty, for its state directory)\n")


def test_a_control_socket_where_no_file_can_be_made_says_so(tmp_path):
    """`run --socket /proc/x.sock` said 'control socket /proc/x.sock: No such file or directory' (helper-133), where
    the same directory given to --db says the file cannot be created there."""
    import subprocess
    import sys
    (config := tmp_path / "empty.toml").write_text("")
    proc = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--socket", "/proc/x.sock", "--config",
                           str(config), "--speed", "10"], capture_output=True, text=True, timeout=60,
                          env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    # (helper-179: root's was exit 1 at the bind, once the engine had started; now the start's own check, exit 2;
    # helper-180: a user's too, told 'Permission denied' before, as if write access to /proc could be had)
    assert (proc.returncode, proc.stderr) == (2, "spec-controller: cannot create the control socket in /proc: "
                                                 "nothing can be made in it (proc: the kernel's own file system)\n")


def test_config_check_refuses_a_default_socket_path_too_long_as_run_does(tmp_path):
    """helper-141: under a long $XDG_STATE_HOME config check said ok of the default control socket's path, which run
    then refused (too long for a unix socket)."""
    import subprocess
    import sys
    long_state = tmp_path / ("x" * 100)
    (config := tmp_path / "empty.toml").write_text("")
    said = []
    for command in (["config", "check"], ["run", "--speed", "10"]):
        proc = subprocess.run([sys.executable, "-m", "controller.daemon", *command, "--config", str(config)],
                              capture_output=True, text=True, timeout=60,
                              env={"XDG_STATE_HOME": str(long_state), "PATH": "/usr/bin:/bin"})
        said.append((proc.returncode, proc.stdout, proc.stderr))
    sock = long_state / "spec-controller" / "control.sock"
    line = f"spec-controller: control socket {sock}: too long for a unix socket ({len(str(sock))} bytes, at most 107)\n"
    assert said == [(2, "", line), (2, "", line)], said
    assert not long_state.exists()                  # (refused before anything is made)
