"""`specctl stop`: the daemon drains and exits (through the control API), and specctl waits until
it has: until its lock on the database is free. Touches only the daemon behind the socket."""
from __future__ import annotations

import os
import time
from pathlib import Path

import click

from ..numtext import plain
from ..paths import pid_namespace, present
from .client import DaemonDropped, DaemonUnreachable
from .common import UNREADABLE, Ctx, call, fail, lock_holder, not_running
from .holder import find_holder
from .options import EXIT_NOT_RUNNING, EXIT_STARTING, EXIT_UNFLUSHED, EXIT_USAGE, Bounded


def _no_such_process(pid: int) -> bool:
    """The kernel's word: signal 0 finds no process (a zombie still counts as one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _gone(db: Path, pid: int) -> bool:
    holder = lock_holder(db)
    if holder != UNREADABLE:
        return holder is None
    return _no_such_process(pid)   # the lock file is not readable to this user: ask the kernel


def held_here(db: Path, pid: int | str) -> bool:
    """The daemon pid that holds db's lock (or held it last) runs in this pid namespace (or did not say where it
    runs): its pid names it here. (helper-145: a container's daemon on a shared database, its pid another process
    here, was to be waited for and told to be stopped with `kill -TERM PID` here; mutation-today-2026-12-07u: one
    that let go of its lock as specctl looked was taken for one of this namespace)"""
    from state.lock import DaemonLock
    ns = DaemonLock(db).holder_namespace(str(pid))
    return ns is None or ns == pid_namespace()


def exited(pid: int) -> bool:
    """The process has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return fields[0] in ("Z", "X")
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return True
    except (OSError, IndexError):
        pass
    return _no_such_process(pid)   # no /proc: ask the kernel


def stopping(db: Path, socket: Path) -> str | None:
    """The pid of the daemon that last started on db serving socket, where its stop event follows that start (written
    as its drain flushes, before it closes its socket and lets go of the lock): a daemon draining or drained. None:
    none on record, another socket's, or not stopping."""
    from state import queries

    from .holder import read_quietly, same
    newest = lambda store: (queries.newest_start(store), queries.after_newest_start(store, "stop"))
    words, stop = read_quietly(db, newest) or ({}, None)
    if not words.get("pid", "").isdigit() or not words.get("socket") or not same(Path(words["socket"]), Path(socket)):
        return None
    return words["pid"] if stop else None


def draining_pid(ctx: Ctx) -> str | None:
    """The pid of the daemon on ctx's database and socket that is draining or drained (its stop on record after its
    start, its lock free or its own), None where none is: a dropped request is then a fault, not the drain's end."""
    if not present(ctx.db):
        return None
    holder = lock_holder(ctx.db)
    pid = stopping(ctx.db, ctx.socket) if holder != UNREADABLE else None
    return pid if pid is not None and holder in (None, pid) else None


def stopped_meanwhile(ctx: Ctx, dropped: DaemonDropped, timeout: float = 150.0) -> DaemonUnreachable:
    """A change the daemon dropped unanswered at the end of its drain (`stop --no-wait`, systemctl stop, SIGTERM just
    before it): once the drain is over it is no daemon's to take, and the caller saves it as with none running
    (newcomer-146: `threshold pin` said 'whether it was applied, status says', exit 1, and it was not saved). A drop
    with no drain on record, or a drain not over within timeout, is the fault's line, exit 1."""
    pid = draining_pid(ctx)
    if pid is None or not wait_gone(Path(ctx.db), int(pid), timeout, seen=held_here(ctx.db, pid)):
        fail(str(dropped))
    return DaemonUnreachable(f"daemon pid {pid} stopped while asked")


def wait_gone(db: Path, pid: int, timeout: float, poll_s: float = 0.1, seen: bool = True) -> bool:
    """Until the daemon has let go of the database and then exited (its last log line and the
    interpreter's exit follow the lock's release by ~0.1-0.2 s). seen False: its pid is another pid namespace's (a
    container's), which names another process here: the lock's release is all there is to wait for."""
    end = time.monotonic() + timeout
    while not _gone(db, pid):
        if time.monotonic() > end:
            return False
        time.sleep(poll_s)
    while seen and not exited(pid):
        if time.monotonic() > end:
            return False
        time.sleep(min(poll_s, 0.02))
    return True


@click.command()
@click.option("--timeout", metavar="SECONDS", type=Bounded("--timeout", 1, 3600, float), default=150.0,
              show_default=True, help="how long to wait for the drain")
@click.option("--no-wait", is_flag=True, help="ask, and return at once")
@click.pass_obj
def stop(ctx: Ctx, timeout: float, no_wait: bool) -> None:
    """Ask the daemon to drain and exit, and wait until it has."""
    try:
        res = call(ctx, "POST", "/stop", dropped=True)
    except DaemonDropped as e:
        # A daemon closing its socket at the end of its drain (an earlier `stop --no-wait`, systemctl stop, SIGTERM)
        # drops the clients it has not served: wait for that drain as for our own (a second `specctl stop` was told
        # "whether POST /stop was applied, `specctl status` says", exit 1). One that drops a request and has no stop
        # on record is a fault, said as before.
        if (pid := draining_pid(ctx)) is not None:
            _wait(Path(ctx.db), int(pid), timeout, already=True, seen=held_here(ctx.db, pid))
            return
        fail(str(e))
    except DaemonUnreachable as e:
        holder = lock_holder(ctx.db) if present(ctx.db) else None
        if holder and holder != UNREADABLE:
            found = find_holder(ctx.db, ctx.socket, holder)
            if found.elsewhere:             # a mistyped --socket: never advise killing a healthy daemon
                fail(found.mismatch(), EXIT_USAGE)
            here = held_here(ctx.db, holder)
            if stopping(ctx.db, ctx.socket) == holder:    # its socket closed, its lock not yet free: the end of a drain
                _wait(Path(ctx.db), int(holder), timeout, already=True, seen=here)
                return
            kill = f"kill -TERM {holder}" + ("" if here else " where it runs: its pid names another process here")
            who = f"daemon pid {holder}" + ("" if here else " (of another pid namespace: a container's)")
            if found.socket is not None:    # its own socket, as recorded: the engine is still starting
                fail(f"{who} holds {ctx.db} but its control socket is not open yet (engine starting?); "
                     f"stop it with: {kill}", EXIT_STARTING)
            fail(f"{who} holds {ctx.db} but does not answer on {ctx.socket}: if that is its socket, "
                 f"its engine is still starting ({kill} stops it); if not, give its --socket", EXIT_STARTING)
        fail(not_running(ctx, e), EXIT_NOT_RUNNING)
    pid = int(res["pid"])
    if no_wait:
        click.echo(f"daemon pid {pid} is draining")
        return
    # (helper-145: a pid-1 container daemon's stop waited 150 s for the host's pid 1, then said it had not exited)
    _wait(Path(res["db"]), pid, timeout, seen=res.get("pid_namespace") in (None, pid_namespace()))


def _wait(db: Path, pid: int, timeout: float, already: bool = False, seen: bool = True) -> None:
    if not wait_gone(db, pid, timeout, seen=seen):
        if _gone(db, pid):
            fail(f"daemon pid {pid} has drained and let go of its database but had not exited after {plain(timeout)} s")
        fail(f"daemon pid {pid} is still draining after {plain(timeout)} s")
    if why := unflushed(db, pid):
        fail(f"daemon pid {pid} stopped, but {why} (its log says which; it exited {EXIT_UNFLUSHED})", EXIT_UNFLUSHED)
    click.echo(f"daemon pid {pid} stopped" + (" (it was already stopping)" if already else ""))


def unflushed(db: Path, pid: int) -> str | None:
    """Why the daemon that stopped left writes unstored, from its database (helper-159: specctl said 'stopped', exit 0,
    where the daemon exited EXIT_UNFLUSHED): its stop event's exit code, or no stop event after its own start (the
    writer did not finish). None where all is stored, or where the database cannot tell (unreadable, another start)."""
    import sqlite3

    from state import queries
    from state.db import StoreError, open_store
    try:
        store = open_store(db, readonly=True)
        try:
            if queries.newest_start(store).get("pid") != str(pid):
                return None
            stop = queries.after_newest_start(store, "stop")
        finally:
            store.conn.close()
    except (StoreError, OSError, sqlite3.Error):
        return None
    if stop is None:
        return "its stop was not recorded: the database writer did not finish"
    return "its final writes were not all stored" if queries.exit_of(stop) == EXIT_UNFLUSHED else None
