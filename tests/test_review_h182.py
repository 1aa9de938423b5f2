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


def test_the_install_script_run_without_sudo_refuses_before_it_makes_anything():
    """The README's install is `sudo scripts/install-service.sh`; run without sudo it stopped part way, with venv's
    'Error: [Errno 13] Permission denied: '/opt/spec-controller'', exit 1 (or, where /opt let the user write, a venv
    and no unit). Now one line naming sudo, exit 2, and nothing asked of the interpreter (no venv made)."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="h182-", dir="/tmp"))
    try:
        tmp.chmod(0o777)                     # (the user below logs what it is asked here)
        python = tmp / "python-x"
        # (a 3.11 to the script's version check, -c; anything else asked of it, a venv, logged and failed)
        python.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exit 0; fi\necho "$@" >> {tmp}/asked\nexit 3\n')
        python.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k != "ROOT"}
        env.update(PYTHON=str(python), EXTRAS="", PIP_FLAGS="--no-deps")
        as_user = (lambda: (os.setgid(65534), os.setuid(65534))) if os.geteuid() == 0 else None
        res = subprocess.run(["bash", str(root / "scripts" / "install-service.sh")], cwd="/", env=env,
                             capture_output=True, text=True, timeout=60, preexec_fn=as_user)
        assert res.returncode == 2, res.stdout + res.stderr
        line, = res.stderr.strip().splitlines()
        assert line.startswith("install-service.sh: run it as root (sudo scripts/install-service.sh") and \
            line.endswith("; nothing installed"), line
        assert not (tmp / "asked").exists() and res.stdout == ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
