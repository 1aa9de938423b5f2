"""`spec-controller config check` reads the [sglang] section's launch through SGLang's own parser (launchcheck.py): a
key SGLang does not know, or a value its flag does not take, is refused before the service starts SGLang (which would
exit on it at once, and systemd restart it again and again). In CI a stand-in parser package (conftest.STUB_SERVER_ARGS)
answers; with an interpreter that has SGLang (SPEC_CONTROLLER_SGLANG_PYTHON) the last test asks the real one."""
import pytest
from click.testing import CliRunner

from controller.daemon.launchcheck import keys_in
from controller.daemon.main import main
from tests.conftest import fake_sglang_python, stub_sglang_python
from tests.test_launchcfg import SGLANG_PYTHON, needs_sglang
from tests.test_launchcmd import one_line


def check(tmp_path, python, extra: str = ""):
    (tmp_path / "c.toml").write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/opt/m"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n{extra}')
    return CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])


def test_a_section_sglang_takes_is_ok_with_no_note_from_the_parser(tmp_path):
    res = check(tmp_path, stub_sglang_python(tmp_path / "python"), "mem_fraction_static = 0.8\n")
    assert res.exit_code == 0 and "ok (engine sglang: model /opt/m" in res.stdout, res.output
    assert "parser" not in res.stderr and "deprecates" not in res.stderr, res.stderr


@pytest.mark.parametrize("extra,needle", [
    ("mem_fraction_statc = 0.8\n", "unrecognized arguments: --mem-fraction-statc 0.8 ([sglang] mem_fraction_statc)"),
    ('mem_fraction_static = "high"\n', "argument --mem-fraction-static: invalid float value: 'high' "
                                       "([sglang] mem_fraction_static)"),
    ('extra_args = ["--no-such-flag"]\n', "unrecognized arguments: --no-such-flag"),
])
def test_a_key_or_value_sglang_refuses_is_one_line_and_exit_2(tmp_path, extra, needle):
    res = check(tmp_path, stub_sglang_python(tmp_path / "python"), extra)
    one_line(res, f"SGLang 0.5.17 refuses the [sglang] section's flags: {needle}", 2)
    assert res.output.rstrip().endswith(needle), res.output


def test_a_flag_sglang_deprecates_is_a_note(tmp_path):
    res = check(tmp_path, stub_sglang_python(tmp_path / "python"), "disable_cuda_graph = true\n")
    assert res.exit_code == 0, res.output
    assert "note: --disable-cuda-graph: SGLang 0.5.17 deprecates it and warns at every start; its help: Deprecated: " \
           "use --cuda-graph-mode." in res.stderr, res.stderr


def test_a_parser_that_cannot_run_there_is_a_note_not_a_refusal(tmp_path):
    """The interpreter says it has SGLang but its parser gives no answer (an import that fails on this host): the
    section is not refused on that, and the operator is told the flags went unread."""
    res = check(tmp_path, fake_sglang_python(tmp_path / "python"), "mem_fraction_statc = 0.8\n")
    assert res.exit_code == 0, res.output
    assert "note: the [sglang] section's flags were not read by SGLang's parser: SGLang's parser in " in res.stderr


def test_an_interpreter_whose_sglang_does_not_import_is_named_by_the_key_that_gave_it(tmp_path):
    """review-52: config check's note said '--python PATH: the interpreter that runs SGLang', a flag of from-launch
    that config check does not have; the interpreter came from [sglang] python."""
    import importlib.util
    import sys
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang imports here: the parser would answer")
    python = fake_sglang_python(tmp_path / "python", body=f'exec {sys.executable} "$@"')    # (says it has SGLang)
    res = check(tmp_path, python)
    assert res.exit_code == 0 and f"(in {python}; [sglang] python: the interpreter that runs SGLang)" in res.stderr, \
        res.output
    assert "--python" not in res.output, res.output


@pytest.mark.parametrize("message,keys", [
    ("unrecognized arguments: --tp-size 2", " ([sglang] tp_size)"),
    ("unrecognized arguments: --tp-size-extra 2", ""),
    ("unrecognized arguments: --tp-size=2 --python x", " ([sglang] tp_size)"),     # (python is the daemon's own key)
])
def test_the_refusal_names_the_keys_its_flags_came_from_whole_flags_only(message, keys):
    assert keys_in(message, {"tp_size": 2, "python": "/p", "model_path": "/m"}) == keys


@needs_sglang
def test_sglangs_own_parser_refuses_a_misspelt_key(tmp_path):
    from tests.test_launchcfg import version
    python = fake_sglang_python(tmp_path / "python", f'exec "{SGLANG_PYTHON}" "$@"', sglang=version())
    one_line(check(tmp_path, python, "mem_fraction_statc = 0.8\n"),
             "unrecognized arguments: --mem-fraction-statc 0.8 ([sglang] mem_fraction_statc)", 2)


def test_the_parser_runs_with_the_sections_env_as_sglang_will(tmp_path):
    """[sglang] env reaches the SGLang the daemon starts (and the install check), so it reaches its parser too: here
    SGLang is found only through the env's PYTHONPATH (a source checkout), and a misspelt key is refused, not passed
    with a note that the parser could not load SGLang."""
    import sys
    site = stub_sglang_python(tmp_path / "stub").parent / "stub-site"
    python = fake_sglang_python(tmp_path / "python", f'exec "{sys.executable}" "$@"')     # (no PYTHONPATH of its own)
    res = check(tmp_path, python, f'mem_fraction_statc = 0.8\n[sglang.env]\nPYTHONPATH = "{site}"\n')
    one_line(res, "unrecognized arguments: --mem-fraction-statc 0.8 ([sglang] mem_fraction_statc)", 2)


@pytest.mark.parametrize("answer", [
    b"\xff\xfe\n",                                                         # not UTF-8
    b'{"version": "0.5.17", "items": [], "deprecated": [["--x"]]}\n',       # a row of the wrong shape
    b'{"version": "0.5.17", "items": [], "deprecated": 5}\n',
    b'{"version": "0.5.17", "items": 5}\n',
])
def test_a_parser_that_answers_garbage_is_a_note_not_a_traceback(tmp_path, answer):
    """The answer comes from another interpreter: one that is not launchparse.py's is 'answered something else' (a
    note, as for one that does not answer), never a traceback out of config check."""
    import sys
    (tmp_path / "answer.py").write_text(f"import os, sys\nos.write(int(sys.argv[1]), {answer!r})\nsys.stdin.read()\n")
    python = fake_sglang_python(tmp_path / "python", f'exec "{sys.executable}" "{tmp_path / "answer.py"}" "$2"')
    res = check(tmp_path, python)
    assert res.exit_code == 0 and res.exception is None, (res.output, res.exception)
    assert "flags were not read by SGLang's parser: SGLang's parser in " in res.stderr
    assert "answered something else" in res.stderr, res.stderr


@pytest.mark.parametrize("make, noted", [("dir", True), ("text", True), ("model", False), ("gguf", False)])
def test_a_model_path_that_is_not_a_model_is_a_note(tmp_path, make, noted):
    """review-52: a directory without config.json, or a text file, as model_path passed config check with no word;
    SGLang then exited at every start."""
    model = tmp_path / ("m.gguf" if make == "gguf" else "m")
    if make in ("dir", "model"):
        model.mkdir()
        if make == "model":
            (model / "config.json").write_text("{}")
    else:
        model.write_text("not a model\n")
    (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "{model}"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{stub_sglang_python(tmp_path / "py")}"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0, res.output
    assert (f"model_path = {model} holds no config.json" in res.stderr) == noted, res.stderr
