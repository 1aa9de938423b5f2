"""newcomer-146: a Ctrl-C in the first ~0.3 s of `spec-controller run`, while its modules still imported, printed a
Python traceback. The console scripts (controller/entry.py) end it as a later Ctrl-C does: 'aborted', exit 1. The
interrupt is raised where the command's module is imported, as SIGINT raises it there."""
import subprocess
import sys

import pytest

from tests.daemon_proc import ROOT

INTERRUPTED_IMPORT = """
import builtins, sys
real = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name in ("main", "daemon.main", "cli.main") and args and (args[0] or {}).get("__name__") == "controller.entry":
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)
builtins.__import__ = interrupted
from controller import entry
getattr(entry, sys.argv[1])()
"""


@pytest.mark.parametrize("script,prog", [("daemon", "spec-controller"), ("specctl", "specctl")])
def test_a_ctrl_c_while_the_command_imports_is_one_line(script, prog):
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT, script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (1, f"{prog}: aborted\n"), done


def test_the_console_scripts_are_these_entry_points():
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"spec-controller": "controller.entry:daemon", "specctl": "controller.entry:specctl"}
