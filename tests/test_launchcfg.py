"""`spec-controller config from-launch` against SGLang's own parser, and `spec-controller config check`.

The from-launch tests need an interpreter with SGLang: SPEC_CONTROLLER_SGLANG_PYTHON, or this one where it imports
sglang (skipped in CI, whose environment has no SGLang; run on the development machine with CPU-torch venvs of SGLang
0.5.17 and 0.5.23, and on a GPU host). Each printed config is checked against a parse of its own (plain argparse and
ServerArgs.add_cli_args, as launch_server), not against the converter's."""
import importlib.util
import json
import os
import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from controller.daemon.config import load_config
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.launchcfg import convert
from controller.daemon.main import main
from tests.conftest import fake_sglang_python, stub_sglang_python
from tests.test_launchcmd import SPEC, from_launch, one_line

SGLANG_PYTHON = os.environ.get("SPEC_CONTROLLER_SGLANG_PYTHON") or \
    (sys.executable if importlib.util.find_spec("sglang") else None)
needs_sglang = pytest.mark.skipif(SGLANG_PYTHON is None, reason="needs an interpreter with SGLang "
                                  "(SPEC_CONTROLLER_SGLANG_PYTHON)")
# launch_server's own reading of two commands, field by field (NaN equal to itself); written apart from launchparse.py
REFERENCE = r"""
import argparse, json, math, sys
from sglang.srt.server_args import ServerArgs
def parse(argv):
    p = argparse.ArgumentParser(prog="sglang serve"); ServerArgs.add_cli_args(p)
    if "--config" in argv:
        try:
            from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
        except ImportError:
            from sglang.srt.server_args_config_parser import ConfigArgumentMerger
        argv = ConfigArgumentMerger(p).merge_config_with_args(list(argv))
    return vars(p.parse_args(argv))
a, b = (parse(argv) for argv in json.loads(sys.stdin.read()))
eq = lambda x, y: x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
print(json.dumps(sorted(k for k in set(a) | set(b) if not eq(a.get(k), b.get(k)))))
"""


def reference_differ(a: list[str], b: list[str]) -> set[str]:
    out = subprocess.run([SGLANG_PYTHON, "-c", REFERENCE], input=json.dumps([a, b]), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def version() -> str:
    return subprocess.run([SGLANG_PYTHON, "-c", "import sglang; print(sglang.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()


def launched(tmp_path, res) -> list[str]:
    """The printed config as the daemon reads it, and the launch_server arguments it then runs."""
    assert res.exit_code == 0, res.output
    (tmp_path / "c.toml").write_text(res.stdout)
    engine = SGLangEngine(load_config(tmp_path / "c.toml")["sglang"])
    cmd = engine.command()
    assert cmd[cmd.index("-m"):cmd.index("-m") + 2] == ["-m", "sglang.launch_server"]
    assert cmd[cmd.index("-m") + 2:] == engine.server_argv()
    return engine.server_argv()


@needs_sglang
@pytest.mark.parametrize("argv", [
    ["--model-path", "/models/t", *SPEC, "--tp", "2", "--cuda-graph-bs-decode", "1", "2", "4", "--disable-radix-cache",
     "--chunked-prefill-size", "4096", "--context-length", "8192", "--speculative-num-steps", "5"],
    ["--model", "/models/t", *SPEC, "--speculative-adaptive", "--max-running-requests", "96", "--host", "0.0.0.0",
     "--port", "31000", "--mem-fraction-static", "0.8", "--enable-metrics"],
    ["--model-path", "/models/t", *SPEC, "--served-model-name=-foo", "--api-key=-abc", "--tp=2",
     "--sidecar-args", '[{"a": 1}, {"b": 2}]', "--preferred-sampling-params", "true",
     "--json-model-override-args", '{"a": [1, "x"]}', "--mem-fraction-static", "nan", "--tp", "4"],
])
def test_the_printed_config_launches_what_the_command_did(tmp_path, argv):
    """Field for field by launch_server's own parse, but for what the daemon sets itself."""
    res = from_launch("--python", SGLANG_PYTHON, "--", "python", "-m", "sglang.launch_server", *argv)
    differ = reference_differ(launched(tmp_path, res), argv)
    assert differ <= SGLangEngine.DECIDES and "speculative_adaptive_config" in differ, differ


@needs_sglang
def test_aliases_abbreviations_flags_and_environment_become_sglangs_own_names():
    result = convert(["CUDA_VISIBLE_DEVICES=0", "python", "-m", "sglang.launch_server", "--model", "/models/t",
                      "--tp", "2", "--speculative-algo", "EAGLE3", "--speculative-draft-model", "/models/d",
                      "--enable-metrics", "--port", "31000"], SGLANG_PYTHON)
    t = result.sglang
    assert (t["model_path"], t["tp_size"], t["speculative_algorithm"], t["speculative_draft_model_path"]) == \
        ("/models/t", 2, "EAGLE3", "/models/d")
    assert t["enable_metrics"] is True and t["port"] == 31000 and t["env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert any("the daemon sets speculative_eagle_topk = 1" in n for n in result.notes), result.notes


@needs_sglang
def test_sglangs_yaml_config_is_merged_as_launch_server_merges_it(tmp_path):
    (tmp_path / "s.yaml").write_text("model-path: /models/y\ntp-size: 4\nspeculative-algorithm: EAGLE\n"
                                     "speculative-draft-model-path: /models/dy\nenable-metrics: true\n")
    argv = ["--config", str(tmp_path / "s.yaml"), "--tp-size", "2"]
    res = from_launch("--python", SGLANG_PYTHON, "--", *argv)
    t = tomllib.loads(res.stdout)["sglang"]
    assert (t["model_path"], t["tp_size"], t["enable_metrics"]) == ("/models/y", 2, True)     # the command wins
    assert reference_differ(launched(tmp_path, res), argv) <= SGLangEngine.DECIDES


@needs_sglang
def test_a_flag_the_installed_sglang_no_longer_takes_is_refused_as_launch_server_refuses_it():
    """0.5.17's --cuda-graph-bs is ambiguous in 0.5.23 (-decode / -prefill): the operator learns it before the start."""
    res = from_launch("--python", SGLANG_PYTHON, "--", "--model-path", "m", *SPEC, "--cuda-graph-bs", "1", "2")
    if version() == "0.5.17":
        assert res.exit_code == 0 and tomllib.loads(res.stdout)["sglang"]["cuda_graph_bs_decode"] == [1, 2], res.output
    elif version() == "0.5.23":
        one_line(res, "SGLang 0.5.23 refuses the command: ambiguous option: --cuda-graph-bs could match", 2)
    else:
        pytest.skip(f"written for 0.5.17 and 0.5.23, not {version()}")


@needs_sglang
@pytest.mark.parametrize("argv,needle", [
    (["--model-path", "m", *SPEC, "--bogus"], "refuses the command: unrecognized arguments: --bogus"),
    (["--model-path", "m"], "the command starts no speculation"),
    (["--model-path", "m", *SPEC, "--speculative-eagle-topk", "4"], "speculative_eagle_topk=4 (only topk=1"),
    (["--model-path", "m", *SPEC, "--enable-dp-attention", "--dp", "2"], "does not support DP attention"),
    (["--model-path", "m", *SPEC, "--pp-size", "2"], "pipeline parallelism"),
    (["SPEC_CONTROLLER_TELEMETRY=x", "--model-path", "m", *SPEC], "set by the daemon"),
    (["--model-path", "m", *SPEC, "--port", "70000"], "port must be an integer in 1 .. 65535, got 70000 (from the "
                                                      "command's flags)"),
])
def test_a_server_the_plugin_cannot_steer_is_refused_in_one_line_and_nothing_printed(argv, needle):
    one_line(from_launch("--python", SGLANG_PYTHON, "--", *argv), needle, 2)


@needs_sglang
def test_the_checks_read_sglangs_field_names_not_the_flags():
    """ep_join_mode's flag is --elastic-ep-join-mode (0.5.17 and 0.5.23): a config keyed by the flag passed the check."""
    one_line(from_launch("--python", SGLANG_PYTHON, "--", "--model-path", "m", *SPEC, "--elastic-ep-join-mode", "scale"),
             "ep_join_mode=scale", 2)


@needs_sglang
@pytest.mark.parametrize("yaml,needle", [("model-path: [unclosed\n", "--config "),
                                         ("on: 1\n", "--config ")])
def test_a_bad_yaml_config_is_the_commands_fault_in_one_line(tmp_path, yaml, needle):
    (tmp_path / "bad.yaml").write_text(yaml)
    one_line(from_launch("--python", SGLANG_PYTHON, "--", "--config", str(tmp_path / "bad.yaml"), *SPEC),
             f"refuses the command: {needle}{tmp_path / 'bad.yaml'}: ", 2)


@needs_sglang
def test_the_parser_runs_in_the_interpreter_given_and_says_its_version():
    res = from_launch("--python", SGLANG_PYTHON, "--", "sglang", "serve", "/models/t", *SPEC)
    assert res.exit_code == 0 and f"read by SGLang {version()}'s parser" in res.stdout, res.output
    assert tomllib.loads(res.stdout)["sglang"]["python"] == SGLANG_PYTHON


# --- spec-controller config check ---------------------------------------------------------------------------------
def test_check_says_ok_in_one_line_for_a_config_run_would_take(tmp_path):
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "none.toml")])
    one_line(res, f"config file {tmp_path / 'none.toml'} does not exist", 2)
    (tmp_path / "c.toml").write_text('[sim]\nconcurrency = 5\n[policy]\nname = "ucb"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and res.output == f"{tmp_path / 'c.toml'}: ok (engine sim: 5 clients, profile crossover-b; policy ucb)\n"


@pytest.mark.parametrize("text,needle", [
    ('[guard]\nbogus = 1\n', "unknown guard setting 'bogus'"),
    ('[policy]\nname = "bandti"\n', "bandti"),
    ('[sim]\ntrace = "no-such-trace"\n', "[sim] trace (--trace)"),
    ('[engine]\nkind = "sglang"\n[sglang]\nspeculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] model_path is required"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "MEDUSA"\n'
     'python = "/usr/bin/python3"\n', "EAGLE, EAGLE3 or NEXTN is supported"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = ""\nspeculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] model_path = '': name a path or a model id"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_draft_model_path = " "\n'
     'speculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] speculative_draft_model_path = ' ': name a path or a model id"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "~/models/t"\nspeculative_algorithm = "EAGLE3"\n'
     'python = "/usr/bin/python3"\n', "[sglang] model_path = '~/models/t': nothing expands ~ here: write the path out"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nlora_paths = ["/a", "sql=~/adapters/sql"]\n'
     'speculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] lora_paths = '~/adapters/sql': nothing expands ~ here: write the path out"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nextra_args = ["--tokenizer-path", "~/tok"]\n'
     'speculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n',
     "[sglang] extra_args --tokenizer-path = '~/tok': nothing expands ~ here: write the path out"),
    ('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nlora_paths = ["sql="]\n'
     'speculative_algorithm = "EAGLE3"\npython = "/usr/bin/python3"\n', "[sglang] lora_paths = '': name a path or a model id"),
    ('[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "EAGLE3"\n',
     'config: [sglang] is set but not [engine] kind, whose default runs the simulator: add [engine] kind = "sglang"'),
    ('[sglang\n', "not valid TOML"),
    ('[storage]\ndb = "/nonexistent-spec/d/state.db"\n', "[storage] db /nonexistent-spec/d/state.db: its directory "
     "/nonexistent-spec/d does not exist"),
    ('[control]\nsocket = "/nonexistent-spec/s/c.sock"\n', "its directory /nonexistent-spec/s does not exist"),
])
def test_check_refuses_in_one_line_what_run_would_refuse(tmp_path, text, needle):
    (tmp_path / "c.toml").write_text(text)
    one_line(CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")]), needle, 2)


def test_an_sglang_section_is_taken_where_the_engine_is_chosen_by_flag_or_as_the_simulator(tmp_path):
    from controller.daemon.config import load_config
    (tmp_path / "c.toml").write_text('[sglang]\nmodel_path = "/m"\n')
    assert load_config(tmp_path / "c.toml", {"engine": {"kind": "sglang"}})["engine"]["kind"] == "sglang"
    (tmp_path / "d.toml").write_text('[engine]\nkind = "sim"\n[sglang]\nmodel_path = "/m"\n')
    assert load_config(tmp_path / "d.toml")["engine"]["kind"] == "sim"


def test_from_launch_reads_the_command_with_the_environment_it_sets(tmp_path):
    """`PYTHONPATH=... python -m sglang.launch_server ...` (SGLang from a source checkout): the variables before the
    command are the server's (written as [sglang.env]), so its parser is asked with them too; without, 'No module named
    sglang' refused a command that runs."""
    site = stub_sglang_python(tmp_path / "stub").parent / "stub-site"
    python = fake_sglang_python(tmp_path / "python", f'exec "{sys.executable}" "$@"')     # (no PYTHONPATH of its own)
    res = CliRunner().invoke(main, ["config", "from-launch", "--python", str(python), "--", f"PYTHONPATH={site}",
                                    "python", "-m", "sglang.launch_server", "--model-path", "/m",
                                    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d"])
    assert res.exit_code == 0, (res.output, res.exception)
    assert 'model_path = "/m"' in res.stdout and f'[sglang.env]\nPYTHONPATH = "{site}"' in res.stdout, res.stdout


def test_check_of_an_sglang_config_names_the_model_and_the_paths_the_service_cannot_read(tmp_path):
    """([sglang] python: another interpreter, asked what it has installed; this one need not have SGLang.)"""
    python = stub_sglang_python(tmp_path / "python")     # (its flags read by a stand-in of SGLang's parser)
    (tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/home/op/m"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and res.stdout == f"{tmp_path / 'c.toml'}: ok (engine sglang: model /home/op/m; policy " \
        "bandit)\n", res.output
    assert res.stderr == "spec-controller: note: model_path = /home/op/m: the service cannot read home directories " \
        f"(ProtectHome); move it\nspec-controller: note: python = {python}: the service has its own /tmp and /var/tmp " \
        "(PrivateTmp), empty at its start; move it (e.g. under /var/lib or /opt)\n"


@pytest.mark.parametrize("extra,noted", [("tp_size = 2\n", True), ('tp_size = 2\noff_path = "fast"\n', False),
                                         ("tp_size = 1\n", False), ('tp_size = 4\noff_path = "kv"\n', False),
                                         ("tensor_parallel_size = 2\n", True),
                                         ('extra_args = ["--tp-size", "2"]\n', True),
                                         ('tp_size = 2\nextra_args = ["--tensor-parallel-size", "1"]\n', False)])
def test_check_notes_the_default_off_path_at_tp_above_one(tmp_path, extra, noted):
    """from-launch writes off_path "fast" at TP > 1; a hand-written table leaving the default "kv" there is told so by
    check (one that names "kv" chose it)."""
    python = fake_sglang_python(tmp_path / "python")
    (tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/opt/m"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n{extra}')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0, res.output
    assert ('with off_path left to "kv": "kv" has not run at TP > 1 on a GPU, "fast" has' in res.stderr) is noted, \
        res.stderr


def test_a_launch_script_that_is_a_fifo_is_one_line_not_a_hang(tmp_path):
    """helper-101 (suspected, confirmed): from-launch reads `/venv/bin/sglang serve`'s shebang; a FIFO at that path
    waited for a writer for good. A real subprocess, so a hang fails the test by its timeout."""
    fifo = tmp_path / "sglang"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "from-launch", "--", str(fifo), "serve",
                           "--model-path", "/m"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and f"cannot read {fifo}: not a regular file" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
