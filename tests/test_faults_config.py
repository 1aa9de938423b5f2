"""Fault injection in the configuration: every bad value is refused with one line at start, and a bad
config on SIGHUP is refused while the daemon keeps running on the old one. Before issue 16 a bad
log_level was a 29-line traceback at start and killed a running daemon on SIGHUP."""
import signal
import sqlite3
import time

import pytest

from controller.daemon.config import DEFAULTS, RANGES, ConfigError, load_config
from controller.daemon.engines.base import EngineError
from tests.daemon_proc import DaemonProc
from tests.test_daemon_e2e import run_daemon_once

SCALARS = [(section, key, value) for section, values in DEFAULTS.items() for key, value in values.items()
           if not isinstance(value, dict)]


def _refused(overrides: dict, match: str | None = None) -> str:
    with pytest.raises(ConfigError, match=match) as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("section,key,default", SCALARS, ids=[f"{s}.{k}" for s, k, _ in SCALARS])
def test_every_key_refuses_a_value_of_the_wrong_type(section, key, default):
    wrong = 3 if isinstance(default, str) else "3"
    _refused({section: {key: wrong}}, f"{key}=")


@pytest.mark.parametrize("section,key,lo,hi", RANGES, ids=[f"{s}.{k}" for s, k, _, _ in RANGES])
def test_every_ranged_key_refuses_nan_infinity_and_out_of_range(section, key, lo, hi):
    kind = type(DEFAULTS[section][key])          # NaN and infinity are floats: an int key refuses their type
    for bad in (float("nan"), float("inf"), kind(lo - 1), kind(hi * 10 + 1)):
        _refused({section: {key: bad}})


@pytest.mark.parametrize("overrides,match", [
    ({"control": {"log_level": "LOUD"}}, "log_level='LOUD' must be one of"),
    ({"control": {"metrics_addr": "localhost:9"}}, "is not an IP address"),
    ({"policy": {"params": {"c": -1}}, "engine": {"kind": "sim"}}, "out of range"),
    ({"policy": {"name": "nope"}}, "unknown policy 'nope'"),
    ({"storage": {"db": "/tmp/a\0b"}}, "NUL byte"),
])
def test_bad_values_are_refused_with_one_line(overrides, match):
    if "params" in overrides.get("policy", {}):
        overrides["policy"]["name"] = "ucb"
    _refused(overrides, match)


def test_log_level_is_case_insensitive():
    assert load_config(None, {"control": {"log_level": "debug"}})["control"]["log_level"] == "DEBUG"


@pytest.mark.parametrize("args,match", [({"port": "abc"}, "port must be an integer"),
                                        ({"max_running_requests": 0}, "max_running_requests must be"),
                                        ({"speculative_num_steps": 2.5}, "speculative_num_steps must be")])
def test_bad_sglang_values_are_one_line(args, match):
    from controller.daemon.engines.sglang import SGLangEngine
    with pytest.raises(EngineError, match=match):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", **args})


def test_a_bad_log_level_at_start_is_one_line(short_tmp):
    (short_tmp / "bad.toml").write_text('[control]\nlog_level = "LOUD"\n')
    res = run_daemon_once(short_tmp, "--config", str(short_tmp / "bad.toml"), "--db", str(short_tmp / "x.db"),
                          "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "log_level='LOUD'" in lines[0], res.stderr


def test_the_command_line_takes_the_log_levels_the_config_takes():
    from click.testing import CliRunner

    from controller.daemon.config import LOG_LEVELS
    from controller.daemon.main import main, run
    option = next(p for p in run.params if p.name == "log_level")
    assert tuple(option.type.choices) == tuple(LOG_LEVELS) and "CRITICAL" in LOG_LEVELS
    res = CliRunner().invoke(main, ["run", "--log-level", "LOUD"])
    assert res.exit_code == 2 and "LOUD" in res.output and "critical" in res.output.lower()


@pytest.mark.parametrize("args, said", [
    (["--policy", "bandti"], "(given on the command line: --policy)"),
    (["--set", 'policy.name="bandti"'], """(given on the command line: --set policy.name="bandti")"""),
    (["--speed", "0", "--policy", "bandit"], "(given on the command line: --speed)"),   # only the refused section's
    # ... and of it only the values the refusal is of (helper-163: every flag and --set of the section was listed)
    (["--speed", "0", "--set", "sim.seed=2"], "(given on the command line: --speed)"),
    (["--speed", "3", "--concurrency", "2", "--arrival-rate", "1"], "(given on the command line: --concurrency, "
                                                                   "--arrival-rate)"),
    (["--set", "sim.bogus=1", "--speed", "3"], "(given on the command line: --set sim.bogus=1)"),
    (["--config", "FILE", "--set", "policy.seed=3"], None),
    (["--config", "FILE"], None)])                                                    # the file's: no such note
def test_a_refused_value_given_on_the_command_line_says_so(short_tmp, args, said):
    """A newcomer's `run --policy bandti` read 'config: [policy] unknown policy' with no config file given."""
    from click.testing import CliRunner

    from controller.daemon.main import main
    (short_tmp / "bad.toml").write_text('[policy]\nname = "bandti"\n')
    args = [str(short_tmp / "bad.toml") if a == "FILE" else a for a in args]
    res = CliRunner().invoke(main, ["run", *args, "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s")])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert ("given on the command line" not in lines[0]) if said is None else lines[0].endswith(said), lines


@pytest.mark.parametrize("level", ["CRITICAL", "critical"])
def test_log_level_critical_on_the_command_line_starts_the_daemon(short_tmp, level):
    d = DaemonProc(short_tmp, "--concurrency", "1", "--log-level", level)
    try:
        d.wait_socket()
        assert d.call("GET", "/status")["daemon"]["running"]
    finally:
        assert d.stop() == 0
    assert "spec-controller ready" not in d.log_text()          # INFO held back at CRITICAL


def _events(db, kind):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT detail FROM events WHERE kind = ? ORDER BY id", [kind])]
    finally:
        conn.close()


def _hup_and_wait(d, count: int) -> list[str]:
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while len(_events(d.db, "reload")) < count and time.monotonic() < deadline and d.proc.poll() is None:
        time.sleep(0.1)
    return _events(d.db, "reload")


def test_a_bad_config_on_sighup_is_refused_and_the_daemon_keeps_the_old_one(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[guard]\nexplore_share = 0.05\n")
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text('[control]\nlog_level = "LOUD"\n[guard]\nexplore_share = 0.5\n')
        got = _hup_and_wait(d, 1)
        assert d.proc.poll() is None, d.log_text()        # the old code died here
        assert len(got) == 1 and got[0].startswith("refused: config: [control] log_level='LOUD'")
        assert d.call("GET", "/status")["daemon"]["running"]
        (short_tmp / "config.toml").write_text("[guard]\nexplore_share = 0.02\n")
        assert _hup_and_wait(d, 2)[1] == "guard, retention, min_free_mb and log level re-read"
    finally:
        assert d.stop() == 0
