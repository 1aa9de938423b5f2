"""helper-168: what the last reviewers reported and left alone, each test red before its fix."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon import main as daemon_main
from controller.daemon.sockprobe import SocketRefused, check_socket_free
from tests.test_denied_step import _as_owner


# --- a refusal by the user's own state folder names it and the chmod, in the daemon as in specctl ---------------------
@pytest.fixture
def state(short_tmp):
    os.chmod(short_tmp, 0o755)      # (nobody passes into the test's folder)
    folder = short_tmp / "state"
    folder.mkdir()
    CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(short_tmp / "a.db")])   # (imports, as root)
    yield folder
    os.chmod(folder, 0o700)


def test_run_on_its_own_state_folder_at_000_names_the_folder_and_the_chmod(state):
    """`spec-controller run` said only 'control socket path ...: Permission denied'."""
    with _as_owner(state):
        os.chmod(state, 0)
        try:
            with pytest.raises(SocketRefused) as err:
                check_socket_free(state / "control.sock")
        finally:
            os.chmod(state, 0o700)
    assert str(err.value) == (f"control socket path {state / 'control.sock'}: Permission denied (the folder {state} is "
                              f"yours but its mode 0 refuses you: chmod u+rwx {state})")


def test_config_check_on_its_own_state_folder_at_500_names_the_chmod(state):
    with _as_owner(state):
        os.chmod(state, 0o500)
        try:
            res = CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(state / "x.db"),
                                                        "--socket", str(state / "c.sock")])
        finally:
            os.chmod(state, 0o700)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"spec-controller: cannot create the database's files in {state}: Permission denied "
                                  f"(the folder {state} is yours but its mode 500 refuses you: chmod u+rwx {state})")
