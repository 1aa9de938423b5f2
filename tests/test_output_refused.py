"""An answer that cannot be written (stdout on a full disk: `specctl history > /mnt/full/h.txt`) is one line on
stderr and exit 1, as every other error (helper-142: click's echo raised OSError ENOSPC and both command lines printed
a 30-line traceback). A closed pipe stays silent (click answers it: `specctl history | head -1`)."""
import os
import subprocess
import sys

import pytest

from tests.fdtable import descriptors, on_devnull

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")

COMMANDS = [
    ("controller.cli", "specctl", ["--version"]),
    ("controller.cli", "specctl", ["policy", "list"]),
    ("controller.cli", "specctl", ["simulate", "--concurrency", "1", "--seconds", "1"]),
    ("controller.daemon", "spec-controller", ["config", "check", "--config", "CONFIG"]),
]


@pytest.mark.parametrize("unbuffered", ["1", ""])
@pytest.mark.parametrize("module,prog,args", COMMANDS)
def test_an_answer_stdout_refuses_is_one_line_and_exit_1(short_tmp, module, prog, args, unbuffered):
    config = short_tmp / "c.toml"
    config.write_text("[sim]\nspeed = 1.0\n")        # (an empty one: a note on stderr besides)
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", module, *[str(config) if a == "CONFIG" else a for a in args]],
                             stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert res.returncode == 1 and res.stderr.splitlines() == [
        f"{prog}: cannot write to standard output: {os.strerror(28)}"], res.stderr


@pytest.mark.parametrize("module,prog,args", COMMANDS[:2])
def test_an_answer_refused_on_the_stdout_click_wraps_is_one_line_too(module, prog, args):
    """helper-145: stdout's encoding ascii (PYTHONIOENCODING=ascii, a C locale not coerced to UTF-8): click.echo writes
    to a text wrapper of stdout's buffer, not sys.stdout, and the 30-line traceback came back."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", module, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONIOENCODING": "ascii"}, timeout=120)
    assert res.returncode == 1 and res.stderr.splitlines() == [
        f"{prog}: cannot write to standard output: {os.strerror(28)}"], res.stderr


def test_the_check_leaves_no_descriptor_open_where_stdout_has_none(monkeypatch):
    """stdout with no file descriptor under it (CliRunner's): the /dev/null opened to stand in for it is closed again
    (helper-145: one leaked each time)."""
    import io

    import click

    from controller.cli.options import _stdout_refused

    class Full(io.StringIO):
        def flush(self):
            raise OSError(28, os.strerror(28))
    monkeypatch.setattr(sys, "stdout", Full())
    before = descriptors(on_devnull)        # (what it opens; not the whole table: tests/fdtable.py)
    for _ in range(3):
        with pytest.raises(OSError) as refused:
            click.echo("an answer")
        assert _stdout_refused(refused.value)
    assert descriptors(on_devnull) == before


def test_a_closed_pipe_is_still_silent():
    """click's own answer to EPIPE (exit 1, nothing said) is left as it was: the new line is for a refused write."""
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "policy", "list", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    assert proc.wait(60) == 1 and proc.stderr.read() == ""
    proc.stderr.close()
