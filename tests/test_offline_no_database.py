"""With no daemon and no database, every specctl command that reads says so in the same line and exit code: status and
threshold exited 3 ('daemon is not running (...) and there is no database at D'), while history and policy show
exited 1 ('database D does not exist') and plot 1 ('no database at D'). README: 3, the daemon is not running. policy
list prints the policies' catalogue (unmarked) and exits 0: the catalogue is no database's."""
import pytest
from click.testing import CliRunner

from controller.cli.offline import START_HINT
from controller.cli.main import cli


@pytest.fixture
def nothing(short_tmp, monkeypatch):
    """No daemon on the socket, no database at the default path (--db not given: the default's case)."""
    sock, db = short_tmp / "none.sock", short_tmp / "state" / "spec-controller.db"
    monkeypatch.setattr("controller.cli.common.find_db", lambda: db)
    return sock, db


READS = [["status"], ["status", "--json"], ["threshold"], ["history"], ["history", "--json"], ["plot", "PLOT"],
         ["policy", "show"], ["policy", "show", "--json"]]


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_every_read_with_no_daemon_and_no_database_says_the_same_line_and_exits_3(nothing, argv):
    sock, db = nothing
    argv = [str(sock.parent / "p.png") if word == "PLOT" else word for word in argv]
    res = CliRunner().invoke(cli, ["--socket", str(sock), *argv], prog_name="specctl")
    assert (res.exit_code, res.stderr) == (
        3, f"specctl: daemon is not running (no daemon socket at {sock}) and there is no database at {db}{START_HINT}\n"), \
        (res.exit_code, res.output)
    assert res.stdout == "" and not db.exists() and not (sock.parent / "p.png").exists()


def test_policy_list_still_prints_the_catalogue(nothing):
    sock, db = nothing
    res = CliRunner().invoke(cli, ["--socket", str(sock), "policy", "list"], prog_name="specctl")
    assert res.exit_code == 0 and "thompson" in res.stdout and not db.exists()


def test_plot_with_no_database_beside_a_daemon_that_keeps_another_names_it(nothing, short_tmp):
    """plot reads the file alone: where none is there but a daemon answers (with a database elsewhere), it says which."""
    from tests.daemon_proc import DaemonProc
    _, db = nothing
    d = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        d.wait_socket()
        res = CliRunner().invoke(cli, ["--socket", str(d.socket), "plot", str(short_tmp / "p.png")], prog_name="specctl")
    finally:
        assert d.stop() == 0
    assert (res.exit_code, res.stderr) == (
        1, f"specctl: no database at {db}: the daemon on {d.socket} keeps {d.db} (plot it with --db)\n"), res.output


def test_the_line_says_what_to_do(nothing):
    """helper-160: the line named no next step (the daemon to start, or the database of one running elsewhere)."""
    sock, db = nothing
    res = CliRunner().invoke(cli, ["--socket", str(sock), "status"], prog_name="specctl")
    assert "start the daemon (spec-controller run, or systemctl start spec-controller)" in res.stderr, res.stderr
    assert "(--db / SPECCTL_DB)" in res.stderr and res.stderr.count("\n") == 1, res.stderr
