"""--socket (or SPECCTL_SOCKET) without --db where no daemon answers on it: the default database stands in only where
it is that socket's daemon's (the default pair, or its newest start served that socket). helper-128: daemon B ran with
its own --socket and --db and stopped; `specctl --socket B.sock threshold pin 7` saved the pin into the default
daemon's database ('daemon is not running: pin 7 saved to .../spec-controller.db', exit 0) and `threshold` then read
that daemon's state as B's. Real daemon, real database, the CLI through CliRunner."""
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from tests.daemon_proc import DaemonProc
from tests.test_pin_unsettled import _saved_pin


@pytest.fixture(scope="module")
def stopped_default():
    """A default daemon's database (under XDG_STATE_HOME) whose daemon ran on a socket of its own, then stopped."""
    home = Path(tempfile.mkdtemp(prefix="sc-sock-", dir="/tmp"))
    (home / "spec-controller").mkdir()
    db = home / "spec-controller" / "spec-controller.db"
    proc = DaemonProc(home, config_text=f'[storage]\ndb = "{db}"\n[control]\nsocket = "{home}/a.sock"\n',
                      paths_in_config=(db, home / "a.sock"))
    proc.wait_socket()
    assert proc.stop() == 0
    yield home, db
    shutil.rmtree(home, ignore_errors=True)


def _specctl(home: Path, *args: str, **env: str):
    return CliRunner().invoke(cli, list(args), env={"XDG_STATE_HOME": str(home), "SPECCTL_DB": None,
                                                   "SPECCTL_SOCKET": None, "RUNTIME_DIRECTORY": None, **env})


@pytest.mark.parametrize("args, env", [
    (["--socket", "{home}/b.sock", "threshold", "pin", "7"], {}),
    (["threshold", "pin", "7"], {"SPECCTL_SOCKET": "{home}/b.sock"}),
    (["--socket", "{home}/b.sock", "threshold"], {}),
    (["--socket", "{home}/b.sock", "status"], {}),
])
def test_a_socket_no_daemon_answers_does_not_take_another_daemons_database(stopped_default, args, env):
    home, db = stopped_default
    res = _specctl(home, *[a.format(home=home) for a in args], **{k: v.format(home=home) for k, v in env.items()})
    assert res.exit_code == 3, res.output
    assert res.output.count("\n") == 1, res.output
    assert res.output.startswith(f"specctl: no daemon answers on {home}/b.sock, and {db} (the default database, "
                                 f"with no --db) is the state of the daemon that serves {home}/a.sock"), res.output
    assert _saved_pin(db) is None                           # nothing saved into the other daemon's database


def test_the_socket_its_newest_start_served_still_saves_offline(stopped_default):
    home, db = stopped_default
    res = _specctl(home, "--socket", str(home / "a.sock"), "threshold", "pin", "6")
    assert res.exit_code == 0 and f"saved to {db}" in res.output, res.output
    assert _saved_pin(db) == 6
    res = _specctl(home, "--socket", str(home / "a.sock"), "threshold", "unpin")
    assert res.exit_code == 0 and _saved_pin(db) is None


def test_a_socket_no_daemon_answers_creates_no_default_database_for_its_pin(tmp_path):
    res = _specctl(tmp_path, "--socket", str(tmp_path / "b.sock"), "threshold", "pin", "7")
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "(the default database, with no --db) records no daemon on it: give the --db" in res.output, res.output
    assert not (tmp_path / "spec-controller").exists()       # (before: created, the pin saved there, exit 0)


def test_the_default_pair_still_saves_offline_with_its_socket_given(tmp_path):
    sock = tmp_path / "spec-controller" / "control.sock"
    res = _specctl(tmp_path, "--socket", str(sock), "threshold", "pin", "7")
    assert res.exit_code == 0 and _saved_pin(tmp_path / "spec-controller" / "spec-controller.db") == 7, res.output
