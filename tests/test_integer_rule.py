"""One rule for an integer an operator writes as text, wherever it crosses into the product (controller/numtext.py):
ASCII digits, a '-' before them at most, no leading zeros, nothing around them: the integer grammar of JSON, which the
control API's bodies already had. `specctl threshold pin " 5"` and `pin 05` were taken (Bounded stripped the spaces,
int_text took leading zeros) while `pin +5` was refused; `--param threshold=" 5"`, a policy parameter written "5.0" or
"1e1", 5.0 in a config's [policy.params], `--set guard.min_threshold=+5` (TOML) and SPEC_CONTROLLER_DRAFT_KV_COALESCE="08"
were all taken too. A number's digits before its point follow it (0.5, not 05.5 or 00.5)."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.contract import ENV_DRAFT_KV_COALESCE
from controller.envwords import env_int, operator_value_problem
from controller.numtext import decimal_text, int_text
from policies import PolicyError, make_policy
from tests.conftest import saved_settings

OTHERWISE = [" 5", "5 ", "05", "-05", "00", "+5", "5\n", "\t5"]


@pytest.mark.parametrize("text", OTHERWISE)
def test_an_integer_written_otherwise_is_none(text):
    assert int_text(text) is None and env_int(text) is None


@pytest.mark.parametrize("text,value", [("0", 0), ("5", 5), ("-5", -5), ("10", 10), ("100", 100)])
def test_an_integer_written_plainly_is_read(text, value):
    assert int_text(text) == value


@pytest.mark.parametrize("text", [" 0.5", "0.5 ", "05", "05.5", "00.5", "+0.5", "-05.5", "01e3"])
def test_a_number_written_otherwise_is_none(text):
    assert decimal_text(text) is None


@pytest.mark.parametrize("text,value", [("0", 0.0), ("0.5", 0.5), (".5", 0.5), ("5.", 5.0), ("-0.5", -0.5),
                                        ("1e-05", 1e-05), ("10.25", 10.25), ("0e0", 0.0)])
def test_a_number_written_plainly_is_read(text, value):
    assert decimal_text(text) == value




@pytest.mark.parametrize("text", OTHERWISE)
def test_a_pin_written_otherwise_is_one_usage_line_and_saves_nothing(offline, text):
    flags, db = offline
    res = CliRunner().invoke(cli, [*flags, "threshold", "pin", text], prog_name="specctl")
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.output
    assert res.stderr.startswith(f"specctl: threshold {text!r} is not an integer (ASCII digits"), res.stderr
    assert "pinned" not in saved_settings(db)


@pytest.mark.parametrize("argv", [["history", "--limit", "05"], ["history", "--limit", " 5"],
                                  ["simulate", "--seed", "07", "--seconds", "1"],
                                  ["simulate", "--concurrency", " 4", "--seconds", "1"],
                                  ["simulate", "--concurrency", "4,08", "--seconds", "1"],
                                  ["simulate", "--arrival-rate", "02.5", "--seconds", "1"],
                                  ["stop", "--timeout", " 5"]])
def test_specctls_other_numbers_follow_the_same_rule(offline, argv):
    flags, _ = offline
    res = CliRunner().invoke(cli, [*flags, *argv], prog_name="specctl")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "ASCII digits" in res.stderr, res.output


def test_a_list_keeps_its_spaces_after_commas(offline):
    from controller.cli.options import number_list
    assert number_list("1, 4 ,16", int, "--concurrency") == [1, 4, 16]


@pytest.mark.parametrize("flag,value", [("--concurrency", "04"), ("--concurrency", " 4"), ("--metrics-port", "09100"),
                                        ("--speed", "05")])
def test_the_daemons_number_flags_follow_it(flag, value, monkeypatch):
    from controller.daemon import logs
    from controller.daemon.main import main
    monkeypatch.setattr(logs, "setup", lambda level: None)
    res = CliRunner().invoke(main, ["run", flag, value, "--db", "/nonexistent-h118/x.db"])
    assert res.exit_code == 2 and res.output.startswith(f"spec-controller: {flag} {value!r} is not "), res.output
    assert res.output.count("\n") == 1


@pytest.mark.parametrize("raw", ["05", " 5", "5 ", "5.0", "1e1", 5.0, "+5"])
def test_an_integer_parameter_written_otherwise_is_refused(raw):
    with pytest.raises(PolicyError, match="is not an integer"):
        make_policy("fixed", {"threshold": raw})
    assert make_policy("fixed", {"threshold": "7"}).params["threshold"] == 7
    assert make_policy("fixed", {"threshold": 7}).params["threshold"] == 7


@pytest.mark.parametrize("raw", ["01.5", " 1.5", "+1.5"])
def test_a_number_parameter_written_otherwise_is_refused(raw):
    with pytest.raises(PolicyError, match="is not a number"):
        make_policy("ucb", {"c": raw})
    assert make_policy("ucb", {"c": "1.5"}).params["c"] == 1.5 and make_policy("ucb", {"c": 2}).params["c"] == 2


def test_param_on_the_command_line_follows_it_and_saves_nothing(offline):
    flags, db = offline
    before = saved_settings(db)
    res = CliRunner().invoke(cli, [*flags, "policy", "set", "fixed", "--param", "threshold=05"], prog_name="specctl")
    assert res.exit_code == 2 and "is not an integer" in res.stderr and saved_settings(db) == before, res.output
    res = CliRunner().invoke(cli, [*flags, "policy", "set", "fixed", "--param", "threshold = 6"], prog_name="specctl")
    assert res.exit_code == 0 and saved_settings(db)["policy"]["params"] == {"threshold": "6"}, res.output  # (the pair's spaces)


def test_the_apis_policy_params_follow_it(short_tmp):
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp, policy="fixed")
    try:
        for raw in ("05", " 5", 5.0):
            with pytest.raises(PolicyError):
                svc.set_policy("fixed", {"threshold": raw})
        assert svc.loop.policy.params["threshold"] == 5 and svc.set_policy("fixed", {"threshold": "6"})
    finally:
        writer.stop()


@pytest.mark.parametrize("setting", ["guard.min_threshold=+5", "guard.min_threshold=1_0", "sim.concurrency=0x10",
                                     "guard.min_threshold=05", "sim.speed=+2.5", "sim.speed=inf",
                                     "policy.params.threshold=05"])
def test_set_on_the_command_line_follows_it(setting):
    from controller.daemon.main import main
    res = CliRunner().invoke(main, ["config", "check", "--set", "policy.name=fixed", "--set", setting])
    assert res.exit_code == 2 and res.output.startswith("spec-controller: ") and res.output.count("\n") == 1, res.output


@pytest.mark.parametrize("setting", ["guard.min_threshold=5", "guard.min_threshold = 5", "sim.speed=2.5",
                                     "sim.speed=1e1", "guard.min_threshold=0"])
def test_set_written_plainly_is_taken(setting):
    from controller.daemon.config import load_config
    from controller.daemon.setpairs import parse_set
    key = setting.split("=")[0].strip().split(".")
    value = load_config(None, parse_set([setting]))[key[0]][key[1]]
    assert value == float(setting.split("=")[1]) and not isinstance(value, str)


@pytest.mark.parametrize("value", ["08", " 8", "8 ", "+8"])
def test_the_plugins_integer_variable_follows_it(value):
    assert operator_value_problem(ENV_DRAFT_KV_COALESCE, value) == "must be an integer 0 .. 64"
    assert operator_value_problem(ENV_DRAFT_KV_COALESCE, "8") is None


@pytest.mark.parametrize("section,key", [("guard", "min_threshold"), ("sim", "concurrency"),
                                         ("policy.params", "threshold")])
def test_a_config_integer_written_as_a_float_is_refused_in_every_section(tmp_path, section, key):
    """[guard] min_threshold = 5.0 was taken (as 5) where [sim] concurrency = 5.0 was refused."""
    from controller.daemon.main import main
    path = tmp_path / "c.toml"
    path.write_text(f"[policy]\nname = \"fixed\"\n[{section}]\n{key} = 5.0\n")
    res = CliRunner().invoke(main, ["config", "check", "--config", str(path)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "5.0" in res.output, res.output
    path.write_text(f"[policy]\nname = \"fixed\"\n[{section}]\n{key} = 5\n")
    assert CliRunner().invoke(main, ["config", "check", "--config", str(path)]).exit_code == 0
