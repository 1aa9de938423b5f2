"""`spec-controller config from-launch`: an operator's SGLang launch command as the daemon's config.

The tests that need SGLang's own parser run with an interpreter that has SGLang: SPEC_CONTROLLER_SGLANG_PYTHON, or this
one where it imports sglang (skipped in CI, whose environment has no SGLang; run on the development machine with a CPU
torch + SGLang 0.5.17 venv and on a GPU host)."""
import argparse
import ast
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from controller.daemon import launchparse
from controller.daemon.config import load_config
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.launchcfg import (DAEMON_SETS, Converted, LaunchError, SGLangParser, convert, path_notes,
                                         split_command, toml_text, toml_value)
from controller.daemon.main import main

SGLANG_PYTHON = os.environ.get("SPEC_CONTROLLER_SGLANG_PYTHON") or \
    (sys.executable if importlib.util.find_spec("sglang") else None)
needs_sglang = pytest.mark.skipif(SGLANG_PYTHON is None, reason="needs an interpreter with SGLang "
                                  "(SPEC_CONTROLLER_SGLANG_PYTHON)")
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/d"]


def _from_launch(*args: str):
    return CliRunner().invoke(main, ["config", "from-launch", *args])


def _one_line(res, needle: str, code: int) -> None:
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == code and len(lines) == 1 and needle in lines[0], (res.output, res.exception)


# --- the command's shape (no SGLang) ----------------------------------------------------------------------------
@pytest.mark.parametrize("command,env,interpreter,argv", [
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], {}, "python3", ["--model-path", "m"]),
    (["CUDA_VISIBLE_DEVICES=0,1", "HF_HOME=/x", "/opt/v/bin/python", "-m", "sglang.launch_server", "--tp", "2"],
     {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/x"}, "/opt/v/bin/python", ["--tp", "2"]),
    (["env", "A=1", "python", "-m", "sglang.launch_server"], {"A": "1"}, "python", []),
    (["sglang", "serve", "/models/t", "--tp", "2"], {}, None, ["--model-path", "/models/t", "--tp", "2"]),
    (["/usr/local/bin/sglang", "serve", "--model-path", "m"], {}, None, ["--model-path", "m"]),
    (["--model-path", "m", "--port", "1"], {}, None, ["--model-path", "m", "--port", "1"]),
    (["A='x y' python -m sglang.launch_server --model-path 'a b'"], {"A": "x y"}, "python", ["--model-path", "a b"]),
])
def test_the_command_splits_into_environment_interpreter_and_sglangs_arguments(command, env, interpreter, argv):
    assert split_command(command) == (env, interpreter, argv)


def test_a_command_that_is_not_sglang_is_refused_in_one_line_before_anything_runs():
    with pytest.raises(LaunchError, match="not an SGLang launch command: vllm serve m") as err:
        split_command(["vllm", "serve", "m"])
    assert err.value.code == 2
    _one_line(_from_launch("--python", "/nonexistent/python", "--", "vllm", "serve", "m"), "not an SGLang launch", 2)


def test_an_interpreter_that_cannot_run_is_one_line_exit_1():
    _one_line(_from_launch("--python", "/nonexistent/python", "--", "--model-path", "m"),
              "cannot run /nonexistent/python", 1)


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="this interpreter has SGLang")
def test_an_interpreter_without_sglang_says_so_and_how_to_name_another():
    _one_line(_from_launch("--", "--model-path", "m", *SPEC),
              f"SGLang's parser did not load: ModuleNotFoundError: No module named 'sglang' (in {sys.executable}; "
              "--python PATH", 1)


# --- TOML (no SGLang) ---------------------------------------------------------------------------------------------
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


def test_a_value_toml_cannot_hold_is_refused():
    for value in ({"a": 1}, "bad \udce9 byte", None):      # a surrogate: a byte of argv that was not UTF-8
        with pytest.raises(LaunchError, match="cannot write"):
            toml_value(value)


def test_paths_the_service_cannot_see_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    notes = path_notes({"model_path": "models", "tokenizer_path": "/home/u/tok", "speculative_draft_model_path":
                        "meta-llama/Llama-3.1-8B", "served_model_name": "models", "numa_node": ["~/x"]})
    assert notes == [f"model_path = models is relative to this directory; the service runs in /: give "
                     f"{tmp_path / 'models'}",
                     "tokenizer_path = /home/u/tok: the service cannot read home directories (ProtectHome); move it",
                     "numa_node = ~/x: the service cannot read home directories (ProtectHome); move it"]


# --- SGLang's own parser ------------------------------------------------------------------------------------------
@needs_sglang
def test_aliases_abbreviations_flags_lists_and_json_become_sglangs_own_names():
    result = convert(["CUDA_VISIBLE_DEVICES=0", "python", "-m", "sglang.launch_server", "--model", "/models/t",
                      "--tp", "2", "--speculative-algo", "EAGLE3", "--speculative-draft-model", "/models/d",
                      "--enable-metrics", "--cuda-graph-max-bs-decode", "160", "--json-model-override-args", '{"a": 1}',
                      "--mem-fraction-static", "0.8", "--port", "31000"], SGLANG_PYTHON)
    t = result.sglang
    assert (t["model_path"], t["tp_size"], t["speculative_algorithm"], t["speculative_draft_model_path"]) == \
        ("/models/t", 2, "EAGLE3", "/models/d")
    assert t["enable_metrics"] is True and t["mem_fraction_static"] == 0.8 and t["port"] == 31000
    assert t["json_model_override_args"] == '{"a": 1}' and t["env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert any("the daemon sets speculative_eagle_topk = 1" in n for n in result.notes), result.notes


@needs_sglang
@pytest.mark.parametrize("argv", [
    ["--model-path", "/models/t", *SPEC, "--tp", "2", "--cuda-graph-bs-decode", "1", "2", "4", "--disable-radix-cache",
     "--chunked-prefill-size", "4096", "--context-length", "8192", "--speculative-num-steps", "5"],
    ["--model-path", "/models/t", *SPEC, "--speculative-adaptive", "--max-running-requests", "96", "--host", "0.0.0.0"],
])
def test_the_printed_config_launches_what_the_command_did(tmp_path, argv):
    """The printed file, loaded as the daemon loads it, gives the launch command the daemon runs; SGLang's parser
    reads it field for field as the operator's command, but for what the daemon sets itself."""
    res = _from_launch("--python", SGLANG_PYTHON, "--", "python", "-m", "sglang.launch_server", *argv)
    assert res.exit_code == 0, res.output
    (tmp_path / "c.toml").write_text(res.stdout)
    cfg = load_config(tmp_path / "c.toml")
    launched = SGLangEngine(cfg["sglang"]).command()
    assert launched[:3] == [SGLANG_PYTHON, "-m", "sglang.launch_server"]
    parser = SGLangParser(SGLANG_PYTHON)
    try:
        differ = set(parser.ask({"argv": launched[3:], "same_as": argv})["differ"])
    finally:
        parser.close()
    assert differ <= DAEMON_SETS and "speculative_adaptive_config" in differ, differ
    assert not differ & {"tp_size", "cuda_graph_bs_decode", "disable_radix_cache", "max_running_requests", "host"}


@needs_sglang
def test_a_flag_the_installed_sglang_no_longer_takes_is_refused_as_launch_server_refuses_it():
    """0.5.17's --cuda-graph-bs is ambiguous in 0.5.23 (-decode / -prefill): the operator learns it before the start."""
    argv = ["--model-path", "m", *SPEC, "--cuda-graph-bs", "1", "2"]
    res = _from_launch("--python", SGLANG_PYTHON, "--", *argv)
    version = _version()
    if version == "0.5.17":
        assert res.exit_code == 0 and tomllib.loads(res.stdout)["sglang"]["cuda_graph_bs_decode"] == [1, 2], res.output
    elif version == "0.5.23":
        _one_line(res, "SGLang 0.5.23 refuses the command: ambiguous option: --cuda-graph-bs could match", 2)
    else:
        pytest.skip(f"written for 0.5.17 and 0.5.23, not {version}")


def _version() -> str:
    return subprocess.run([SGLANG_PYTHON, "-c", "import sglang; print(sglang.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


@needs_sglang
def test_sglangs_yaml_config_is_merged_as_launch_server_merges_it(tmp_path):
    (tmp_path / "s.yaml").write_text("model-path: /models/y\ntp-size: 4\nspeculative-algorithm: EAGLE\n"
                                     "speculative-draft-model-path: /models/dy\n")
    t = convert(["--config", str(tmp_path / "s.yaml"), "--tp-size", "2"], SGLANG_PYTHON).sglang
    assert (t["model_path"], t["tp_size"], t["speculative_algorithm"]) == ("/models/y", 2, "EAGLE")   # command wins


@needs_sglang
@pytest.mark.parametrize("argv,needle", [
    (["--model-path", "m", *SPEC, "--bogus"], "refuses the command: unrecognized arguments: --bogus"),
    (["--model-path", "m"], "the command starts no speculation"),
    (["--model-path", "m", *SPEC, "--speculative-eagle-topk", "4"], "speculative_eagle_topk=4 (only topk=1"),
    (["--model-path", "m", *SPEC, "--enable-dp-attention", "--dp", "2"], "does not support DP attention"),
    (["--model-path", "m", *SPEC, "--pp-size", "2"], "pipeline parallelism"),
    (["SPEC_CONTROLLER_TELEMETRY=x", "--model-path", "m", *SPEC], "set by the daemon"),
])
def test_a_server_the_plugin_cannot_steer_is_refused_in_one_line_and_nothing_printed(argv, needle):
    _one_line(_from_launch("--python", SGLANG_PYTHON, "--", *argv), needle, 2)


@needs_sglang
def test_the_parser_runs_in_the_interpreter_given_and_says_its_version():
    version = _version()
    res = _from_launch("--python", SGLANG_PYTHON, "--", "sglang", "serve", "/models/t", *SPEC)
    assert res.exit_code == 0 and f"read by SGLang {version}'s parser" in res.stdout, res.output
    assert tomllib.loads(res.stdout)["sglang"]["python"] == SGLANG_PYTHON


# --- the parser script's own logic, on an argparse parser of SGLang's kinds of flag (no SGLang) -----------------
def test_the_parser_script_needs_nothing_of_spec_controller():
    tree = ast.parse(launchparse.__loader__.get_source("controller.daemon.launchparse"))
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots - set(sys.stdlib_module_names) == {"sglang"}


def _kinds_of_flag() -> argparse.ArgumentParser:
    class DeprecatedAliasStoreAction(argparse._StoreAction):      # SGLang's deprecated spellings, by class name
        pass
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
    p.add_argument("--ratio", type=float, default=0.5)
    return p


@pytest.mark.parametrize("argv,items", [
    (["--model", "m", "--tensor-parallel-size", "2"], [["--model-path", "m"], ["--tp-size", 2]]),
    (["--enable-metrics", "--no-cache", "--no-strict"], [["--enable-metrics", True], ["--no-cache", True],
                                                         ["--no-strict", True]]),
    (["--strict", "--ratio", "0.5", "--tp-size", "1"], []),                         # the defaults: nothing
    (["--bs", "1", "2"], [["--bs-decode", [1, 2]]]),                               # the field's own flag
    (["--fp8-gemm-backend", "cutlass"], [["--fp8-gemm-backend", "cutlass"]]),     # a flag not named after its field
    (["--override", '{"a": [1, 2]}', "--ratio", "0.25"], [["--override", '{"a": [1, 2]}'], ["--ratio", 0.25]]),
])
def test_the_items_are_what_differs_from_the_defaults_under_flags_that_read_back_the_same(argv, items):
    p = _kinds_of_flag()
    got = launchparse.items(p, launchparse.parse(p, argv))
    assert got == items
    back = [str(x) for flag, value in got for x in ([flag] if value is True else
                                                     [flag, *value] if isinstance(value, list) else [flag, value])]
    assert vars(launchparse.parse(p, back)) == vars(launchparse.parse(p, argv))


def test_a_refused_command_is_an_exception_not_argparses_exit():
    with pytest.raises(launchparse.Refused, match="unrecognized arguments: --x"):
        launchparse.parse(_kinds_of_flag(), ["--x"])


# --- spec-controller config check ---------------------------------------------------------------------------------
def test_check_says_ok_in_one_line_for_a_config_run_would_take(tmp_path):
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "none.toml")])
    _one_line(res, f"config file {tmp_path / 'none.toml'} does not exist", 2)
    (tmp_path / "c.toml").write_text('[sim]\nconcurrency = 5\n[policy]\nname = "ucb"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    _one_line(res, f"{tmp_path / 'c.toml'}: ok (engine sim: 5 clients; policy ucb)", 0)


@pytest.mark.parametrize("text,needle", [
    ('[guard]\nbogus = 1\n', "unknown guard setting 'bogus'"),
    ('[policy]\nname = "bandti"\n', "bandti"),
    ('[sim]\ntrace = "no-such-trace"\n', "[sim] trace (--trace)"),
    ('[engine]\nkind = "sglang"\n[sglang]\nspeculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] model_path is required"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "MEDUSA"\n'
     'python = "/usr/bin/python3"\n', "only EAGLE/EAGLE3"),
    ('[sglang\n', "not valid TOML"),
])
def test_check_refuses_in_one_line_what_run_would_refuse(tmp_path, text, needle):
    (tmp_path / "c.toml").write_text(text)
    _one_line(CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")]), needle, 2)


def test_check_of_an_sglang_config_names_the_model_and_the_paths_the_service_cannot_read(tmp_path):
    """([sglang] python: another interpreter, whose SGLang the plugin checks; this one need not have SGLang.)"""
    (tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/home/op/m"\n'
                                     'speculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and res.stdout == f"{tmp_path / 'c.toml'}: ok (engine sglang: model /home/op/m; policy " \
        "bandit)\n", res.output
    assert res.stderr == "spec-controller: note: model_path = /home/op/m: the service cannot read home directories " \
        "(ProtectHome); move it\n"
