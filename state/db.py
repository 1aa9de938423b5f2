"""Opening the SQLite store: pragmas, integrity, migrations, the one-daemon lock.

The daemon runs as root: the database, its journal files and the lock file are never reached
through a symbolic link (a link planted by another user would make root write into its target).
The lock file is created readable by its owner only; the database 0640 (and SQLite gives its journals the
database's mode): the service's group reads it with the daemon down. The umask may take more away."""
from __future__ import annotations

import errno
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

from .faults import Lasting, NoData, NotOurs, StoreError, classify, refused
from .migrations import MIGRATIONS, TABLES, V1_COLUMNS, NewerSchema, migrate
from .mounts import on_read_only_mount

BUSY_TIMEOUT_MS = 5000
SIDECARS = ("-wal", "-shm", "-journal")


SQLITE_MAGIC = b"SQLite format 3\x00"


def _damaged(path: Path, detail: object) -> StoreError:
    """A file SQLite cannot read: a damaged spec-controller database (move it aside), or a file that
    never was one (not SQLite, or SQLite without spec-controller's schema version): refused as such,
    with no advice to move someone else's file."""
    try:
        fd = open_nofollow(path, os.O_RDONLY, "database")
        try:
            head = os.pread(fd, 100, 0)
        finally:
            os.close(fd)
    except (StoreError, OSError):
        head = b""           # unreadable now: judge by SQLite's word alone
    if head and not head.startswith(SQLITE_MAGIC):
        return NotOurs(f"{path} is not a spec-controller database (not an SQLite file); refusing it")
    if len(head) >= 64 and int.from_bytes(head[60:64], "big") == 0:    # PRAGMA user_version: never migrated
        return NotOurs(f"{path} is not a spec-controller database (an SQLite file without its schema); refusing it")
    return Lasting(f"database {path} is corrupt ({detail}); move it aside to start afresh")


def describe(path: Path, err: sqlite3.Error, readonly: bool = False) -> StoreError:
    """An SQLite error met at path, in one line and classified (faults.Lasting where no retry passes)."""
    kind = classify(err)
    if kind == "corrupt":
        return _damaged(path, err)
    if kind == "locked":
        return StoreError(f"database {path} is locked by another process ({err})")
    if kind == "read-only" and readonly:      # (a read of a WAL database needs its -shm file, which it may create)
        return StoreError(f"database {path} cannot be read by this user ({err}): it is in WAL mode (a daemon holds it "
                          f"or did not stop cleanly) and its -shm file cannot be made in {path.parent}; run as the "
                          "service's user")
    if kind == "read-only":
        if not may(path.parent, os.W_OK | os.X_OK):     # (its journals cannot be made there: no retry changes that)
            return journals_refused(path, errno.EACCES)
        return StoreError(f"database {path} cannot be opened for writing ({err})")
    return StoreError(f"database {path}: {err}")


DB_MODE = 0o640        # owner writes, the service's group reads (specctl status offline), nobody else


def uncreatable(what: str, path: Path, errno_: int, why: str | None = None) -> Lasting:
    """A file of ours (the lock file, the database) that its folder refuses to take: run's words, config check's. why:
    the refusal's own words where errno's are not the whole story (a kernel file system: mounts)."""
    return Lasting(f"{what} {path} cannot be created in {path.parent} ({why or os.strerror(errno_)})", errno_, path)


def journals_refused(path: Path, errno_: int) -> Lasting:
    """A database (and its lock file) there, whose folder takes no new file: SQLite's journals cannot be made beside it.
    run's open and the preflight's look (run's, config check's) in one line (SQLite's own words, 'unable to open
    database file', said nothing)."""
    return Lasting(f"database {path} cannot be opened for writing: its folder {path.parent} takes no new file "
                   "(SQLite's journals)", errno_)


def folder_refused(folder: Path, err: OSError) -> StoreError:
    """The database's folder that cannot be made (mkdir -p): run's words, config check's; faults.refused's split. A file
    at its path (mkdir's EEXIST) is ENOTDIR, as one above it is: no retry changes it ('File exists' was exit 1)."""
    code = errno.ENOTDIR if err.errno == errno.EEXIST else err.errno
    # (folder: below one of the user's own without x or w, store_refusal names that one and the chmod, as the socket's)
    return refused(f"cannot create {folder}: {os.strerror(code) if code != err.errno else err.strerror}", code, folder)


def open_nofollow(path: Path, flags: int, what: str, mode: int = 0o600) -> int:
    """os.open without following a symbolic link at path; StoreError (one line) on any failure."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Lasting(f"{what} {path} is a symbolic link; refusing to follow it (give the real path)") from None
        if e.errno == errno.ENOENT and flags & os.O_CREAT and not path.parent.is_dir():
            # (its folder gone since the start made it: removed meanwhile, which a restart makes again)
            raise StoreError(f"{what} {path} cannot be created: its folder {path.parent} vanished") from None
        if e.errno == errno.ENOENT and flags & os.O_CREAT:     # (its directory there: one that takes no new file,
            raise Lasting(f"{what} {path} cannot be created there ({e.strerror})", e.errno) from None   # /proc)
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and flags & os.O_CREAT and not os.path.lexists(path):
            # (the folder refuses a new file: 'database D: Permission denied' named a file that is not there)
            raise uncreatable(what, path, e.errno) from None
        if e.errno == errno.ENOENT:
            raise StoreError(f"{what} {path} does not exist") from None
        raise refused(f"{what} {path}: {e.strerror}", e.errno) from None


def pin_file(path: Path, readonly: bool) -> os.stat_result:
    """The database file itself, not followed if a link (created 0640: the service's group reads it offline,
    docs/systemd.md; SQLite gives its journals the same mode); its identity. An existing file is
    never opened here: closing any descriptor of a file drops every POSIX lock this process holds on it,
    those of SQLite's open connections too (the daemon's, while an API read opens another). config check asks it of an
    existing file, as run's open would (nothing is made there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if readonly:
            raise StoreError(f"database {path} does not exist") from None
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, "database", DB_MODE)   # new: no connection has it yet
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise refused(f"database {path}: {e.strerror}", e.errno) from None
    if stat.S_ISLNK(st.st_mode):
        raise Lasting(f"database {path} is a symbolic link; refusing to follow it (give the real path)")
    if stat.S_ISREG(st.st_mode) and not may(path, os.R_OK if readonly else os.R_OK | os.W_OK):
        if not readonly and on_read_only_mount(path):
            raise Lasting(f"database {path}: {os.strerror(errno.EROFS)}", errno.EROFS)
        if not readonly and may(path, os.R_OK):       # (a member of the service's group: reads, may not write)
            raise Lasting(f"database {path} cannot be opened for writing ({os.strerror(errno.EACCES)})", errno.EACCES)
        raise Lasting(f"database {path}: {os.strerror(errno.EACCES)}", errno.EACCES)
    if not stat.S_ISREG(st.st_mode):
        raise Lasting(f"database {path} is not a regular file; give the database's own path")
    if problem := journals_problem(path, writing=not readonly):
        raise problem
    return st


def journals_problem(path: Path, writing: bool = True) -> Lasting | None:
    """Why SQLite's journals beside the database at path (-wal, -shm, -journal) cannot be used, or None: a symbolic
    link there, anything but a regular file (seen with lstat alone: the open's check, and config check's), or, for a
    writer, one this user may not read and write (root's, restored with the database: SQLite's 'unable to open
    database file', exit 1, restarted every 5 s for good, while config check said ok)."""
    for suffix in SIDECARS:
        side = Path(f"{path}{suffix}")
        try:
            mode = os.lstat(side).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            return Lasting(f"database journal {side} is a symbolic link; refusing to follow it")
        # (a directory there read 'cannot be read by this user ... run as the service's user', to root; a FIFO, a
        # daemon that started and failed every write with an I/O error)
        if not stat.S_ISREG(mode):
            return Lasting(f"database journal {side} is not a regular file; remove it (SQLite keeps the database's "
                           "journal there)")
        if writing and not may(side, os.R_OK | os.W_OK) and os.path.lexists(side):     # (not one gone meanwhile)
            return Lasting(f"database journal {side}: {os.strerror(errno.EACCES)}", errno.EACCES)
    return None


def may(path: Path, mode: int) -> bool:
    """access(2) as open(2) judges it, by the effective ids (os.access's default asks for the real ones: a process acting
    as another user through its effective ids, as tests/test_group_access.py's do as root, was judged as root). The
    daemon's preflight asks it too (the control socket's directory, as bind(2) judges it)."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def _same_file(path: Path, before: os.stat_result) -> None:
    """The file SQLite opened is the one checked: not swapped for a link in between."""
    try:
        now = os.lstat(path)
    except OSError as e:
        raise StoreError(f"database {path} vanished while opening ({e.strerror})") from None
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise StoreError(f"database {path} was replaced while opening; refusing it")


def _newer_schema(path: Path, err: NewerSchema) -> Lasting:
    """A newer schema, found before the migration or by it (written in between by a newer version starting beside):
    one line, and Lasting, since no restart of this version changes it (the unit keeps it down, exit 2)."""
    return Lasting(f"database {path}: {err}: a newer version wrote it; upgrade spec-controller, or give another --db")


def _check_schema(path: Path, conn: sqlite3.Connection, readonly: bool) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):        # (a reader went on to query columns this version expects: a traceback)
        raise _newer_schema(path, NewerSchema(version))
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if version < 0:      # (migrate ran range(-1, n): _v1 twice, its tables added to the file before the second failed)
        raise NotOurs(f"{path} is not a spec-controller database (schema version {version}); refusing it")
    if version:          # (another application's file at user_version 1: every query was a traceback, no such table)
        if missing := [t for t in TABLES if t not in tables]:
            raise NotOurs(f"{path} is not a spec-controller database, or a damaged one: schema version {version} "
                          f"without its table{'s' if len(missing) > 1 else ''} {', '.join(missing)}; refusing it")
        # (a table of ours without its columns: every read and the start were a traceback; each column named, 8 at most:
        # five of them named read as the whole want, and a table mended by those five was refused again)
        for table in TABLES:
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            if lacks := [c for c in V1_COLUMNS[table] if c not in have]:
                raise NotOurs(f"{path} is not a spec-controller database, or a damaged one: its table {table} "
                              f"lacks the column{'s' if len(lacks) > 1 else ''} {', '.join(lacks)}; refusing it")
        return
    if tables:
        raise NotOurs(f"{path} is not a spec-controller database: it belongs to another application "
                      f"(tables: {', '.join(tables[:5])}); refusing it")     # (run and config check alike)
    if readonly:
        raise NoData(f"database {path} holds no spec-controller data (an empty file)")


def open_store(path: str | os.PathLike, readonly: bool = False, check: bool = True,
               busy_ms: int | None = None) -> sqlite_utils.Database:
    """Open (and for writers migrate) the store. Raises StoreError with one clear line.
    busy_ms: how long a statement waits for another process's lock (default BUSY_TIMEOUT_MS)."""
    busy_ms = BUSY_TIMEOUT_MS if busy_ms is None else busy_ms
    path = Path(path)
    if not readonly:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as e:
            raise folder_refused(path.parent, e) from None
    pinned = pin_file(path, readonly)
    conn = None
    try:
        if readonly:
            # On a read-only file system nothing can change it, and SQLite could not create the WAL
            # index a reader needs: it is opened as immutable.
            frozen = "&immutable=1" if on_read_only_mount(path) else ""
            conn = sqlite3.connect(f"file:{path}?mode=ro{frozen}", uri=True, timeout=busy_ms / 1000,
                                   check_same_thread=False)
        else:
            conn = sqlite3.connect(str(path), timeout=busy_ms / 1000, check_same_thread=False,
                                   isolation_level=None)
        _same_file(path, pinned)
        conn.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        if check:
            row = conn.execute("PRAGMA quick_check").fetchone()
            if not row or row[0] != "ok":
                raise _damaged(path, f"quick_check: {row[0] if row else 'no answer'}")
        _check_schema(path, conn, readonly)
        if readonly:
            return sqlite_utils.Database(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA journal_size_limit=8388608")     # the WAL shrinks back after a checkpoint
        db = sqlite_utils.Database(conn)
        migrate(db)
        return db
    except (sqlite3.Error, StoreError, RuntimeError) as e:
        if conn is not None:
            conn.close()
        if isinstance(e, StoreError):
            raise
        if isinstance(e, sqlite3.Error):
            raise describe(path, e, readonly) from None
        # (migrate's newer schema: one written between _check_schema and migrate, by a newer version starting beside;
        # it was a StoreError, exit 1, restarted every 5 s, where the same schema found a moment earlier was exit 2)
        if isinstance(e, NewerSchema):
            raise _newer_schema(path, e) from None
        raise StoreError(f"database {path}: {e}") from None


@contextmanager
def durable(conn: sqlite3.Connection) -> Iterator[None]:
    """Commits inside are on disk when they return: under the store's synchronous=NORMAL a WAL commit is not synced
    (SQLite: it "might roll back following a power loss or system crash"), and a pin or a policy said saved could be
    gone after one. For commands, the daemon's and specctl's offline ones; samples stay NORMAL (synced at checkpoints).
    sqlite3.Error if the pragma fails (it touches no disk)."""
    conn.execute("PRAGMA synchronous=FULL")
    try:
        yield
    finally:
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error:
            pass


def leave_wal(db: sqlite_utils.Database) -> None:
    """At a clean stop: back to a rollback journal, so that a reader who may not write the
    directory (an operator in the service's group) can open the database read-only; WAL needs
    a -shm file there. The next start switches to WAL again. Best effort: a reader holding the
    database keeps it in WAL, whose files then stay (group-readable)."""
    try:
        db.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error:
        pass


def hold_open(db: sqlite_utils.Database) -> None:
    """Never close `db`, a database removed or replaced under its writer: SQLite's close (and leave_wal) deletes the
    -wal and -shm at the database's *path*, which may be another daemon's by then (a state directory removed and a
    daemon started on fresh files there: it failed with 'disk I/O error' or ran on with its journal unlinked). A
    daemon thread's frame holds it: the interpreter's exit never unwinds that frame, so no finaliser closes it."""
    threading.Thread(target=_hold, args=(db,), name="lost-database", daemon=True).start()


def _hold(db: sqlite_utils.Database) -> None:
    threading.Event().wait()
    del db                                                   # (never reached)
