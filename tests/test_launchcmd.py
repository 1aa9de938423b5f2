"""`spec-controller config from-launch` without SGLang: the command's words, the paths the service cannot see, the
TOML it writes, the parser script's own logic (on an argparse parser of SGLang's kinds of flag) and what an
interpreter that is not SGLang's does to it. (tests/test_launchcfg.py: against SGLang's own parser.)"""
import argparse
import ast
import json
import math
import os
import random
import shlex
import sys
import tomllib

import pytest
from click.testing import CliRunner

from controller.daemon import launchcfg, launchparse
from controller.daemon.engines.sglang_install import with_sglang
from controller.daemon.launchcfg import Converted, LaunchError, SGLangParser, toml_text, toml_value, write_whole
from controller.daemon.launchcmd import CommandError, path_notes, split_command
from controller.daemon.main import main

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d"]


def from_launch(*args: str):
    return CliRunner().invoke(main, ["config", "from-launch", *args])


def one_line(res, needle: str, code: int) -> None:
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == code and len(lines) == 1 and needle in lines[0], (res.output, res.exception)
    assert res.stdout == "", res.stdout                 # nothing printed but the line (on stderr)


# --- the command's words ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command,env,interpreter,argv,notes", [
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], {}, "python3", ["--model-path", "m"], []),
    (["CUDA_VISIBLE_DEVICES=0,1", "HF_HOME=/x", "/opt/v/bin/python", "-m", "sglang.launch_server", "--tp", "2"],
     {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/x"}, "/opt/v/bin/python", ["--tp", "2"], []),
    (["env", "A=1", "python", "-u", "-m", "sglang.launch_server"], {"A": "1"}, "python", [],
     ["python's -u left out (no bearing on the server)"]),
    (["sglang", "serve", "/models/t", "--tp", "2"], {}, None, ["--model-path", "/models/t", "--tp", "2"], []),
    (["A=1", "/usr/local/bin/sglang", "serve", "--model-type", "llm", "--model-path", "m"], {"A": "1"}, "/usr/local/bin/sglang",
     ["--model-path", "m"], ["--model-type llm left out (launch_server serves language models)"]),
    (["--model-path", "m", "--port", "1"], {}, None, ["--model-path", "m", "--port", "1"], []),
    (["A='x y' python -m sglang.launch_server --model-path 'a b'"], {"A": "x y"}, "python", ["--model-path", "a b"], []),
    (["python -m sglang.launch_server \\\n  --model-path m \\\n  --tp 2   # my server"], {}, "python",
     ["--model-path", "m", "--tp", "2"], []),                       # pasted over lines, with a comment
    (["export CUDA_VISIBLE_DEVICES=0,1\nexport SGLANG_X=1\npython3 -m sglang.launch_server --model-path m"],
     {"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_X": "1"}, "python3", ["--model-path", "m"], []),   # a script's lines
    (["export CUDA_VISIBLE_DEVICES=0,1; python3 -m sglang.launch_server --model-path 'a;b' --x=1;"],   # `;` as a newline
     {"CUDA_VISIBLE_DEVICES": "0,1"}, "python3", ["--model-path", "a;b", "--x=1"], []),            # (was "0,1;")
    (["#!/bin/bash\n# start it; then wait\nexport A=1 B=2\n\npython -m sglang.launch_server --t ';' --u \\; --v a#b "
      "# c;d\n"], {"A": "1", "B": "2"}, "python", ["--t", ";", "--u", ";", "--v", "a#b"], []),   # quoted, escaped, comments
    (["export SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION=1 A=1\npython -m sglang.launch_server --model-path m"], {"A": "1"},
     "python", ["--model-path", "m"], ["SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION left out: the daemon holds it off (SGLang "
                                       "runs in the daemon's process group, which its killpg would take down; the daemon "
                                       "stops SGLang itself)"]),    # a production script's: dropped, not refused
])
def test_the_command_splits_into_environment_interpreter_and_sglangs_arguments(command, env, interpreter, argv, notes):
    assert split_command(command) == (env, interpreter, argv, notes)


@pytest.mark.parametrize("command,needle", [
    (["vllm", "serve", "m"], "not an SGLang launch command: vllm serve m"),
    (["nohup", "env", "CUDA_VISIBLE_DEVICES=0", "python", "-m", "sglang.launch_server"], "nohup env "),
    (["env", "-u", "FOO", "python", "-m", "sglang.launch_server"], "-u FOO before the interpreter"),
    (["numactl", "-N", "0", "python", "-m", "sglang.launch_server"], "numactl -N 0 before the interpreter"),
    (["sudo", "-E", "sglang", "serve", "m"], "sudo -E before sglang serve"),
    (["python", "-X", "importtime", "-m", "sglang.launch_server"], "python options -X importtime cannot be"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m", "--help"], "--help prints and exits"),
    (["sglang", "serve", "-h"], "-h prints and exits"),
    (["sglang", "serve", "m", "--model-type", "diffusion"], "--model-type diffusion: spec-controller steers"),
    (["python -m sglang.launch_server --model-path 'm"], "cannot be split as a shell would: No closing quotation"),
    (["CUDA_VISIBLE_DEVICES=$GPUS python -m sglang.launch_server --model-path $MODEL"], "shell variables"),
    (["python -m sglang.launch_server --model-path `cat m`"], "shell variables"),
    # pasted lines are commands as a shell runs them (helper-58): only exports before, nothing after
    (["python -m sglang.launch_server --model-path m; echo done"], "go on after the launch command (echo done)"),
    (["A=1; python -m sglang.launch_server --model-path m"], "may only export variables (export NAME=value), got: A=1"),
    (["cd /srv\npython -m sglang.launch_server --model-path m"], "may only export variables (export NAME=value), got: cd"),
    (["echo a; echo b"], "none of the 2 pasted commands starts SGLang"),
])
def test_what_cannot_be_carried_over_is_refused_never_dropped(command, needle):
    with pytest.raises(CommandError, match=None) as err:
        split_command(command)
    assert needle in str(err.value), str(err.value)
    one_line(from_launch("--python", "/nonexistent/python", "--", *command), needle, 2)    # before anything runs


# --- the interpreter ------------------------------------------------------------------------------------------------
def _fake(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body,needle", [
    ("exit 0", "stopped: no output"),                                              # exits before reading
    ("echo 'fatal: broken venv' >&2; exit 3", "stopped: fatal: broken venv"),
    ('echo "$(head -c 300000 /dev/zero | tr "\\0" x)" >&2; exit 1', "stopped: xxx"),   # more than a pipe holds
    ('echo junk; echo "{}" >&"$1"; cat >/dev/null', "answered something else"),    # a line that is not an answer
    ('echo "not json" >&"$1"; cat >/dev/null', "answered something else"),
])
def test_an_interpreter_that_is_not_sglangs_is_one_line_exit_1(tmp_path, monkeypatch, body, needle):
    monkeypatch.setattr(launchcfg, "ANSWER_TIMEOUT_S", 20.0)     # (an answers pipe left open would wait it out)
    python = _fake(tmp_path, "python", body.replace('"$1"', '"$2"'))     # (argv: the script, then the answers' fd)
    one_line(from_launch("--python", python, "--", "--model-path", "m", *SPEC), needle, 1)


def test_an_interpreter_that_never_answers_is_given_up_on(tmp_path, monkeypatch):
    monkeypatch.setattr(launchcfg, "ANSWER_TIMEOUT_S", 0.5)
    python = _fake(tmp_path, "python", "exec sleep 30")
    one_line(from_launch("--python", python, "--", "--model-path", "m", *SPEC), "gave no answer in 0 s", 1)


def test_an_interpreter_that_cannot_run_is_one_line_exit_1():
    one_line(from_launch("--python", "/nonexistent/python", "--", "--model-path", "m"),
             "cannot run /nonexistent/python", 1)
    one_line(from_launch("--python", "no-such-python-here", "--", "--model-path", "m"), "not found on PATH", 1)


@pytest.mark.skipif(__import__("importlib").util.find_spec("sglang") is not None, reason="this interpreter has SGLang")
def test_an_interpreter_without_sglang_says_so_and_how_to_name_another():
    one_line(from_launch("--", "--model-path", "m", *SPEC),
             f"SGLang's parser did not load: ModuleNotFoundError: No module named 'sglang' (in {sys.executable}; "
             "--python PATH", 1)


@pytest.mark.skipif(__import__("importlib").util.find_spec("sglang") is not None, reason="this interpreter has SGLang")
def test_the_daemons_own_interpreter_without_sglang_is_told_how_to_install_it_there():
    """The quick start's venv has no SGLang: the line named --python only; config check named the pip command
    (helper-160). Another interpreter given with --python is not told to install into the daemon's."""
    one_line(from_launch("--", "--model-path", "m", *SPEC),
             f"or install SGLang in this one: {sys.executable} -m pip install {shlex.quote(with_sglang())})", 1)
    res = from_launch("--python", sys.executable, "--", "--model-path", "m", *SPEC)
    assert res.exit_code == 1 and "install SGLang in this one" not in res.output, res.output


# --- paths and TOML -------------------------------------------------------------------------------------------------
def test_paths_the_service_cannot_see_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dl").mkdir()
    (tmp_path / "tmpl.jinja").write_text("")
    notes = path_notes({"model_path": "/models/t", "download_dir": "dl", "chat_template": "tmpl.jinja",
                        "tokenizer_path": "/home/u/tok", "speculative_draft_model_path": "meta-llama/Llama-3.1-8B",
                        "numa_node": ["~/x"], "env": {"HF_HOME": "/root/.cache", "A": "1"}})
    assert notes == [f"download_dir = dl names {tmp_path / 'dl'} here; the service runs in /: give the absolute path "
                     "if it is one",
                     f"chat_template = tmpl.jinja names {tmp_path / 'tmpl.jinja'} here; the service runs in /: give "
                     "the absolute path if it is one",
                     "tokenizer_path = /home/u/tok: the service cannot read home directories (ProtectHome); move it",
                     "numa_node = ~/x: the service cannot read home directories (ProtectHome); move it",
                     "HF_HOME = /root/.cache: the service cannot read home directories (ProtectHome); move it"]
    # PrivateTmp: a model under /tmp is not there for the service; a '$MODEL' kept by quoting reaches SGLang as is
    assert path_notes({"model_path": "/tmp/m", "env": {"HF_HOME": "/var/tmp"}, "served_model_name": "$MODEL",
                       "api_key": "a$Bc", "download_dir": "/tmpdir/x"}) == [
        "model_path = /tmp/m: the service has its own /tmp and /var/tmp (PrivateTmp), empty at its start; move "
        "it (e.g. under /var/lib or /opt)",
        "HF_HOME = /var/tmp: the service has its own /tmp and /var/tmp (PrivateTmp), empty at its start; move "
        "it (e.g. under /var/lib or /opt)",
        "served_model_name = $MODEL: the service passes it as written, no shell expands the $ in it"]
    # a secret is never shown in a note (helper-58): a key in extra_args, a secret-named variable
    assert path_notes({"extra_args": ["--api-key", "/tmp/Pa$s", "--adm=~/k$Y"], "env": {"DB_PASSWORD": "/tmp/a$b"},
                       "admin_api_key": "~/$Z"}) == []


def test_every_value_comes_back_from_the_toml_as_it_went_in():
    rng = random.Random(7)
    alphabet = "ab \"'\\\t\n\r\x00\x01\x1f\x7f\u00e9\u4e2d\U0001f600={}[]#"
    values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    values += [0, -5, 2**62, 0.8, 1e-12, -3.5e300, True, False, [1, 2, 4], ["a\"b", "c\n"], [], math.inf, -math.inf]
    table = {f"key_{i}": v for i, v in enumerate(values)} | {"env": {"A_B": "x\"y", "C": "1"}}
    text = toml_text(Converted(table, "0.5.17"), ["python", "-m", "sglang.launch_server", "--x", "a\nb\x00\x7f\udce9"])
    loaded = tomllib.loads(text)
    assert loaded["engine"] == {"kind": "sglang"} and loaded["sglang"] == table
    assert math.isnan(tomllib.loads(f"x = {toml_value(math.nan)}")["x"])


def test_the_files_header_shows_the_commands_words_without_its_api_keys():
    pasted = "export A=1\npython -m sglang.launch_server --model-path m \\\n --api-key sk-1 --admin-api-key=adm-2"
    header = toml_text(Converted({"model_path": "m"}, "0.5.17"), [pasted]).splitlines()[1]
    assert header == "#   A=1 python -m sglang.launch_server --model-path m --api-key '***' '--admin-api-key=***'"      # (the export line: in front)


@pytest.mark.parametrize("value,needle", [({"a": 1}, "model_path: cannot write {'a': 1}"),
                                          ("/m\udcff", r"model_path: b'/m\xff' is not UTF-8 text"),
                                          (None, "cannot write None")])
def test_a_value_toml_cannot_hold_is_refused_naming_its_key(value, needle):
    with pytest.raises(LaunchError) as err:
        toml_value(value, "model_path")
    assert needle in str(err.value)


def test_the_output_file_is_replaced_only_once_it_is_whole(tmp_path, monkeypatch):
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    write_whole(str(target), "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["config.toml"]
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError):
        write_whole(str(target), "newer\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["config.toml"]


def test_a_refused_command_writes_no_output_file(tmp_path):
    """The README's `from-launch ... -o config.toml && sudo cp`: a shell's `>` would leave an empty file, which
    `config check` reads as the simulator's defaults (helper-52)."""
    res = from_launch("--python", "/nonexistent/python", "-o", str(tmp_path / "c.toml"), "--", "vllm", "serve", "m")
    assert res.exit_code == 2 and not (tmp_path / "c.toml").exists()


# --- the parser script's logic, on an argparse parser of SGLang's kinds of flag ---------------------------------------
def test_the_parser_script_needs_nothing_of_spec_controller():
    tree = ast.parse(launchparse.__loader__.get_source("controller.daemon.launchparse"))
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots - set(sys.stdlib_module_names) == {"sglang"}


def _kinds_of_flag() -> argparse.ArgumentParser:
    class DeprecatedAliasStoreAction(argparse._StoreAction):      # SGLang's deprecated spellings, by class name
        pass

    def json_list(text):                                          # SGLang's own JSON-list types
        return list(json.loads(text))
    p = launchparse.Parser(prog="t")
    p.add_argument("--model-path", "--model", dest="model_path")
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--no-cache", dest="cache", action="store_false")
    p.add_argument("--strict", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--bs-decode", type=int, nargs="+")
    p.add_argument("--bs", dest="bs_decode", type=int, nargs="+", action=DeprecatedAliasStoreAction)
    p.add_argument("--fp8-gemm-backend", dest="fp8_gemm_runner_backend", default="auto")
    p.add_argument("--override", type=json.loads, default=None)
    p.add_argument("--sidecar-args", type=json_list, default=None)
    p.add_argument("--ratio", type=float, default=0.5)
    p.add_argument("--disable-graph", action=type("DeprecatedStoreTrueAction", (argparse._StoreTrueAction,), {}),
                   help="Deprecated. Use --graph-backend=disabled instead.")
    p.add_argument("--old-fusion", action="store_true", help="(Deprecated: use --fusion-backend=auto) Fuse.")
    return p


@pytest.mark.parametrize("argv,flags", [(["--disable-graph", "--old-fusion", "--ratio", "1"],
                                         ["--disable-graph", "--old-fusion"]),
                                        (["--bs", "1"], []),        # (a deprecated spelling of a current field: fixed)
                                        (["--enable-metrics"], [])])
def test_fields_sglang_calls_deprecated_are_said(argv, flags):
    """helper-66: SGLang 0.5.23 deprecates --disable-cuda-graph (DeprecatedStoreTrueAction) and --grpc-mode (help
    '(Deprecated, use ...)'); from-launch wrote them as given, unremarked, and SGLang warned at every start."""
    p = _kinds_of_flag()
    said = launchparse.answer(p, {"argv": argv})["deprecated"]
    assert [flag for flag, _ in said] == flags
    assert all(help.lower().lstrip("(").startswith("deprecated") for _, help in said)


@pytest.mark.parametrize("argv,items", [
    (["--model", "m", "--tensor-parallel-size", "2"], [["--model-path", "m", "model_path"], ["--tp-size", 2, "tp_size"]]),
    (["--enable-metrics", "--no-cache", "--no-strict"], [["--enable-metrics", True, "enable_metrics"],
                                                         ["--no-cache", True, "cache"], ["--no-strict", True, "strict"]]),
    (["--strict", "--ratio", "0.5", "--tp-size", "1"], []),                         # the defaults: nothing
    (["--bs", "1", "2"], [["--bs-decode", [1, 2], "bs_decode"]]),                  # the field's own flag
    (["--fp8-gemm-backend", "cutlass"], [["--fp8-gemm-backend", "cutlass", "fp8_gemm_runner_backend"]]),
    (["--override", '{"a": [1, 2]}', "--ratio", "0.25"], [["--override", '{"a": [1, 2]}', "override"],
                                                          ["--ratio", 0.25, "ratio"]]),
    (["--override", "true"], [["--override", "true", "override"]]),                # JSON, not a flag alone
    (["--override", '"abc"'], [["--override", '"abc"', "override"]]),
    (["--sidecar-args", '[{"a": 1}, {"b": 2}]'], [["--sidecar-args", '[{"a": 1}, {"b": 2}]', "sidecar_args"]]),
    (["--ratio", "nan"], [["--ratio", math.nan, "ratio"]]),
])
def test_the_items_are_what_differs_from_the_defaults_under_flags_that_read_back_the_same(argv, items):
    p = _kinds_of_flag()
    got = launchparse.items(p, launchparse.parse(p, argv))
    assert launchparse.same(got, items), got
    back = [str(x) for flag, value, _ in got for x in ([flag] if value is True else
                                                        [flag, *value] if isinstance(value, list) else [flag, value])]
    assert launchparse.answer(p, {"argv": back, "same_as": argv}) == {"differ": []}


@pytest.mark.parametrize("argv,needle", [(["--x"], "unrecognized arguments: --x"), (["--help"], "prints and exits")])
def test_a_refused_command_is_an_exception_not_argparses_exit(argv, needle):
    with pytest.raises(launchparse.Refused) as err:
        launchparse.parse(_kinds_of_flag(), argv)
    assert needle in str(err.value)


@pytest.mark.parametrize("tp,off_path", [(None, None), (1, None), (2, "fast"), (8, "fast"), (True, None)])
def test_from_launch_writes_the_off_path_the_readme_asks_at_tp_above_1(tp, off_path):
    from controller.daemon.launchcfg import operator_notes
    table = {"model_path": "/m"}
    notes = operator_notes({"tp_size": tp}, table)
    assert table.get("off_path") == off_path
    assert any('off_path = "fast" written' in n for n in notes) == (off_path is not None)


def test_from_launch_says_an_api_key_makes_the_config_a_secret():
    from controller.daemon.launchcfg import operator_notes
    assert any("chmod 640" in n for n in operator_notes({"api_key": "sk-1"}, {}))
    assert any("chmod 640" in n for n in operator_notes({"admin_api_key": "adm"}, {}))
    assert operator_notes({"api_key": None}, {}) == []


@pytest.mark.parametrize("fields,needle", [({"nnodes": 2}, "nnodes = 2: several nodes"), ({"dp_size": 4}, "dp_size = 4"),
                                           ({"nnodes": 1, "dp_size": 1}, None), ({"dp_size": True}, None)])
def test_from_launch_says_which_layouts_are_untried(fields, needle):
    from controller.daemon.launchcfg import operator_notes
    notes = operator_notes(fields, {})
    assert (any(needle in n and "not yet run with spec-controller" in n for n in notes) if needle else notes == [])


def test_the_parsed_fields_reach_the_operator_notes_and_the_table(tmp_path, monkeypatch):
    """convert() hands what SGLang's parser read to operator_notes: --tp 2 writes off_path "fast", an API key names the
    file being written (here a stand-in parser answering over its descriptor as launchparse.py does)."""
    items = [["--model-path", "/m", "model_path"], ["--speculative-algorithm", "EAGLE3", "speculative_algorithm"],
             ["--tp-size", 2, "tp_size"], ["--api-key", "sk-1", "api_key"]]
    first, second = json.dumps({"version": "0.5.17", "items": items}), json.dumps({"version": "0.5.17", "differ": []})
    monkeypatch.setattr(launchcfg, "ANSWER_TIMEOUT_S", 20.0)
    parser = _fake(tmp_path, "python", f"read -r a; echo '{first}' >&\"$2\"; read -r b; echo '{second}' >&\"$2\"; "
                                       "cat >/dev/null")                  # (argv: the script, then the answers' fd)
    out = tmp_path / "my config.toml"
    res = from_launch("--python", parser, "-o", str(out), "--", "--model-path", "/m", "--tp", "2")
    assert res.exit_code == 0, res.output
    table = tomllib.loads(out.read_text())["sglang"]
    assert table["off_path"] == "fast" and table["tp_size"] == 2 and table["api_key"] == "sk-1"
    assert 'tp_size = 2: off_path = "fast" written' in res.stderr
    assert f"sudo install -m 640 -o root -g spec-controller '{out}' /etc/spec-controller/config.toml" in res.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o600"            # a new file holding a key: only its owner reads it
    from tests.test_service_account import _systemctl
    _systemctl(tmp_path, monkeypatch, "printf 'User=nobody\\nGroup=models\\n'\n")     # an installed unit's Group=
    again = tmp_path / "again.toml"
    res = from_launch("--python", parser, "-o", str(again), "--", "--model-path", "/m", "--tp", "2")
    assert f"sudo install -m 640 -o root -g models {again} /etc/spec-controller/config.toml" in res.stderr, res.stderr
