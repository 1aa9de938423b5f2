"""Opening the SQLite store: pragmas, integrity, migrations, the one-daemon lock."""
from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

import sqlite_utils

from .migrations import migrate

BUSY_TIMEOUT_MS = 5000


class StoreError(RuntimeError):
    """The database cannot be used; the message is one line for the operator."""


def _describe(path: Path, err: sqlite3.Error) -> str:
    text = str(err)
    if "locked" in text or "busy" in text:
        return f"database {path} is locked by another process ({text})"
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return f"database {path} is corrupt ({text}); move it aside to start afresh"
    if "unable to open" in text or "readonly" in text:
        return f"database {path} cannot be opened ({text})"
    return f"database {path}: {text}"


def open_store(path: str | os.PathLike, readonly: bool = False, check: bool = True) -> sqlite_utils.Database:
    """Open (and for writers migrate) the store. Raises StoreError with one clear line."""
    path = Path(path)
    if readonly:
        if not path.exists():
            raise StoreError(f"database {path} does not exist")
        if not os.access(path, os.R_OK):
            raise StoreError(f"database {path} is not readable (permission denied)")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {path.parent}: {e.strerror}") from None
    try:
        if readonly:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   check_same_thread=False)
        else:
            conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
                                   isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if check:
            row = conn.execute("PRAGMA quick_check").fetchone()
            if not row or row[0] != "ok":
                conn.close()
                raise StoreError(f"database {path} is corrupt (quick_check: {row[0] if row else 'no answer'}); "
                                 "move it aside to start afresh")
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            db = sqlite_utils.Database(conn)
            migrate(db)
            return db
        return sqlite_utils.Database(conn)
    except sqlite3.Error as e:
        raise StoreError(_describe(path, e)) from None
    except RuntimeError as e:          # a schema newer than this version knows
        raise StoreError(f"database {path}: {e}") from None


def leave_wal(db: sqlite_utils.Database) -> None:
    """At a clean stop: back to a rollback journal, so that a reader who may not write the
    directory (an operator in the service's group) can open the database read-only; WAL needs
    a -shm file there. The next start switches to WAL again. Best effort: a reader holding the
    database keeps it in WAL, whose files then stay (group-readable)."""
    try:
        db.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error:
        pass


def _pid_in(fd: int) -> str:
    """The pid the lock holder wrote into the lock file ("?" if unreadable)."""
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"


class DaemonLock:
    """An exclusive flock beside the database: one daemon per database."""

    def __init__(self, db_path: str | os.PathLike):
        self.path = Path(f"{db_path}.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(fd)
            os.close(fd)
            raise StoreError(f"another spec-controller (pid {holder}) is running on {self.path.with_suffix('')}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def held_by_other(self) -> bool:
        """True if a live daemon holds the lock (used by specctl for offline writes)."""
        return self.holder() is not None

    def holder(self) -> str | None:
        """The pid written by the live daemon holding the lock ("?" if unreadable), or None if free."""
        if not self.path.exists():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            return _pid_in(fd)
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
