"""A daemon holds the database but does not answer on the socket specctl was given: is its engine still
starting (the control socket opens once the engine is ready), or does it serve another socket (a
mistyped --socket / SPECCTL_SOCKET)? The daemon records its pid and socket in its start event, written
before the engine starts; that answers it. Standard library only (and state.db when asked)."""
from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from .client import DaemonError, DaemonUnreachable, request

T = TypeVar("T")


@dataclass
class Holder:
    pid: str
    db: Path
    given: Path                 # the socket specctl tried
    socket: Path | None         # the one the daemon serves (or will, once its engine is up); None: not known
    serving: bool = False       # it answers there now

    @property
    def elsewhere(self) -> bool:
        """The daemon's socket is known and is not the one given."""
        return self.socket is not None and not same(self.socket, self.given)

    def mismatch(self) -> str:
        """One line for a daemon that serves (or will serve) another socket than the one given."""
        where = "serves its control socket at" if self.serving else "will serve its control socket at"
        later = "" if self.serving else " once its engine is ready"
        return (f"daemon pid {self.pid} holding {self.db} {where} {self.socket}{later}, not at {self.given}; "
                f"give --socket {self.socket} (or SPECCTL_SOCKET)")


def same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def read_quietly(db: Path, query: Callable[[Any], T]) -> T | None:
    """query's answer on db opened read-only, or None where db cannot be opened or read (a hint, never a refusal)."""
    from state.db import StoreError, open_store
    try:
        store = open_store(db, readonly=True, check=False)
    except StoreError:
        return None
    try:
        return query(store)
    except sqlite3.Error:
        return None
    finally:
        store.conn.close()


def recorded_socket(db: Path, pid: str | None) -> Path | None:
    """The socket in the newest start event of the daemon pid, or of any daemon where pid is None (None: not
    recorded, not readable, or the newest start is another process's, e.g. not yet flushed)."""
    from state import queries
    start = read_quietly(db, queries.newest_start) or {}
    return Path(start["socket"]) if "socket" in start and pid in (None, start.get("pid")) else None


def find_holder(db: Path, given: Path, pid: str) -> Holder:
    """What is known of the daemon pid holding db, which did not answer on given."""
    holder = Holder(pid, db, given, recorded_socket(db, pid))
    if holder.elsewhere:
        try:
            answer = request(holder.socket, "GET", "/status", timeout=2.0)
            holder.serving = str(answer["daemon"]["pid"]) == pid
        except (DaemonUnreachable, DaemonError, KeyError, TypeError):
            holder.serving = False
    return holder
