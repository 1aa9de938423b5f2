"""The simulated load is chosen once: a trace named on purpose, a concurrency or an arrival rate.
Before, `spec-controller run --concurrency 8 --trace mixed-shift` started and --concurrency silently
won (`specctl simulate` refuses the like combination)."""
import pytest

from controller.daemon.config import ConfigError, load_config, load_conflict
from tests.test_daemon_e2e import run_daemon_once


@pytest.mark.parametrize("overrides,names", [
    ({"sim": {"trace": "mixed-shift", "concurrency": 8}}, ["trace", "concurrency"]),
    ({"sim": {"trace": "load-steps", "arrival_rate": 2.0}}, ["trace", "arrival_rate"]),
    ({"sim": {"concurrency": 4, "arrival_rate": 2.0}}, ["concurrency", "arrival_rate"]),
])
def test_two_load_choices_are_refused_with_one_line(overrides, names):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    text = str(err.value)
    assert "\n" not in text and "give one of them" in text
    assert all(f"[sim] {n}" in text for n in names), text


@pytest.mark.parametrize("overrides", [{"sim": {"concurrency": 8}}, {"sim": {"arrival_rate": 3.0}},
                                       {"sim": {"trace": "load-steps"}}, {},
                                       {"sim": {"trace": "load-steps", "concurrency": 0}},
                                       {"engine": {"kind": "sglang"}, "sim": {"trace": "x", "concurrency": 2}}])
def test_one_choice_or_the_default_trace_is_taken(overrides):
    load_config(None, overrides)


def test_a_file_and_a_flag_that_clash_are_refused_too(tmp_path):
    (tmp_path / "c.toml").write_text('[sim]\ntrace = "load-steps"\n')
    with pytest.raises(ConfigError, match=r"\[sim\] trace .*\[sim\] concurrency"):
        load_config(tmp_path / "c.toml", {"sim": {"concurrency": 8}})


@pytest.mark.parametrize("toml,flags,hint", [
    ('[sim]\nconcurrency = 8\n', {"trace": "load-steps"},
     "c.toml sets [sim] concurrency: add --set sim.concurrency=0 or remove it there to choose the load on the command line"),
    ('[sim]\narrival_rate = 2.0\n', {"concurrency": 4},
     "c.toml sets [sim] arrival_rate: add --set sim.arrival_rate=0 or remove it there"),
    ('[sim]\ntrace = "load-steps"\n', {"concurrency": 8},
     "c.toml sets [sim] trace, which no flag unsets: remove it there to choose the load on the command line"),
])
def test_a_clash_of_the_file_and_the_command_line_says_how_to_give_the_command_lines(tmp_path, toml, flags, hint):
    """'Flags win over this file', but not the load's choice: the line said 'give one of them' to an operator who
    gave one (helper-160)."""
    (tmp_path / "c.toml").write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.toml", {"sim": flags})
    assert hint in str(err.value) and "\n" not in str(err.value), err.value
    if "trace" not in toml:         # the way it names works
        key = next(k for k in ("concurrency", "arrival_rate") if k in toml)
        load_config(tmp_path / "c.toml", {"sim": {**flags, key: 0}})


def test_a_clash_on_one_side_only_gets_no_file_hint(tmp_path):
    (tmp_path / "c.toml").write_text('[sim]\nconcurrency = 4\narrival_rate = 2.0\n')
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.toml", {"sim": {"speed": 3.0}})
    assert "sets [sim]" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(None, {"sim": {"trace": "load-steps", "concurrency": 8}})
    assert "sets [sim]" not in str(err.value)


def test_the_rule_names_simulates_flags():
    assert load_conflict(None, 8, 0) is None and load_conflict("t", 0, 0) is None
    assert "arrival_rate = 2 (--arrival-rate)" in load_conflict(None, 4, 2.0) and "trace = 't' (--trace)" in load_conflict("t", 3, 0)


def test_the_daemon_refuses_to_start_exit_2_one_line(short_tmp):
    res = run_daemon_once(short_tmp, "--concurrency", "8", "--trace", "mixed-shift", "--db", str(short_tmp / "x.db"),
                          "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("spec-controller: config: [sim] trace = 'mixed-shift' (--trace) and [sim] concurrency = 8 (--concurrency)")
    assert not (short_tmp / "x.db").exists()


@pytest.mark.parametrize("toml,expect", [
    ("", "[sglang] model_path is required"),
    ('[sglang]\nmodel_path = "m"\nspeculative_algorithm = "MEDUSA"\n', "(EAGLE, EAGLE3 or NEXTN is supported)"),
])
def test_a_bad_sglang_section_is_a_config_error_exit_2_one_line(short_tmp, toml, expect):
    """Building the engine only reads [sglang]: what it refuses is configuration (exit 2, as every bad value),
    not a failure of the engine (exit 1, which systemd would restart into the same refusal)."""
    import os
    import subprocess
    import sys

    from tests.daemon_proc import ROOT
    (short_tmp / "c.toml").write_text(toml)
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(short_tmp / "c.toml"),
                          "--engine", "sglang", "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert expect in lines[0], lines[0]
    assert not (short_tmp / "x.db").exists() and not (short_tmp / "x.db.lock").exists()   # nothing written


@pytest.mark.parametrize("flag", ["--db", "--socket"])
def test_a_given_path_in_a_directory_that_does_not_exist_is_refused_not_created(short_tmp, flag):
    """A typo in --db must not start the daemon on a fresh, empty state in a new directory."""
    paths = {"--db": short_tmp / "x.db", "--socket": short_tmp / "s"}
    paths[flag] = short_tmp / "typo" / "sub" / "file"
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(paths["--db"]), "--socket", str(paths["--socket"]))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"its directory {short_tmp / 'typo' / 'sub'} does not exist" in lines[0], lines[0]
    assert not (short_tmp / "typo").exists() and not (short_tmp / "x.db").exists()


@pytest.mark.parametrize("profile", ["seed", "crossover-a"])
def test_a_profile_the_default_trace_does_not_fit_is_told_to_take_a_load_of_its_own(tmp_path, profile):
    """helper-150: `run --profile seed` (no --trace) was refused as '[sim] trace (--trace): trace mixed-shift.toml
    segment 0: mean_accept_length=3.2 must be ...', a flag never given: the default load, which two of the four
    shipped profiles cannot run. The line names the profile and what to give it; a trace named on purpose is still
    the trace's refusal, and a load of its own runs."""
    from click.testing import CliRunner

    from controller.daemon.main import main
    (tmp_path / "e.toml").write_text("")
    base = ["config", "check", "--config", str(tmp_path / "e.toml"), "--db", str(tmp_path / "v.db")]
    res = CliRunner().invoke(main, [*base, "--profile", profile])
    line = res.stderr.strip().splitlines()[-1]
    assert res.exit_code == 2 and line.startswith(
        f"spec-controller: config: [sim] profile (--profile) {profile} does not fit the default load, [sim] trace "
        "mixed-shift: trace mixed-shift.toml segment 0: mean_accept_length=3.2") and "--concurrency N" in line, res.output
    res = CliRunner().invoke(main, [*base, "--profile", profile, "--trace", "mixed-shift"])
    assert res.exit_code == 2 and "config: [sim] trace (--trace): trace mixed-shift.toml" in res.stderr, res.output
    res = CliRunner().invoke(main, [*base, "--profile", profile, "--concurrency", "8"])
    assert res.exit_code == 0 and "ok (engine sim: 8 clients" in res.stdout, res.output
