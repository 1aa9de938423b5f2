"""helper-145's note: `specctl stop`'s paths other than /stop's answer (a drain found by the lock, a dropped /stop, a
daemon not answering) took the pid in the lock file for a process here. A container's daemon on a shared database
writes its own namespace's pid, which names another process here (its pid 1 the host's init): specctl waited for
that process to exit (150 s, then "had not exited", exit 1) and advised `kill -TERM PID` here. The lock file now
carries the holder's pid namespace beside its pid."""
import os
import threading

from click.testing import CliRunner

from controller.cli.main import cli
from controller.cli.options import EXIT_STARTING
from state.lock import DaemonLock
from tests.test_stop_while_draining import held

# A process standing for a container's daemon: the lock file (and its start on record) names a pid alive here, this
# test's, standing for the host's process of that number, and namespace 1, no namespace's inode
OTHER = f"{os.getpid()} 1"


def test_the_lock_file_says_the_holders_pid_namespace(short_tmp):
    db = short_tmp / "s.db"
    lock = DaemonLock(db)
    lock.acquire(namespace=4026531836)
    try:
        other = DaemonLock(db)
        assert (other.holder(), other.holder_namespace()) == (str(os.getpid()), 4026531836)
    finally:
        lock.release()
    assert DaemonLock(db).holder_namespace() is None          # (none holds it)


def test_a_drain_found_by_the_lock_of_another_namespaces_daemon_ends_at_the_locks_release(short_tmp):
    """Its socket gone, its lock held, its stop on record: the release is the end, not the exit of a pid here."""
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=True, written=OTHER) as child:
        timer = threading.Timer(0.3, lambda: (child.stdin.write("go\n"), child.stdin.flush()))
        timer.start()
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", "3"])
        timer.join()
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"daemon pid {os.getpid()} stopped (it was already stopping)"


def test_a_starting_daemon_of_another_namespace_is_not_to_be_killed_by_its_pid_here(short_tmp):
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=False, written=OTHER):
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", "3"])
    assert res.exit_code == EXIT_STARTING, res.output
    line = res.output.strip()
    assert "\n" not in line and "another pid namespace" in line and "where it runs" in line, line
