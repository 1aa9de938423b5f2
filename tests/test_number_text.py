"""Numbers given as text at a boundary are ASCII decimals (controller/numtext.py): int() and float() read "1_0" as 10
and "٣" as 3. The control API refused them already (test_api_hostile); helper-81 found specctl's arguments and the
policy parameters (specctl policy set --param, the API's string params, a config's) still took them."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.numtext import WRITTEN, decimal_text, int_text, written
from policies import PolicyError, make_policy
from tests.conftest import saved_settings

NOT_NUMBERS = ["1_0", "\u0663", "\u0661\u0660", "+5", "5-", "0x10", "nan", "inf", "1e", ".", "-", ""]


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_what_int_or_float_would_take_is_no_number_here(text):
    assert int_text(text) is None and decimal_text(text) is None


@pytest.mark.parametrize("text,integer,decimal", [("10", 10, 10.0), ("-3", -3, -3.0), ("0.25", None, 0.25),
                                                  ("1e-3", None, 0.001), (".5", None, 0.5), ("7.", None, 7.0),
                                                  ("2E+2", None, 200.0)])
def test_ascii_decimals_are_read(text, integer, decimal):
    assert int_text(text) == integer and decimal_text(text) == decimal




@pytest.mark.parametrize("text", ["1_0", "\u0663", "+5"])
def test_a_pin_written_otherwise_is_a_usage_error_and_saves_nothing(offline, text):
    flags, db = offline
    res = CliRunner().invoke(cli, [*flags, "threshold", "pin", text])
    assert res.exit_code == 2 and f"{text!r} is not an integer" in res.output and "pinned" not in saved_settings(db)
    res = CliRunner().invoke(cli, [*flags, "threshold", "pin", "10"])
    assert res.exit_code == 0 and saved_settings(db)["pinned"] == 10


@pytest.mark.parametrize("text", ["1_0", "\u0663", "\u0661\u0660", "nan"])
def test_a_policy_parameter_written_otherwise_is_refused(offline, text):
    with pytest.raises(PolicyError, match="is not an integer"):
        make_policy("fixed", {"threshold": text})
    flags, db = offline
    before = saved_settings(db)
    res = CliRunner().invoke(cli, [*flags, "policy", "set", "fixed", "--param", f"threshold={text}"])
    assert res.exit_code == 2 and "is not an integer" in res.output and saved_settings(db) == before
    assert make_policy("fixed", {"threshold": "10"}).params["threshold"] == 10       # (" 1e1 " was, numtext's rule no)


LONG = "9" * 5000           # past int()'s 4300-digit limit: int() raises ValueError


def test_an_integer_past_ints_digit_limit_is_no_number_not_a_traceback():
    assert int_text(LONG) is None and int_text("-" + LONG) is None and int_text("9" * 4300) is not None


@pytest.mark.parametrize("argv", [["simulate", "--concurrency", LONG, "--seconds", "1"], ["threshold", "pin", LONG]])
def test_specctl_refuses_a_too_long_integer_in_one_line(offline, argv):
    flags, _ = offline
    res = CliRunner().invoke(cli, [*flags, *argv])
    assert res.exit_code == 2 and not isinstance(res.exception, ValueError), repr(res.exception)
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output[-300:]


def test_runs_concurrency_refuses_a_too_long_integer_in_one_line(monkeypatch):
    """click's int type said 'is not a valid integer'; numtext's int_text (c159cfa) raised int()'s ValueError."""
    from controller.daemon import logs
    from controller.daemon.main import main
    monkeypatch.setattr(logs, "setup", lambda level: None)
    res = CliRunner().invoke(main, ["run", "--concurrency", LONG, "--db", "/nonexistent-h96/x.db"])
    assert res.exit_code == 2 and not isinstance(res.exception, ValueError), repr(res.exception)
    assert res.output.startswith("spec-controller: --concurrency ") and \
        res.output.strip().endswith(f"is not an integer ({WRITTEN})")


def test_a_number_refusal_says_the_point_and_exponent_are_allowed(offline):
    """helper-127: `--param half_life_s=x` said "ASCII digits, a '-' at most" (an integer's rule) for a parameter that
    takes 1.5; a number's refusal now names its point and exponent, an integer's stays as it was."""
    args, db = offline
    res = CliRunner().invoke(cli, [*args, "policy", "set", "bandit", "--param", "half_life_s=x"])
    assert res.exit_code == 2
    assert "is not a number (allowed 0.5 .. 3600; ASCII digits, a '.' and an exponent allowed (0.5, 1e-3)" in \
        res.output, res.output
    res = CliRunner().invoke(cli, [*args, "policy", "set", "fixed", "--param", "threshold=x"])
    assert res.exit_code == 2 and f"is not an integer (allowed 0 .. 65536; {written(int, 0)})" in res.output, res.output
