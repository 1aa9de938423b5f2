"""helper-94: a typo in one of from-launch's own options (`--ouput FILE`, `--pyton PATH`) went on to the launch
command, since COMMAND takes the options click does not know (SGLang's flags), and was refused as something
"before the interpreter that cannot be carried over"; `-o` given no file name took the `--` after it and wrote a
file named `--`. Both are usage errors of from-launch, said as such, with nothing written."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon.main import main

LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--speculative-algorithm", "EAGLE3",
          "--speculative-draft-model-path", "/d"]


def from_launch(*args: str):
    return CliRunner().invoke(main, ["config", "from-launch", *args])


@pytest.mark.parametrize("args,needle", [
    (["--ouput", "c.toml", "--", *LAUNCH], "no such option '--ouput' (did you mean '--output'?)"),
    (["--ouput=c.toml", "--", *LAUNCH], "no such option '--ouput' (did you mean '--output'?)"),
    (["--pyton", "/nonexistent/python", "--", *LAUNCH], "no such option '--pyton' (did you mean '--python'?)"),
    (["--pyton", "/nonexistent/python", *LAUNCH], "no such option '--pyton' (did you mean '--python'?)"),
    (["--python", "/nonexistent/python", "--outptu", "c.toml", "sglang", "serve", "/m"],
     "no such option '--outptu' (did you mean '--output'?)"),
    (["--python", "/nonexistent/python", "-o", "--", *LAUNCH], "-o / --output needs a file name, got '--'"),
    (["--python", "/nonexistent/python", "-o", "", "--", *LAUNCH], "-o / --output needs a file name, got ''"),
    (["--python", "/nonexistent/python", "-o", " ", "--", *LAUNCH], "-o / --output needs a file name, got ' '"),
])
def test_a_mistyped_option_of_from_launch_is_named_as_one(tmp_path, args, needle):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = from_launch(*args)
    finally:
        os.chdir(cwd)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output
    assert lines[0].startswith("spec-controller: ") and "before the interpreter" not in lines[0]
    assert os.listdir(tmp_path) == []                  # nothing written


def test_sglangs_arguments_alone_still_start_with_a_flag():
    """The arguments-alone form (`from-launch -- --model-path ...`) is no typo: it reaches the interpreter."""
    res = from_launch("--python", "/nonexistent/python", "--", "--model-path", "/m", "--tp", "2")
    assert res.exit_code == 1 and "cannot run /nonexistent/python" in res.output, res.output


def test_the_wrote_line_of_a_file_name_holding_a_newline_is_one_line(tmp_path):
    """-o $'x\\ny.toml' said 'spec-controller: wrote x', then 'y.toml' on a line of its own."""
    from tests.conftest import stub_sglang_python
    python = stub_sglang_python(tmp_path / "python")
    out = tmp_path / "x\ny.toml"
    res = from_launch("--python", str(python), "-o", str(out), "--", *LAUNCH)
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("# spec-controller config")
    wrote = [line for line in res.stderr.splitlines() if not line.startswith("spec-controller: note: ")]
    assert wrote == [f"spec-controller: wrote {tmp_path}/x\\ny.toml"], res.stderr
