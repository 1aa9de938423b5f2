"""What a review (helper-108) of the day's refusals found getting through: each kept here, red before its fix."""
import os

import pytest
from click.testing import CliRunner

from controller.cli.main import cli


@pytest.mark.parametrize("tail", ["/.", "/..", "/./"])
def test_a_plot_path_ending_in_a_dot_component_is_a_directorys_name_refused_before_simulating(tmp_path, tail):
    """'x.png/.' passed the trailing-slash refusal: realpath dropped the '/.', the simulation ran and x.png was written
    ('wrote .../x.png/.'), where a shell's `>` refuses the name."""
    arg = f"{tmp_path}/x.png{tail}"
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--concurrency", "4", "--seconds", "2",
                                   "--plot", arg])
    assert res.exit_code == 2 and res.stdout == "", res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"specctl: cannot write plot {arg}: a directory's name"), line
    assert os.listdir(tmp_path) == []


def _refused_start(short_tmp, *args: str):
    """`run ARGS` with the default socket in an empty state home: the result, and what that home holds after it."""
    import subprocess
    import sys
    from pathlib import Path
    root, xdg = Path(__file__).parent.parent, short_tmp / "xdg"
    xdg.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY", "SPECCTL_DB")}
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", *args], capture_output=True, text=True,
                         timeout=60, cwd=str(root), env=dict(env, PYTHONPATH=str(root), XDG_STATE_HOME=str(xdg)))
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res, list(xdg.iterdir())


def test_a_start_refused_for_its_database_creates_no_state_directory(short_tmp):
    """The preflight makes the control socket's directory (with the default paths, ~/.local/state/spec-controller) and
    the database is opened after it: a --db that is not a database was refused, exit 1, and left that directory
    behind, empty (2d89b7f's 'a refused start creates no directory' held for the metrics port only)."""
    (short_tmp / "bad.db").write_text("not a database, some text in it\n")
    res, left = _refused_start(short_tmp, "--db", str(short_tmp / "bad.db"))
    assert res.returncode == 2 and "is not a spec-controller database" in res.stderr, res.stderr   # (helper-168)
    assert left == [] and sorted(os.listdir(short_tmp)) == ["bad.db", "xdg"]


def test_a_start_refused_for_a_database_another_daemon_holds_creates_no_state_directory(short_tmp):
    """The same, refused by the database's lock (another daemon on it, with a socket of its own)."""
    from tests.daemon_proc import StartingDaemon
    with StartingDaemon(short_tmp / "s.db", short_tmp / "other.sock"):
        res, left = _refused_start(short_tmp, "--db", str(short_tmp / "s.db"))
    assert res.returncode != 0 and "s.db" in res.stderr, res.stderr
    assert left == []


def test_the_preflight_asks_whether_the_socket_directory_can_be_made_and_makes_nothing(tmp_path):
    """The control socket's directory is made at the socket's bind, after the database: the preflight only asks."""
    from controller.daemon.preflight import _uncreatable
    (tmp_path / "file").write_text("x")
    assert _uncreatable(tmp_path / "new" / "deeper") is None and os.listdir(tmp_path) == ["file"]
    assert _uncreatable(tmp_path) is None
    assert _uncreatable(tmp_path / "file" / "sub") == os.strerror(20)      # ENOTDIR: a file in the way
