"""specctl's offline database: what the read and change commands do where no daemon answers. Reads open the
database read-only (and close it); a change is written straight into it, held off from a daemon's start, refused
where a daemon holds it. Heavy modules (sqlite_utils, state) are imported inside the functions that use them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NoReturn

from ..paths import present, socket_path_too_long
from .common import UNREADABLE, Ctx, fail, lock_holder, not_running, refuse_elsewhere, refuse_unpaired
from .options import EXIT_NOT_RUNNING, EXIT_STARTING, say

if TYPE_CHECKING:
    import sqlite_utils


OFFLINE_BUSY_MS = 2000      # an offline write waits this long for another process's lock, then says so


def offline_db(ctx: Ctx, write: bool = False) -> sqlite_utils.Database:
    """The database itself, for reads (and writes) while no daemon answers."""
    from state.db import StoreError, open_store
    from state.lock import DaemonLock
    refuse_unpaired(ctx)
    try:
        if write:
            refuse_held(ctx, DaemonLock(ctx.db).holder())
            return open_store(ctx.db, busy_ms=OFFLINE_BUSY_MS)
        return open_store(ctx.db, readonly=True)
    except StoreError as e:
        fail(str(e))


def refuse_held(ctx: Ctx, holder: str | None) -> None:
    """An offline change refused where a daemon holds ctx.db (holder: its pid) but did not answer on ctx.socket: the
    socket it serves named where it serves another (exit 2), else that it does not answer (starting, or hung)."""
    if holder is None:
        return
    refuse_elsewhere(ctx, holder)
    fail(f"a daemon holds {ctx.db} but does not answer on {ctx.socket}; nothing changed")


START_HINT = ("; start the daemon (spec-controller run, or systemctl start spec-controller), or name the database a "
              "running one keeps (--db / SPECCTL_DB)")    # (no_database's line named no next step: helper-160)


def no_database(ctx: Ctx, why: str) -> NoReturn:
    """A read's answer where no daemon answers (why: DaemonUnreachable's words) and there is no database to read
    either, one line and code for status, threshold, history, plot and policy show (history and policy show exited 1
    'database D does not exist', plot 1 'no database at D'): exit 3, the daemon is not running; 4 where a daemon
    holds the database's lock and has not created it yet (starting)."""
    holder = lock_holder(ctx.db)
    if holder not in (None, UNREADABLE):
        fail(f"daemon pid {holder} holds {ctx.db} but has not created it yet (starting)", EXIT_STARTING)
    fail(f"{not_running(ctx, why)} and there is no database at {ctx.db}{START_HINT}", EXIT_NOT_RUNNING)


def read_offline(ctx: Ctx, read: Callable[[Any], Any], unreachable: Exception) -> Any:
    """A read command's answer from the database, where no daemon answered (unreachable: why); no_database's line
    where there is none."""
    if not present(ctx.db):
        no_database(ctx, str(unreachable))
    return offline_read(ctx, read)


def offline_read(ctx: Ctx, read: Callable[[Any], Any]) -> Any:
    """read(db) on the database opened for reading, closed afterwards: Python 3.11's sqlite3 keeps each
    connection in a reference cycle (its statement cache), so one dropped unclosed lives until the cyclic
    GC and, still open, can hold off the next offline write in the same process ('database is locked')."""
    db = offline_db(ctx)
    try:
        return read(db)
    finally:
        db.conn.close()


def save_offline(ctx: Ctx, key: str, value: Any) -> None:
    """A setting written straight into the database, used at the daemon's next start; one line
    (and nothing changed) when the database is locked, read-only or full."""
    import sqlite3

    from state import queries
    from state.db import classify, durable, leave_wal
    from state.lock import DaemonLock
    from state.items import INSERTS
    refuse_unpaired(ctx)      # (before held_off, which makes the state folder's lock file: a refusal makes nothing)
    with DaemonLock(ctx.db).held_off():     # a daemon starting now waits for the write, and reads it
        db = offline_db(ctx, write=True)
        try:
            with durable(db.conn):                       # (said saved once it is on disk)
                db.conn.execute(INSERTS["settings"], queries.setting_row(key, value))
        except sqlite3.Error as e:
            fail(f"could not save to {ctx.db}: database {classify(e)} ({e}); nothing changed")
        finally:   # (opened as the daemon opens it, in WAL: left in it, the service's group could not read it)
            leave_wal(db)
            db.conn.close()
    if not ctx.socket_given and (why := socket_path_too_long(ctx.socket)):     # (newcomer-146: said 'applied at next
        say(f"specctl: note: a daemon started in this environment refuses its control socket {ctx.socket}: {why}; "
            "start it with --socket (or [control] socket)", err=True)               # start', and run refused)
