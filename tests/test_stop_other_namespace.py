"""helper-145's note: `specctl stop`'s paths other than /stop's answer (a drain found by the lock, a dropped /stop, a
daemon not answering) took the pid in the lock file for a process here. A container's daemon on a shared database
writes its own namespace's pid, which names another process here (its pid 1 the host's init): specctl waited for
that process to exit (150 s, then "had not exited", exit 1) and advised `kill -TERM PID` here. The lock file now
carries the holder's pid namespace beside its pid."""
import os
import subprocess
import sys

from click.testing import CliRunner

from controller.cli.main import cli
from controller.cli.options import EXIT_STARTING
from state.lock import DaemonLock
from tests.daemon_proc import ROOT

# A process standing for a container's daemon: it holds the lock and writes into it a pid alive here (this test's:
# the host's process of that number) and a namespace not this one; its start (and stop, if asked) on record with that
# pid; it lets go of the lock once told (a line on stdin).
_CONTAINER = """
import os, sys
from state.db import open_store
from state.items import INSERTS, event_item
from state.lock import DaemonLock
db, sock, stopping, pid = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
lock = DaemonLock(db)
lock.acquire(namespace=1)
os.ftruncate(lock._fd, 0)
os.pwrite(lock._fd, f"{pid} 1".encode(), 0)
store = open_store(db)
events = [event_item("start", f"engine=sim policy=bandit threshold=8 pinned=None pid={pid} socket={sock}")]
if stopping:
    events.append(event_item("stop", "specctl stop: exit 0"))
for _, row in events:
    store.conn.execute(INSERTS["events"], row)
store.conn.commit()
store.conn.close()
print("locked", flush=True)
sys.stdin.readline()
lock.release()
"""


def _container(db, sock, stopping: bool) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", _CONTAINER, str(db), str(sock), "1" if stopping else "0",
                              str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(ROOT), text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def _let_go(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.stdin.write("go\n")
        child.stdin.flush()
        child.wait(10)


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
    import threading
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    child = _container(db, sock, stopping=True)
    try:
        timer = threading.Timer(0.3, lambda: (child.stdin.write("go\n"), child.stdin.flush()))
        timer.start()
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", "3"])
        timer.join()
    finally:
        _let_go(child)
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"daemon pid {os.getpid()} stopped (it was already stopping)"


def test_a_starting_daemon_of_another_namespace_is_not_to_be_killed_by_its_pid_here(short_tmp):
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    child = _container(db, sock, stopping=False)
    try:
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", "3"])
    finally:
        _let_go(child)
    assert res.exit_code == EXIT_STARTING, res.output
    line = res.output.strip()
    assert "\n" not in line and "another pid namespace" in line and "where it runs" in line, line
