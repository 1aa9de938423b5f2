"""helper-182 (a newcomer following the README as an unprivileged user): what it met, each red before its fix."""
import os

from click.testing import CliRunner

from controller.cli.main import cli
from tests.daemon_proc import DaemonProc


def test_a_wrong_socket_alone_beside_the_default_daemon_names_its_socket_for_every_command(tmp_path):
    """The README's own daemon (default database and socket) runs; `--socket` mistyped, no `--db`. status, a pin, stop
    and policy show named the socket it serves, exit 2; history, plot and policy set said 'give the --db of the daemon
    meant', exit 3 (not running), of a daemon that runs. Now one line, the same for all: exit 2, nothing changed."""
    state = os.path.join(os.environ["XDG_STATE_HOME"], "spec-controller")
    os.makedirs(state, mode=0o700)
    db, sock = os.path.join(state, "spec-controller.db"), os.path.join(state, "control.sock")
    d = DaemonProc(tmp_path, "--concurrency", "4", config_text=f'[storage]\ndb = "{db}"\n[control]\nsocket = "{sock}"\n',
                   paths_in_config=(db, sock))
    try:
        d.wait_socket()
        d.wait_start_recorded()
        wrong = tmp_path / "typo.sock"
        line = (f"specctl: daemon pid {d.proc.pid} holding {db} serves its control socket at {sock}, not at {wrong}; "
                f"give --socket {sock} (or SPECCTL_SOCKET)")
        before = d.call("GET", "/policy")["name"]
        for command in (["history"], ["plot", str(tmp_path / "p.png")], ["policy", "set", "ucb"], ["status"]):
            res = CliRunner().invoke(cli, ["--socket", str(wrong), *command])
            assert res.exit_code == 2, (command, res.output)
            assert res.output.strip().startswith(line) and len(res.output.strip().splitlines()) == 1, (command, res.output)
        assert d.call("GET", "/policy")["name"] == before and not (tmp_path / "p.png").exists()
    finally:
        assert d.stop() == 0
