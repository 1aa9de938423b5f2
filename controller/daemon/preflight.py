"""What the daemon checks and builds before it starts anything, in the daemon process: the engine its configuration
names (built only to read the configuration, whose refusals are usage errors), the paths the operator gave, and what
could clash with another process (the control socket, the metrics port, files shared with the engine). `run` makes
these checks before an engine takes minutes to start, `config check` the ones that need no free socket; Fatal is
the refusal both end in, with the exit code."""
from __future__ import annotations

import errno
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any, Callable

from ..paths import (UNIT_DB, UNIT_SOCKET, default_db, default_socket, denied_note, denied_step, home_unexpanded,
                     shared_path, socket_path_problem)
from ..sim.profile import ProfileError
from .engines.base import Engine, EngineError, EngineNotInstalled


class Fatal(Exception):
    """A start refused or failed: the daemon exits with code (2: a usage error, as specctl says it)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def build_engine(cfg: dict, last_t: float = 0.0) -> Engine:
    """last_t: the newest engine time in the database (the simulator's clock resumes there)."""
    kind = cfg["engine"]["kind"]
    if kind == "sim":
        from ..sim.profile import load_profile, load_trace
        from .engines.sim import SimEngine
        sim = cfg["sim"]

        def read(key: str, load: Callable, *args: Any) -> Any:      # its errors name the setting ([sim] or --flag)
            try:
                return load(*args)
            except ProfileError as e:
                raise ProfileError(f"config: [sim] {key} (--{key}): {e}") from None
        fixed = sim["concurrency"] or sim["arrival_rate"]
        trace = None if fixed else read("trace", load_trace, sim["trace"])
        named_by_trace = not sim["profile"] and trace is not None and trace.profile     # (its refusal: the trace's)
        profile = read("trace" if named_by_trace else "profile", load_profile,
                       sim["profile"] or (trace and trace.profile) or "crossover-b")
        if trace is not None:          # its acceptance must fit the profile's chain
            try:
                trace = load_trace(sim["trace"], profile)
            except ProfileError as e:
                # (helper-150: `run --profile seed` was refused as '[sim] trace (--trace): trace mixed-shift.toml ...',
                # a trace never named: the default load, which two of the four shipped profiles cannot run)
                if not sim["profile"] or cfg.get("_trace_given", True):
                    raise ProfileError(f"config: [sim] trace (--trace): {e}") from None
                raise ProfileError(f"config: [sim] profile (--profile) {sim['profile']} does not fit the default load, "
                                   f"[sim] trace {sim['trace']}: {e}; give it a load of its own ([sim] concurrency, "
                                   "arrival_rate or a trace that fits: --concurrency N, --arrival-rate R, --trace T)"
                                   ) from None
        return SimEngine(profile, trace, sim["concurrency"], sim["speed"], sim["seed"], last_t, sim["arrival_rate"])
    from .engines.sglang import SGLangEngine
    return SGLangEngine(cfg["sglang"], cfg["policy"]["initial_threshold"])


def configured_engine(cfg: dict, last_t: float = 0.0) -> Engine:
    """build_engine, whose refusals are configuration errors (building only reads the configuration)."""
    try:
        return build_engine(cfg, last_t)
    except (ProfileError, EngineError) as e:
        raise Fatal(str(e), 2) from None


def check_installed(engine: Engine) -> None:
    """run's check, before the database is opened, of what config check refuses with exit 2: the interpreter that would
    run SGLang lacks it or the plugin (was exit 1 after a start event, restarted by the unit every 5 s for ever). One
    that did not answer in time is exit 1: the unit's restart asks again (exit 2 would keep the service down)."""
    try:
        engine.check_installed()
    except EngineNotInstalled as e:
        raise Fatal(str(e), 2) from None
    except EngineError as e:
        raise Fatal(str(e), 1) from None


def check_given_paths(cfg: dict) -> None:
    """The database and socket paths the operator gave (Fatal, code 2, where not): run's first check, config check's."""
    _given_parent_exists("--db / [storage] db", cfg["storage"]["db"], default_db(), UNIT_DB)
    _given_parent_exists("--socket / [control] socket", cfg["control"]["socket"], default_socket(), UNIT_SOCKET)


def _given_parent_exists(what: str, given: str | None, default: Path, the_units: Path) -> None:
    """A path the operator gave lives in a directory that exists (a typo must not start on a fresh, empty state)."""
    if not given:
        return
    parent = Path(given).absolute().parent
    try:
        if parent.is_dir():
            return
        there = parent.exists()
    except PermissionError:     # (below a directory this user may not enter: the file's own check names the permission)
        return
    tilde = f" ({why})" if (why := home_unexpanded(given)) else ""     # ('~/x.db' quoted: a folder named ~)
    state = "is not a directory" if there else f"does not exist{tilde}"
    where = str(default) if default == the_units else f"{default} here, {the_units} under the unit"
    raise Fatal(f"{what} {given}: its directory {parent} {state} (create it, or leave the option out for "
                f"the default: {where})", 2)


def port_taken(port: int, error: OSError, addr: str | None = None) -> Fatal:
    """The metrics port refused, at the check here and at the bind once the engine is ready: another process holds it
    (exit 1: it may let go), or a port below the unprivileged range that this user may not bind (exit 2: the unit's user
    has no capability to bind it, so a restart would be refused again; root never meets it). An address this host does
    not have is the address's fault, named (helper-150: 'metrics port 9187: Cannot assign requested address')."""
    if isinstance(error, PermissionError) and (why := privileged_port(port)):
        return Fatal(f"metrics port {port}: {error.strerror} ({why})", 2)
    if error.errno == errno.EADDRNOTAVAIL and addr:
        return Fatal(f"metrics address {addr} ([control] metrics_addr), port {port}: {error.strerror} (no interface of "
                     "this host has it)")
    if (isinstance(error, socket.gaierror) or error.errno == errno.EINVAL) and addr:
        # (an IP address to ipaddress that no bind takes as written, '::1%lo': exit 1, "metrics port N: Name or service
        # not known", restarted every 5 s; a restart cannot help, as for the config's other refusals)
        scope = " (the metrics server binds an address without a '%' scope)" if "%" in addr else ""
        return Fatal(f"metrics address {addr} ([control] metrics_addr) cannot be bound: {error.strerror}{scope}", 2)
    return Fatal(f"metrics port {port}: {error.strerror}")


PORT_START = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")     # (Linux; 1024 where it cannot be read)


def privileged_port(port: int) -> str | None:
    """Why a user without CAP_NET_BIND_SERVICE (the unit's: no capabilities) may not bind `port`, or None."""
    try:
        start = int(PORT_START.read_text())
    except (OSError, ValueError):
        start = 1024
    return (f"below {start}: only root or CAP_NET_BIND_SERVICE may bind it, and the unit's user has neither; choose a "
            f"port from {start} up") if 0 < port < start else None


def check_metrics_port(cfg: dict, held_is_ok: bool = False) -> None:
    """The metrics port can be bound here (Fatal where not: port_taken's line). held_is_ok: config check's, where a port
    another process holds is no refusal (the running daemon's own metrics server holds it during a check); every other
    refusal (a port below the unprivileged range for a user, an address this host does not have) is run's too
    (helper-142, helper-145: check said ok of both, and run refused them)."""
    port, addr = cfg["control"]["metrics_port"], cfg["control"]["metrics_addr"]
    if not port:
        return
    from .metrics import check_port_free
    try:
        check_port_free(port, addr)
    except OSError as e:
        if not (held_is_ok and e.errno == errno.EADDRINUSE):
            raise port_taken(port, e, addr) from None


def check_files_apart(cfg: dict, engine_files: tuple[tuple[str, Path], ...]) -> None:
    """The control socket can be one (its path not too long, no file or directory there) and the socket, the database
    and the engine's own files are different files (Fatal, code 2, where not): run's and config check's (which said
    ok of a default socket path too long under a long $XDG_STATE_HOME, which run refused)."""
    sock = Path(cfg["control"]["socket"] or default_socket()).absolute()
    if problem := socket_path_problem(sock):      # (a usage error, as specctl says it: exit 2)
        raise Fatal(f"control socket {sock}: {problem}", 2)
    if os.path.islink(sock):        # (specctl connects through one; run's probe refused it, exit 1, and check said ok)
        from .sockprobe import link_refused
        raise Fatal(link_refused(sock), 2)
    if problem := shared_path(sock, Path(cfg["storage"]["db"] or default_db()).absolute(), engine_files):
        raise Fatal(problem, 2)


def check_no_clash(cfg: dict, engine_files: tuple[tuple[str, Path], ...]) -> None:
    """Before an engine takes minutes to start: the folders its files go in, by config check's checks and in its order
    (run's socket probe, asked first, said 'Permission denied', exit 1, below a folder it could not search; its lock
    file's open, 'cannot be created there' in /proc), then what can clash with another process. It makes nothing: the
    socket's folder is made at its bind (api.ControlServer), so a start refused before it leaves no empty folder. The
    database folder's StoreError is main's to word (store_refusal), as the open's."""
    from .sockprobe import check_socket_free
    check_files_apart(cfg, engine_files)
    check_db_folder(Path(cfg["storage"]["db"] or default_db()).absolute())
    check_socket_folder(Path(cfg["control"]["socket"]).absolute())
    check_socket_free(Path(cfg["control"]["socket"]))
    check_metrics_port(cfg)


# what to do about a refusal of a database path that stays (faults.Lasting's errno): run's and config check's words
_WRITE = "; let this user write there (its owner, its mode), or give another --db"
_REMOVE = "; remove it (nothing else belongs there)"
_REMEDIES = {errno.EACCES: _WRITE, errno.EPERM: _WRITE, errno.EISDIR: _REMOVE, errno.ENXIO: _REMOVE,
             errno.EROFS: "; give a --db on a writable file system (under the unit: leave [storage] db empty, for its "
                          "state directory)", errno.ENOTDIR: "; give another --db",
             errno.ENOENT: "; give a --db on a file system that takes new files"}


def store_refusal(e: Exception) -> Fatal:
    """run's and config check's one word on a database, its lock file, journals or folder that cannot be used: exit 2
    with what to do where no restart changes it (faults.Lasting: corrupt, a newer schema, another application's file,
    a mode or a mount refusing this user, a file in the way), which the unit keeps down; else exit 1, which the unit
    retries every 5 s (a lock another process holds, a full disk, an I/O error). (helper-172: corrupt, a newer schema,
    a mode and a file planted at the lock's or a journal's path exited 1, restarted every 5 s for good.)"""
    from state.faults import Lasting
    if not isinstance(e, Lasting):
        return Fatal(str(e), 1)
    if e.errno in (errno.EACCES, errno.EPERM) and e.path and (step := denied_step(e.path)):
        return Fatal(f"{e} ({step})", 2)          # (a folder of this user's own: the chmod, as the socket's says it)
    return Fatal(str(e) + _REMEDIES.get(e.errno, ""), 2)


def check_store_opens(cfg: dict) -> tuple[dict, list[str]]:
    """config check's look at what run's start opens and makes, refused (Fatal) as run's start refuses it
    (store_refusal's exit 2); what a retry may pass (a lock, a full disk) is a note. The database's folder and the
    control socket's, folders this user may make files in (the lock file, SQLite's -wal / -shm, the socket), an
    existing lock file a start could open, journals that are regular files (no link, FIFO or folder there), and an
    existing database file as run's open looks at it (db.pin_file) and reads it (quick_check, schema) but read-only,
    as specctl reads it: nothing is locked or made. Returns the settings saved there (what a start resumes) and the
    notes. (newcomer-146, helper-168: check said ok of a --db run then refused; helper-172: of a corrupt database, one
    of a newer schema, and it opened the database twice.)"""
    from state import queries
    from state.db import NoData, StoreError, describe, journals_problem, open_store, pin_file
    from state.lock import DaemonLock
    db = Path(cfg["storage"]["db"] or default_db()).absolute()
    saved: dict = {}
    notes: list[str] = []
    try:                        # (what run's start opens first: the lock file, then the journals with the database)
        check_db_folder(db)
        DaemonLock(db).check_file()
        if problem := journals_problem(db):
            raise problem
        if os.path.lexists(db) and pin_file(db, readonly=False).st_size:    # (none or empty: run makes it ours)
            store = open_store(db, readonly=True)
            try:
                saved = queries.settings(store)
            except sqlite3.Error as e:          # (a page quick_check passed: a traceback out of config check)
                raise describe(db, e, readonly=True) from None
            finally:
                store.conn.close()
    except NoData:              # (no tables yet: a start makes them, and resumes nothing)
        pass
    except StoreError as e:
        if (refusal := store_refusal(e)).code == 2:
            raise refusal from None
        notes.append(f"the policy saved in {db}, which run would resume, could not be read: {e}")
    try:
        check_socket_folder(Path(cfg["control"]["socket"] or default_socket()).absolute())
    except Fatal as e:          # (what a retry may pass is a note, as the database's: run exits 1, which the unit retries)
        if e.code == 2:
            raise
        notes.append(str(e))
    return saved, notes


def check_db_folder(db: Path) -> None:
    """StoreError (faults.refused's split) where the database's folder cannot be made, or take the first file a start
    makes there (the lock file, the database, SQLite's journals): run's preflight and config check's one check, in one
    wording (a lock file there was said not to be creatable, by config check)."""
    from state.db import folder_refused, journals_refused, uncreatable
    from state.lock import DaemonLock
    from state.mounts import refusing
    if refusal := refusing(db.parent):
        folder, err = refusal
        if folder != db.parent or err.errno == errno.ENOTDIR:
            raise folder_refused(db.parent, err)
        for what, path in (("lock file", DaemonLock(db).path), ("database", db)):
            if not os.path.lexists(path):
                raise uncreatable(what, path, err.errno, err.strerror)
        raise journals_refused(db, err.errno)


def check_socket_folder(sock: Path) -> None:
    """Fatal where the control socket cannot be made in its folder: exit 2 where that stays until the operator acts (a
    mode, a mount, a file in the way: run's start exited 1 on it, restarted every 5 s for good: helper-172); exit 1,
    which the unit retries, for an error met while asking that a retry may pass (an I/O error: faults.refused's split,
    as the database folder's)."""
    from state.faults import Lasting, refused
    from state.mounts import refusing
    if (refusal := refusing(sock.parent)) is not None:
        folder, err = refusal       # (its own folder refusing, or one on the way: is_dir() raised under a folder without x)
        what = "the control socket in" if folder == sock.parent and err.errno != errno.ENOTDIR else \
            "the control socket's directory"
        message = f"cannot create {what} {sock.parent}: {_said(sock.parent, refusal)}"
        raise Fatal(message, 2 if isinstance(refused(message, err.errno), Lasting) else 1)


def _uncreatable(directory: Path) -> str | None:
    """mounts.refusing's error in words, with the chmod where the folder refusing is this user's own; or None."""
    from state.mounts import refusing
    refusal = refusing(directory)
    return None if refusal is None else _said(directory, refusal)


def _said(directory: Path, refusal: tuple[Path | None, OSError]) -> str:
    folder, err = refusal
    return err.strerror + denied_note(folder or directory, err)
