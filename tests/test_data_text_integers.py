"""TOML and JSON read from a config, a profile or a trace (and --set VALUE): integers Python cannot print or count with,
and JSON keys given twice, are one line and exit 2 (numtext.data_text), not a traceback after the parse."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.main import main

HUGE = "1" + "0" * 5000                 # past int()'s 4300 digits: tomllib's and json's ValueError
WIDE = "0x1" + "0" * 300                # a hex integer of 1201 bits: parsed, then float() or repr() of it raised
TRACE = "[[segment]]\nseconds = 5\nconcurrency = {}\n"


def _one_line(result, prog: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{prog}: "), line
    return line


@pytest.mark.parametrize("number,said", [(HUGE, "an integer of over 4300 digits"),
                                         (WIDE, "segment[0].concurrency: an integer past 64 bits")])
def test_a_trace_integer_too_large_is_one_line(tmp_path, number, said):
    trace = tmp_path / "t.toml"
    trace.write_text(TRACE.format(number))
    line = _one_line(CliRunner().invoke(cli, ["simulate", "--trace", str(trace)]), "specctl")
    assert line.startswith(f"specctl: trace {trace}: not valid TOML ({said}"), line


def test_a_json_profile_integer_too_large_is_one_line(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"segment": [{"seconds": 5, "concurrency": %s}]}' % HUGE)
    line = _one_line(CliRunner().invoke(cli, ["simulate", "--trace", str(trace)]), "specctl")
    assert "not valid JSON (an integer of over 4300 digits)" in line, line


def test_a_json_trace_key_given_twice_is_refused_not_the_last_taken(tmp_path):
    """json.loads kept the last "segment": the trace simulated was not the one the file's top said."""
    trace = tmp_path / "t.json"
    trace.write_text('{"segment": [{"seconds": 5, "concurrency": 4}], "segment": [{"seconds": 3, "concurrency": 2}]}')
    line = _one_line(CliRunner().invoke(cli, ["simulate", "--trace", str(trace)]), "specctl")
    assert "not valid JSON (key 'segment' given twice)" in line, line


@pytest.mark.parametrize("number,said", [(HUGE, "not valid TOML (an integer of over 4300 digits)"),
                                         (WIDE, "not valid TOML (sim.speed: an integer past 64 bits"),
                                         ("-9223372036854775809", "not valid TOML (sim.speed: an integer past 64")])
def test_a_config_integer_too_large_is_one_line(tmp_path, number, said):
    config = tmp_path / "c.toml"
    config.write_text(f"[sim]\nspeed = {number}\n")
    line = _one_line(CliRunner().invoke(main, ["config", "check", "--config", str(config)]), "spec-controller")
    assert f"config file {config}: {said}" in line, line


@pytest.mark.parametrize("key,value,said", [
    ("sim.speed", HUGE, "[sim] speed=inf out of range"),
    ("guard.min_threshold", "99999999999999999999", "min_threshold=99999999999999999999 out of range"),   # (an integer)
    ("policy.params", f"{{scale={HUGE}}}", "[policy] params must be a table")])
def test_a_set_integer_too_large_is_one_line(tmp_path, key, value, said):
    (tmp_path / "c.toml").write_text("")
    line = _one_line(CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml"),
                                               "--set", f"{key}={value}"]), "spec-controller")
    assert said in line, line
