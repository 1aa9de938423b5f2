"""What every specctl command shares: the context (socket, database), one-line failures, JSON
output, the daemon call and the offline database. Heavy modules (sqlite_utils, numpy) are imported
only by the commands that need them: `specctl status` must start in a blink."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import click

from ..paths import find_db, find_socket
from .client import DaemonError, request


OFFLINE_BUSY_MS = 2000      # an offline write waits this long for another process's lock, then says so


class Ctx:
    def __init__(self, socket: str | None, db: str | None):
        self.socket = Path(socket) if socket else find_socket()
        self.db = Path(db) if db else find_db()


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"specctl: {message}", err=True)
    sys.exit(code)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="print JSON (stable schema)")(fn)


def emit(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else render(data))


def call(ctx: Ctx, method: str, path: str, body: dict | None = None) -> Any:
    """The daemon's answer; DaemonUnreachable propagates so commands can fall back."""
    try:
        return request(ctx.socket, method, path, body)
    except DaemonError as e:
        fail(str(e))


def offline_db(ctx: Ctx, write: bool = False):
    """The database itself, for reads (and writes) while no daemon answers."""
    from state.db import DaemonLock, StoreError, open_store
    try:
        if write:
            if DaemonLock(ctx.db).held_by_other():
                fail(f"a daemon holds {ctx.db} but does not answer on {ctx.socket}; nothing changed")
            return open_store(ctx.db, busy_ms=OFFLINE_BUSY_MS)
        return open_store(ctx.db, readonly=True)
    except StoreError as e:
        fail(str(e))


def save_offline(ctx: Ctx, key: str, value: Any) -> None:
    """A setting written straight into the database, used at the daemon's next start; one line
    (and nothing changed) when the database is locked, read-only or full."""
    import sqlite3

    from state import queries
    from state.db import classify
    from state.items import INSERTS
    db = offline_db(ctx, write=True)
    try:
        db.conn.execute(INSERTS["settings"], queries.setting_row(key, value))
    except sqlite3.Error as e:
        fail(f"could not save to {ctx.db}: database {classify(e)} ({e}); nothing changed")
    finally:
        db.conn.close()
