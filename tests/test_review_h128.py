"""helper-128's fuzz re-run (bench/results/fuzz-2026-12-06.md), the inputs tried by hand:
- `--param` given twice echoed both values raw: a value or name holding a newline made the refusal two lines, and a
  5,000-character one was echoed whole (policy set and simulate; every other refusal of a parameter is cut short)."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
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
