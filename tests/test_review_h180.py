"""helper-180: a review of helper-179's start-up refusals. run and config check refuse a path with one check, one line
and one exit code: the control socket below a folder this user cannot search (run's socket probe said it first, exit 1),
a database folder on a kernel file system (run said the bind's ENOENT, config check the preflight's words)."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon import main as daemon_main


def _as_nobody_both(tmp, *args: str) -> dict:
    """run's and config check's (exit code, stderr), each acting as nobody where the tests run as root (as themselves
    otherwise), in-process: the modules imported first, as this user (nobody may not read the interpreter's folder)."""
    from tests.conftest import as_nobody
    (tmp / "e.toml").write_text("")
    os.chmod(tmp, 0o755)
    (own := tmp / "own").mkdir(mode=0o777)          # (the database's folder: nobody may write it)
    os.chmod(own, 0o777)
    base = ["--config", str(tmp / "e.toml"), "--db", str(own / "x.db"), "--concurrency", "2"]
    CliRunner().invoke(daemon_main.main, ["config", "check", *base[:2], "--db", str(tmp / "w.db"), "--socket",
                                          str(tmp / "w.sock")])
    import controller.daemon.lifecycle  # noqa: F401  (run's modules, imported as this user)
    import controller.daemon.sockprobe  # noqa: F401

    def answer(words):
        res = CliRunner(env={"XDG_STATE_HOME": str(own / "state")}).invoke(daemon_main.main, words)
        return res.exit_code, res.stderr
    return {cmd[0]: as_nobody(lambda: answer([*cmd, *base, *args])) for cmd in (["run"], ["config", "check"])}


@pytest.mark.parametrize("below,own", [("sub", False), ("", False), ("", True)], ids=["below-it", "in-it", "its-own"])
def test_run_refuses_a_socket_below_a_folder_it_cannot_search_as_config_check_does(short_tmp, below, own):
    """run met it first at its socket probe: 'control socket path ...: Permission denied', exit 1, which the unit
    restarts every 5 s for good; config check said the folder check's line, exit 2. A folder of the user's own: the
    chmod, in both (as the probe said it: helper-168)."""
    (locked := short_tmp / "locked").mkdir()
    if own and os.geteuid() == 0:
        os.chown(locked, 65534, 65534)
    locked.chmod(0o000)
    sock = locked / below / "c.sock" if below else locked / "c.sock"
    said = _as_nobody_both(short_tmp, "--socket", str(sock))
    assert said["run"] == said["config"], said
    code, line = said["run"]
    assert code == 2 and len(line.splitlines()) == 1, said
    what = f"the control socket's directory {locked}/sub" if below else f"the control socket in {locked}"
    assert line.startswith(f"spec-controller: cannot create {what}: Permission denied"), said
    assert not own or line.endswith(f"(the folder {locked} is yours but its mode 0 refuses you: chmod u+rwx {locked})\n")
    assert not (short_tmp / "own" / "x.db").exists()
