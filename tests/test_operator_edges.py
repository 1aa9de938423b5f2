"""Edges of today's operator surface (config from-launch, config check, usage hints, status wording) that the
2026-12-05 mutation pass found untested (bench/results/mutation-operator-2026-12-05.md): each kills a mutant that survived."""
import importlib.util
import sys
import tomllib

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon import launchcfg
from controller.daemon.launchcfg import interpreter
from controller.daemon.launchcmd import CommandError, path_notes, split_command
from controller.daemon.main import main
from tests.test_launchcmd import SPEC, _fake, from_launch, one_line

PY = ["python", "-m", "sglang.launch_server"]


# --- launchcmd.split_command -------------------------------------------------------------------------------------
@pytest.mark.parametrize("command,expected", [
    (["CUDA_VISIBLE_DEVICES=", *PY], ({"CUDA_VISIBLE_DEVICES": ""}, "python", [], [])),          # L01
    (["A=x\ny", *PY], ({"A": "x\ny"}, "python", [], [])),                                          # L02
    (["OPTS=a=b", *PY], ({"OPTS": "a=b"}, "python", [], [])),                                      # L09
    (["A=1"], ({"A": "1"}, None, [], [])),                                                         # L13
    (["env"], ({}, None, [], [])),                                                                 # L13
    (["python -m sglang.launch_server \\\r\n  --model-path m"], ({}, "python", ["--model-path", "m"], [])),  # L05
    (["sglang", "serve", "--model-type=llm", "m"], ({}, None, ["--model-path", "m"],                # L17
                                                    ["--model-type llm left out (launch_server serves language models)"])),
    (["sglang", "serve", "m", "--model-type", "auto"], ({}, None, ["--model-path", "m"],             # L16
                                                        ["--model-type auto left out (launch_server serves language models)"])),
])
def test_split_command_more_shapes(command, expected):
    assert split_command(command) == expected


@pytest.mark.parametrize("command,needle", [
    (["python -m sglang.launch_server --model-path ${MODEL}"], "shell variables"),               # L06
    (["python", "sglang.launch_server", "--model-path", "m"], "expected 'python -m sglang.launch_server'"),  # L14
    (["python", "-c", "sglang.launch_server"], "expected 'python -m sglang.launch_server'"),      # L14
    (["sglang", "serve", "m", "--version"], "--version prints and exits"),                       # L04
])
def test_split_command_more_refusals(command, needle):
    with pytest.raises(CommandError) as err:
        split_command(command)
    assert needle in str(err.value)


def test_path_notes_run_user_and_empty_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert path_notes({"x": "/run/user/1000/m"}) == [                                            # L18
        "x = /run/user/1000/m: the service cannot read home directories (ProtectHome); move it"]
    assert path_notes({"api_key": "", "env": {"CUDA_VISIBLE_DEVICES": ""}}) == []                # L20
    assert path_notes({"model_path": "/usr"}) == []                                   # (an absolute path that exists)
    assert path_notes({"model_path": "meta-llama/Llama-3.1-8B"}) == []                # (a hub id, nothing here)
    assert path_notes({"model_path": "./models/t"}) == [                              # (helper-66: missing, but a path)
        f"model_path = ./models/t names {tmp_path / 'models' / 't'} here; the service runs in /: give the absolute "
        "path if it is one"]


# --- the parser process ------------------------------------------------------------------------------------------
def test_the_parsers_last_line_is_the_one_said_and_it_is_cut(tmp_path):
    python = _fake(tmp_path, "python", "echo 'Traceback (most recent call last):' >&2; echo 'fatal: broken venv' >&2; exit 3")
    one_line(from_launch("--python", python, "--", "--model-path", "m", *SPEC), "stopped: fatal: broken venv", 1)  # C01
    python = _fake(tmp_path, "python2x", 'head -c 5000 /dev/zero | tr "\\0" x >&2; exit 1')
    res = from_launch("--python", python, "--", "--model-path", "m", *SPEC)
    assert res.exit_code == 1 and len(res.output) < 500 and res.output.rstrip().endswith("..."), res.output   # C02


def test_the_interpreter_is_kept_absolute_and_a_missing_path_says_why(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    _fake(tmp_path / "bin", "python", "exit 0")
    monkeypatch.chdir(tmp_path)
    assert interpreter("bin/python") == str(tmp_path / "bin" / "python")                        # C06
    one_line(from_launch("--python", "/nonexistent/python", "--", "--model-path", "m"),          # C05
             "cannot run /nonexistent/python: No such file or directory", 1)


ITEMS = ('{"version": "9.9", "items": [["--model-path", "/home/u/m", "model_path"], '
         '["--speculative-algorithm", "EAGLE3", "speculative_algorithm"]]}')


def _parser(tmp_path, differ: str) -> str:
    """A stand-in for launchparse.py: the items, then the round trip's answer."""
    return _fake(tmp_path, "python", f"read -r l; echo '{ITEMS}' >&\"$2\"; read -r l; "
                                     f"echo '{{\"version\": \"9.9\", \"differ\": {differ}}}' >&\"$2\"; cat >/dev/null")


def test_a_section_that_would_launch_another_server_prints_nothing(tmp_path):
    python = _parser(tmp_path, '["tp_size", "port"]')
    res = from_launch("--python", python, "-o", str(tmp_path / "c.toml"), "--", "--model-path", "/home/u/m", *SPEC)
    one_line(res, "the section would not launch what the command does (tp_size differ)", 2)     # C12
    assert not (tmp_path / "c.toml").exists()


def test_the_printed_config_comes_with_its_notes_on_stderr(tmp_path, monkeypatch):
    python = _parser(tmp_path, '["speculative_eagle_topk"]')
    res = from_launch("--python", python, "--", "--model-path", "/home/u/m", *SPEC)
    assert res.exit_code == 0 and tomllib.loads(res.stdout)["sglang"]["model_path"] == "/home/u/m", res.output
    assert "spec-controller: note: model_path = /home/u/m: the service cannot read home directories" in res.stderr  # C13
    assert "the daemon sets speculative_eagle_topk = 1 (your command left it to SGLang)" in res.stderr
    monkeypatch.setattr(launchcfg.sys, "executable", python)           # no --python: the interpreter it runs
    res = from_launch("--", *PY, "--model-path", "/home/u/m", *SPEC)
    assert res.exit_code == 0 and "your command ran" not in res.stderr, res.output              # C14
    res = from_launch("--", "/opt/v/bin/python", *PY[1:], "--model-path", "/home/u/m", *SPEC)
    assert "your command ran /opt/v/bin/python" in res.stderr, res.output
    (tmp_path / "sglang").write_text("#!/opt/v/bin/python3.12\n")
    res = from_launch("--", str(tmp_path / "sglang"), "serve", "--model-path", "/home/u/m", *SPEC)
    assert f"your command ran {tmp_path / 'sglang'}; " in res.stderr and "--python /opt/v/bin/python3.12 keeps" in \
        res.stderr, res.output


def test_a_write_that_fails_is_one_line_exit_1(tmp_path):
    python = _parser(tmp_path, "[]")
    target = tmp_path / "no-dir" / "c.toml"
    res = from_launch("--python", python, "-o", str(target), "--", "--model-path", "/m", *SPEC)     # D08
    assert res.exit_code == 1 and res.stdout == "" and res.stderr.splitlines()[-1] == \
        f"spec-controller: cannot write {target}: No such file or directory; nothing written", res.output


def test_words_after_the_first_are_the_commands_not_from_launchs(tmp_path):
    one_line(from_launch("--python", "/nonexistent/python", "vllm", "serve", "m", "--help"), "--help prints and exits", 2)  # D09


# --- config check ------------------------------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="this interpreter has SGLang")
def test_check_of_an_sglang_config_run_by_this_interpreter_needs_sglang_here(tmp_path):
    (tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\n'
                                     'speculative_algorithm = "EAGLE3"\n')
    one_line(CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")]),   # D03
             "has no sglang installed", 2)


def test_check_names_an_open_loop_load(tmp_path):
    (tmp_path / "c.toml").write_text('[sim]\narrival_rate = 2.5\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and "(engine sim: 2.5 requests/s, profile crossover-b; policy" in res.stdout, res.output   # D07


# --- usage hints, status ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,expected", [
    (["status", "--jsn"], "specctl: no such option '--jsn' (did you mean '--json'?)"),                 # O01
    (["policy", "set", "fixed", "foo"], "specctl: got unexpected extra argument (foo) (usage: specctl policy set "
                                        "[OPTIONS] NAME)"),                                            # O02
    (["policy", "show", "a=1"], "specctl: got unexpected extra argument (a=1) (policy show takes no name: it shows "
                                "the active policy; 'specctl policy list' shows every policy and its parameters)"),  # O03
    (["policy", "show", "ucb"], "specctl: got unexpected extra argument (ucb) (policy show takes no name: it shows "
                                "the active policy; 'specctl policy list' shows every policy and its parameters)"),
    (["history", "ucb"], "specctl: got unexpected extra argument (ucb) (usage: specctl history [OPTIONS])"),
    (["policy", "set", "fixed", "threshold=12", "x=1"], "specctl: got unexpected extra arguments (threshold=12 x=1) "
                                                        "(did you mean '--param threshold=12 --param x=1'?)"),     # O04
])
def test_usage_error_lines_exactly(args, expected):
    res = CliRunner().invoke(cli, args, prog_name="specctl")
    assert res.exit_code == 2 and res.output.strip() == expected, res.output


def test_the_no_speculation_acceptance_line_names_no_window():
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 5, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 0, "window_s": 30.0, "mean_accept_length": None, "last_accept_length": 2.5,
          "last_accept_age_s": 42.0, "tok_per_s": 1.0, "spec_share": 0.0, "samples": {"per_s": 1.0, "total": 9}}
    assert "acceptance:  no speculative batch in the live window; the last one's accept length 2.50, 42 s ago" \
        in render_status(st).splitlines()                                                             # S03


def test_an_acceptance_nothing_measured_says_so_instead_of_dashes():
    """helper-171: a restart pinned below the load speculated nothing, and status read 'mean accept length -, rate -,
    in the last 30 simulated s': it says why there is no figure, live and read from the database."""
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 5, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 20, "window_s": 30.0, "mean_accept_length": None, "acceptance_rate": None,
          "last_accept_length": None, "tok_per_s": 3550.0, "spec_share": 0.0, "samples": {"per_s": 1.0, "total": 9}}
    assert "acceptance:  no speculative batch yet this run: nothing to measure acceptance by" \
        in render_status(st).splitlines()
    st["daemon"] = {"running": False, "db": "/x.db", "problems": []}
    assert "acceptance:  no speculative batch among the last stored samples" in render_status(st).splitlines()


def test_status_before_any_sample_or_policy_says_so_instead_of_dashes():
    """helper-171: a pin saved before the first start (a real database, no sample, no policy in it) read 'policy:
    -' and 'throughput:  - tok/s, speculating - of batches'; a daemon before its first batch read the same line."""
    from controller.cli.status import render_status
    runner = CliRunner()
    assert runner.invoke(cli, ["threshold", "pin", "5"]).exit_code == 0
    res = runner.invoke(cli, ["status"])
    assert res.exit_code == 3, res.output
    lines = res.stdout.splitlines()
    assert "policy:      - (none saved: a start runs the config's [policy] name, bandit unless set)" in lines, lines
    assert "throughput:  no sample stored" in lines, lines
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 1, "healthy": True}, "engine": {"engine": "sglang"},
          "threshold": 0, "policy": {"name": "bandit", "policy": "thompson"}, "window_s": 30.0, "tok_per_s": None,
          "spec_share": None, "samples": {"per_s": None, "total": 0}}
    assert "throughput:  no decode batch yet this run" in render_status(st).splitlines()


def test_what_the_daemon_passes_itself_is_left_out_and_what_it_chooses_is_written(tmp_path, monkeypatch):
    from controller.daemon.engines import child     # (conftest moves the section's default: back to the product's own,
    monkeypatch.setattr("controller.daemon.engines.sglang_section.SGLANG_PORT", child.SGLANG_PORT)   # SGLang's 30000)
    items = ('{"version": "9.9", "items": [["--model-path", "/m", "model_path"], ["--speculative-algorithm", "EAGLE3", '
             '"speculative_algorithm"], ["--speculative-adaptive", true, "speculative_adaptive"], '
             '["--speculative-adaptive-config", "/x.json", "speculative_adaptive_config"]]}')
    python = _fake(tmp_path, "python", f"read -r l; echo '{items}' >&\"$2\"; read -r l; "
                                       "echo '{\"version\": \"9.9\", \"differ\": []}' >&\"$2\"; cat >/dev/null")
    res = from_launch("--python", python, "--", "--model-path", "/m", *SPEC)
    t = tomllib.loads(res.stdout)["sglang"]
    assert "speculative_adaptive" not in t and "speculative_adaptive_config" not in t, t                      # C08
    assert "speculative_adaptive_config left out: the daemon passes it itself" in res.stderr, res.stderr      # C07
    assert (t["speculative_num_steps"], t["speculative_eagle_topk"], t["host"], t["port"]) == (3, 1, "127.0.0.1", 30000)  # C10



@pytest.mark.parametrize("text,noted", [("", True), ("# spec-controller config\n\n", True), ("[sim]\nspeed = 2\n", False)])
def test_check_of_a_file_that_sets_nothing_says_it_runs_the_simulator(tmp_path, text, noted):
    """A `from-launch > FILE` that failed leaves FILE empty: run would start the simulator, not SGLang."""
    (tmp_path / "c.toml").write_text(text)
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and "ok (engine sim" in res.stdout
    assert ("sets nothing: run takes every default, the simulator (engine sim), and starts no SGLang" in res.stderr) \
        == noted, res.stderr


def test_the_simulator_under_systemd_is_said_at_start(short_tmp):
    from tests.daemon_proc import DaemonProc
    d = DaemonProc(short_tmp, "--concurrency", "2", env_extra={"INVOCATION_ID": "0123456789abcdef"})   # (systemd's)
    try:
        d.wait_socket()
    finally:
        d.stop()
    assert "engine sim under systemd: the simulator starts no SGLang and serves no requests" in d.log_text()


# --- the interpreter the command names, where the daemon's has no SGLang (helper-66, SGLang 0.5.23) ---------------
@pytest.mark.parametrize("launcher", [["bin/python", *PY[1:]], ["bin/sglang", "serve"]])
def test_the_commands_own_interpreter_parses_where_the_daemons_has_no_sglang(tmp_path, monkeypatch, launcher):
    """An operator pasted `/opt/sglang/bin/python -m sglang.launch_server ...` (or that venv's `sglang serve`) and got
    "No module named 'sglang'" from the daemon's interpreter: the named one is used and written as [sglang] python."""
    bare = _fake(tmp_path, "bare", "read -r l; echo '{\"error\": \"ModuleNotFoundError: no sglang\"}' >&\"$2\"")
    monkeypatch.setattr(launchcfg.sys, "executable", bare)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    named = _parser(tmp_path / "venv" / "bin", "[]")
    (tmp_path / "venv" / "bin" / "sglang").write_text(f"#!{named}\n# a console script\n")      # (pip writes these)
    out = tmp_path / "c.toml"
    res = from_launch("-o", str(out), "--", str(tmp_path / "venv" / launcher[0]), *launcher[1:], "--model-path",
                      "/home/u/m", *SPEC)
    assert res.exit_code == 0, res.output
    assert tomllib.loads(out.read_text())["sglang"]["python"] == str(named)
    assert f"python = {named} written: the interpreter your command names" in res.stderr, res.stderr
    res = from_launch("-o", str(tmp_path / "d.toml"), "--", *PY, "--model-path", "/home/u/m", *SPEC)   # (bare python)
    one_line(res, "ModuleNotFoundError: no sglang (in " + str(bare), 1)
    assert not (tmp_path / "d.toml").exists()


@pytest.mark.parametrize("first", ["#!/usr/bin/env python3\n", "no shebang\n"])
def test_a_sglang_script_without_its_interpreters_path_asks_for_python(tmp_path, monkeypatch, first):
    bare = _fake(tmp_path, "bare", "read -r l; echo '{\"error\": \"ModuleNotFoundError: no sglang\"}' >&\"$2\"")
    monkeypatch.setattr(launchcfg.sys, "executable", bare)
    (tmp_path / "sglang").write_text(first)
    one_line(from_launch("--", str(tmp_path / "sglang"), "serve", "--model-path", "/m", *SPEC),
             "does not name its interpreter by path", 1)
