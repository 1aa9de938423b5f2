"""helper-128's fuzz re-run (bench/results/fuzz-2026-12-06.md), the inputs tried by hand:
- `--param` given twice echoed both values raw: a value or name holding a newline made the refusal two lines, and a
  5,000-character one was echoed whole (policy set and simulate; every other refusal of a parameter is cut short);
- `--set sim.speed=.5` was refused as "'.5' must be a number" (and `--set guard.explore_share=.5` told to "write it
  unquoted", as it was): .5 and 5. are numbers by numtext's rule, which `run --speed .5` takes, and --set's help says
  it takes a number as the flags do; TOML alone does not read them;
- a section's name given as a [guard] setting (`[guard] storage = 1`) got no hint, where every other section's
  refusal says '[storage] is a section of its own'."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.config import ConfigError, load_config
from controller.daemon.setpairs import parse_set
from controller.daemon.main import main
from policies import PolicyError, parse_kv


@pytest.mark.parametrize("pairs", [["c=1", "c=2\nx"], ["c\nd=1", "c\nd=2"], ["c=1", "c=" + "9" * 5000],
                                   ["a" * 5000 + "=1", "a" * 5000 + "=2"], ["x" * 5000]])
def test_a_parameter_refused_by_parse_kv_is_one_short_line(pairs):
    with pytest.raises(PolicyError) as err:
        parse_kv(pairs)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300, str(err.value)[:400]


@pytest.mark.parametrize("command", [["policy", "set", "ucb"], ["simulate", "--policy", "ucb", "--seconds", "1"]])
def test_specctl_says_a_parameter_given_twice_in_one_line(command, tmp_path):
    res = CliRunner().invoke(cli, command + ["--param", "c=1", "--param", "c=2\nx"],
                             env={"XDG_STATE_HOME": str(tmp_path), "SPECCTL_SOCKET": None, "SPECCTL_DB": None})
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("specctl: parameter 'c' given twice"), res.output


@pytest.mark.parametrize("raw,value", [(".5", 0.5), ("5.", 5.0), ("-.5", -0.5), ("2.e1", 20.0), (".5e1", 5.0)])
def test_set_takes_a_number_as_the_flags_take_one(raw, value):
    assert parse_set([f"sim.speed={raw}"]) == {"sim": {"speed": value}}


@pytest.mark.parametrize("setting", ["sim.speed=.5", "sim.speed=5.", "guard.explore_share=.5", "policy.params.c=.5"])
def test_config_check_takes_a_set_number_toml_does_not_read(setting):
    res = CliRunner().invoke(main, ["config", "check", "--set", "policy.name=ucb", "--set", setting])
    assert res.exit_code == 0, res.output


def test_set_text_that_is_no_number_is_still_text():
    assert parse_set(["sim.trace=.x", "sim.profile=5.5.5"]) == {"sim": {"trace": ".x", "profile": "5.5.5"}}
    with pytest.raises(ConfigError, match=r"^config: \[sim\] concurrency=0.5 must be an integer$"):
        load_config(None, parse_set(["sim.concurrency=.5"]))


@pytest.mark.parametrize("name", ["storage", "sim", "policy", "control"])
def test_a_section_given_as_a_guard_setting_says_it_is_a_section(name):
    with pytest.raises(ConfigError, match=rf"^config: \[guard\] unknown guard setting '{name}' \(\[{name}\] is a "
                                          "section of its own; known: "):
        load_config(None, {"guard": {name: 1}})
