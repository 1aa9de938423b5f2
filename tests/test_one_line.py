"""A refusal is one line whatever the operator's input holds: a path or a config name with a newline (or a terminal's
escape character) printed its message over several lines, unescaped (helper-129's fuzz re-run: `specctl --db
$'/tmp/a\\nb.db' status` 3 lines, `config check --config $'/tmp/a\\nb.toml'` and a SIGHUP reload's refusal alike).
fail_as (both command lines), the daemon's notes and a reload's refusal write control characters as escapes."""
import types

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.config import load_config
from controller.daemon.lifecycle import Daemon
from controller.daemon.main import main
from controller.numtext import one_line
from tests.conftest import repeat_filtered


def test_one_line_writes_control_characters_as_escapes_and_keeps_the_rest():
    assert one_line("a\nb\r\tc\x1b[31md\x7f\x85e") == "a\\nb\\r\\tc\\x1b[31md\\x7f\\x85e"
    assert one_line("é ü → ок 日本 'x' \"y\" \\") == "é ü → ок 日本 'x' \"y\" \\"


@pytest.mark.parametrize("args", [["--db", "/tmp/sc-one\nline.db", "status"],
                                  ["--socket", "/tmp/sc-one\nline/x.sock", "threshold", "pin", "3"],
                                  ["--db", "/tmp/sc-one\x1b[2Jline.db", "history"]])
def test_specctl_says_a_path_holding_control_characters_in_one_line(args, tmp_path):
    res = CliRunner().invoke(cli, args, env={"XDG_STATE_HOME": str(tmp_path), "SPECCTL_SOCKET": None,
                                             "SPECCTL_DB": None})
    assert res.exit_code != 0 and res.output.count("\n") == 1, res.output
    assert "sc-one\\n" in res.output or "sc-one\\x1b" in res.output, res.output
    assert "\x1b" not in res.output


@pytest.mark.parametrize("args", [["config", "check", "--config", "/tmp/sc-one\nline.toml"],
                                  ["config", "check", "--set", "sim.trace=/tmp/sc-one\nline.toml"]])
def test_the_daemons_command_line_says_it_in_one_line_too(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and res.output.count("\n") == 1, res.output
    assert "sc-one\\nline" in res.output, res.output


def _refused_reload(tmp_path, text: str) -> tuple[list[str], list[str]]:
    """(the log lines, the events) of a SIGHUP reload that finds `text` in the config the daemon started with."""
    config = tmp_path / "c.toml"
    config.write_text("[sim]\nconcurrency = 24\n")
    daemon = types.SimpleNamespace(cfg={**load_config(config), "_overrides": None})
    events = []
    service = types.SimpleNamespace(writer=types.SimpleNamespace(event=lambda kind, text: events.append(text)),
                                    job_errors={}, job_failing={})
    config.write_text(text)
    with repeat_filtered() as records:
        Daemon._reload(daemon, service)
    return [r.getMessage() for r in records], events


def test_a_refused_reload_is_one_log_line_and_one_event(tmp_path):
    got, events = _refused_reload(tmp_path, '["si\\nm"]\nconcurrency = 24\n')     # a section named "si<newline>m"
    assert len(got) == 1 and "\n" not in got[0] and "si\\nm" in got[0], got
    assert len(events) == 1 and "\n" not in events[0] and "si\\nm" in events[0], events


@pytest.mark.parametrize("text", ['["{big}"]\nx = 1\n', '[sim]\n"{big}" = 1\n', '[sim]\nprofile = "{big}"\n',
                                  '[guard]\n"{big}" = 1\n'])
def test_a_config_refusal_echoing_a_huge_name_or_value_is_cut_in_its_middle(tmp_path, text):
    """helper-129: a 1 MB key was a 1 MB line (and at a reload a log line and an events row as long)."""
    config = tmp_path / "c.toml"
    config.write_text(text.format(big="k" * 1_000_000))
    res = CliRunner().invoke(main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output[:300]
    assert len(res.output) <= 1100 and "characters left out)..." in res.output, res.output
    assert res.output.startswith("spec-controller: config: "), res.output[:200]


def test_a_refused_reload_echoing_a_huge_key_is_a_bounded_log_line_and_event(tmp_path):
    got, events = _refused_reload(tmp_path, f'[sim]\n"{"k" * 100_000}" = 1\n')
    assert len(got) == 1 and len(got[0]) <= 1050 and got[0].endswith("speed, seed)"), got[0][-200:]
    assert len(events) == 1 and len(events[0]) <= 1050, len(events[0])


def test_one_line_keeps_a_line_up_to_its_bound_whole():
    line = "x" * 1000
    assert one_line(line) == line and len(one_line(line + "y" * 41)) <= 1000 and one_line(line + "y")[-1] == "y"


@pytest.mark.parametrize("change", [["threshold", "pin", "3"], ["threshold", "unpin"], ["policy", "set", "bandit"]])
def test_an_offline_change_saved_to_a_path_holding_a_newline_says_so_in_one_line(tmp_path, change):
    """helper-130: `specctl --db $'/tmp/x/a\\nb.db' threshold pin 3` said 'saved to ...' over two lines, exit 0."""
    from state.db import open_store
    db = tmp_path / "a\nb.db"
    open_store(db).conn.close()
    if change[-1] == "unpin":
        CliRunner().invoke(cli, ["--db", str(db), "--socket", str(tmp_path / "s.sock"), "threshold", "pin", "5"])
    res = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(tmp_path / "s.sock"), *change])
    assert res.exit_code == 0 and res.output.count("\n") == 1, res.output
    assert "saved to " in res.output and "a\\nb.db" in res.output, res.output


def test_a_plot_written_to_a_path_holding_a_newline_is_named_in_one_line(tmp_path):
    png = tmp_path / "a\nb.png"
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--concurrency", "1", "--seconds", "5",
                                   "--plot", str(png)])
    assert res.exit_code == 0 and png.exists(), res.output
    assert res.stderr.splitlines() == [f"wrote {tmp_path}/a\\nb.png"], res.stderr
