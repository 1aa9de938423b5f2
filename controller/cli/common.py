"""What every specctl command shares: the context (socket, database), one-line failures, JSON
output, the daemon call and which daemon holds a database (the offline database itself: `offline`).
Heavy modules (sqlite_utils, numpy) are imported only by the commands that need them: `specctl
status` must start in a blink."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn

import click

from ..numtext import terminal_text
from ..paths import (UNIT_DB, UNIT_SOCKET, db_path_problem, default_db, default_socket, find_db, find_socket, present,
                     socket_path_problem)
from .client import DaemonDenied, DaemonDropped, DaemonError, DaemonUnreachable, request
from .options import EXIT_ERROR, EXIT_NOT_RUNNING, EXIT_USAGE, fail_as


class Ctx:
    def __init__(self, socket: str | None, db: str | None, typed: Iterable[str] = ()):
        """typed: which of socket / db were typed on the command line (not taken from SPECCTL_SOCKET / SPECCTL_DB),
        for named_again."""
        self._socket = find_socket()          # the default is not checked: commands that reach no daemon use none
        self.socket_given = self.db_given = self.db_checked = False
        not_empty("--socket", socket)
        not_empty("--db", db)
        if socket:
            self.socket = Path(socket)
        self._db = find_db()
        if db:
            self.db = Path(db)
        self._typed = {name: Path(value) for name, value in (("socket", socket), ("db", db)) if name in typed and value}

    def named_again(self, name: str, value: str) -> None:
        """--socket / --db (name) given after a command name, or a second time before it: it replaces the variable's,
        and must agree with the one typed first: `specctl --db A status --db B` read B, A dropped unsaid."""
        from .holder import same
        path = Path(value)
        setattr(self, name, path)           # (its own check first: a path no daemon can use is refused as such)
        typed = self._typed.setdefault(name, path)
        if not same(typed, path):
            raise click.UsageError(f"--{name} given twice, as {typed} and as {path}: give it once; nothing changed")

    @property
    def db(self) -> Path:
        return self._db

    @db.setter
    def db(self, path: Path) -> None:
        """Every way an operator names a database (--db before or after the command, SPECCTL_DB) passes here: a name
        the file system refuses is a usage error (it was an OSError traceback from the first look at it)."""
        problem = db_path_problem(path)
        if problem is not None:
            raise click.UsageError(f"database {path}: {problem}; nothing changed")
        self._db, self.db_given = path, True

    @property
    def socket(self) -> Path:
        return self._socket

    @socket.setter
    def socket(self, path: Path) -> None:
        """Every way an operator names a socket (--socket before or after the command, SPECCTL_SOCKET) passes
        here: a path no daemon can listen on is a usage error, not a daemon that is not running (which
        would save a pin to the database offline while the daemon the operator meant runs on)."""
        problem = socket_path_problem(path)
        if problem is not None:
            raise click.UsageError(f"control socket {path}: {problem}; nothing changed")
        self._socket, self.socket_given = path, True


def not_empty(flag: str, given: str | None) -> None:
    """An empty --socket / --db (an unset variable in a script) is a usage error, not the default taken silently."""
    if given == "":
        raise click.UsageError(f"{flag} is empty: give a path, or leave it out for the default; nothing changed")


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    fail_as("specctl", message, code)


def ago(seconds: float) -> str:
    """A duration for people: 42 s, 1 min 32 s, 17 min, 3.5 h, 2 d (never rounded up to the next unit)."""
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 600:
        whole = int(seconds)
        return f"{whole // 60} min {whole % 60} s"
    if seconds < 5400:
        return f"{int(seconds // 60)} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="print JSON (stable schema)")(fn)


def emit(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else terminal_text(render(data)))


def call(ctx: Ctx, method: str, path: str, body: dict | None = None, dropped: bool = False) -> Any:
    """The daemon's answer; DaemonUnreachable propagates so commands can fall back, and DaemonDropped where
    `dropped` (a change the daemon closed the connection on unanswered: `specctl stop` meeting a daemon that drains)."""
    try:
        status = _check_db(ctx, method)
        if status is not None and (method, path) == ("GET", "/status"):
            return status                   # (the check's own answer: asked once)
        return request(ctx.socket, method, path, body)
    except DaemonError as e:        # a request refused as given is a bad argument, as the options' own checks say
        if dropped and isinstance(e, DaemonDropped):
            raise
        fail(str(e) + (own_daemon_hint(ctx) if isinstance(e, DaemonDenied) else ""),
             EXIT_USAGE if e.status == 400 else EXIT_ERROR)


def own_daemon_hint(ctx: Ctx) -> str:
    """Where the service's socket (taken by default) refuses this user while the user's own daemon serves its default
    socket (the README's simulator run on a host with the service, before a new login puts the user in its group):
    how to reach that one (newcomer-54: `specctl status` and `specctl stop` said only "permission denied")."""
    own = default_socket()
    if ctx.socket_given or ctx.socket != UNIT_SOCKET or own == UNIT_SOCKET or not present(own):
        return ""
    return f"; your own daemon's socket is {own}: specctl --socket {own} ... reaches it"


def _check_db(ctx: Ctx, method: str) -> Any:
    """--db / SPECCTL_DB names whose state a command is about. Without --socket the daemon holding that database is
    asked on its own socket (its start event records it); the daemon asked must hold it (the default socket's, keeping
    another, must not take a pin meant for this one). Where no daemon holds it, a read takes the database's word
    (DaemonUnreachable, as when no daemon runs) and a change is refused while another daemon answers. Returns the
    /status answer it was given where the daemon asked is the database's, else None."""
    if not ctx.db_given or ctx.db_checked:
        return None
    ctx.db_checked = True
    holder = lock_holder(ctx.db)
    found = None
    if holder not in (None, UNREADABLE):
        from .holder import find_holder
        found = find_holder(ctx.db, ctx.socket, holder)
        if found.serving and not ctx.socket_given:          # (serving: on another socket, as that pid)
            ctx.socket = found.socket
            return None
    try:
        answer = request(ctx.socket, "GET", "/status")
    except DaemonUnreachable as e:      # (no --socket: the default one, asked in case its daemon keeps ctx.db)
        given_db_exists(ctx, change=method != "GET")
        if ctx.socket_given or holder not in (None, UNREADABLE):
            raise
        # (not the default socket's words: it was asked only in case its daemon keeps ctx.db)
        raise DaemonUnreachable(f"no daemon holds {ctx.db}" if holder is None else lock_unread(ctx.db)) from None
    daemon = answer.get("daemon") if isinstance(answer, dict) else None
    daemon = daemon if isinstance(daemon, dict) else {}
    served = daemon.get("db")
    if holder == str(daemon.get("pid")) or (isinstance(served, str) and os.path.isabs(served)
                                             and os.path.realpath(served) == os.path.realpath(ctx.db)):
        return answer
    if found is not None and found.elsewhere:
        fail(f"{found.mismatch()}; nothing changed", EXIT_USAGE)
    given_db_exists(ctx, f"; the daemon on {ctx.socket} keeps {served}", change=method != "GET")
    if method == "GET":                 # (status then says whether one holds it, starting)
        raise DaemonUnreachable(f"{'no daemon' if found is None else 'none that answers'} holds {ctx.db}: the one on "
                                f"{ctx.socket} keeps {served}")
    who = {None: "no daemon holds it", UNREADABLE: "who holds it cannot be read"}.get(
        holder, f"daemon pid {holder} holding it does not answer there")
    fail(f"the daemon on {ctx.socket} keeps {served}, not {ctx.db} (--db / SPECCTL_DB), and {who}: leave --db out "
         f"to steer the one on {ctx.socket}; nothing changed", EXIT_USAGE)


def given_db_exists(ctx: Ctx, elsewhere: str = "", change: bool = False) -> None:
    """A --db / SPECCTL_DB naming no database is a usage error, the same line for every command: a mistyped path, not
    a daemon that is not running (no daemon keeps a database it has not created). elsewhere: what the daemon that
    answered keeps, said after; change: the command asked for one ("nothing changed" said; a read's line ended so too)."""
    if ctx.db_given and not present(ctx.db) and lock_holder(ctx.db) is None:   # (held: a daemon about to create it)
        fail(f"no database at {ctx.db} (--db / SPECCTL_DB){elsewhere or ': no daemon keeps one there'}; check the path, "
             f"or start the daemon with it first (spec-controller run --db {ctx.db})"
             f"{'; nothing changed' if change else ''}", EXIT_USAGE)


def refuse_unpaired(ctx: Ctx) -> None:
    """--socket / SPECCTL_SOCKET without --db, and no daemon answers there: the default database stands in for that
    daemon's only where it is the socket's default pair or its newest start served that socket. Else it is another
    daemon's (or no daemon's), and a pin saved there, or its status, is not the one meant (helper-128: a pin for a
    stopped daemon with its own --socket and --db went into the default daemon's database, exit 0)."""
    if (why := unpaired(ctx)) is not None:
        fail(f"no daemon answers on {ctx.socket}, and {why}; nothing changed", EXIT_NOT_RUNNING)


def unpaired(ctx: Ctx) -> str | None:
    """refuse_unpaired's judgement, for a command that goes on without the database (policy list, unmarked): why the
    default database is not the state of the daemon meant at ctx.socket (its words, after what the socket said), or
    None where it is (or no --socket alone was given). A daemon holding it on another socket is refuse_elsewhere's
    usage error, exit 2."""
    if not ctx.socket_given or ctx.db_given:
        return None
    from .holder import recorded_socket, same
    if any(same(ctx.socket, sock) and same(ctx.db, db) for sock, db in ((UNIT_SOCKET, UNIT_DB),
                                                                      (default_socket(), default_db()))):
        return None
    served = recorded_socket(ctx.db, None) if present(ctx.db) else None
    if served is not None and same(served, ctx.socket):
        return None
    # (a daemon holding it on its own socket: the --socket is the typo, as status and a pin say; history, plot and
    # policy set told the operator to give another --db, exit 3, of a daemon that runs)
    refuse_elsewhere(ctx, lock_holder(ctx.db))
    whose = f"is the state of the daemon that serves {served}" if served else "records no daemon on it"
    return f"{ctx.db} (the default database, with no --db) {whose}: give the --db of the daemon meant"


def refuse_elsewhere(ctx: Ctx, holder: str | None) -> None:
    """Where the daemon pid holder, holding ctx.db, serves (or will serve) another socket than ctx.socket: its
    mismatch, exit 2 (a mistyped --socket / SPECCTL_SOCKET), nothing read or changed. None / UNREADABLE: nothing."""
    if holder in (None, UNREADABLE):
        return
    from .holder import find_holder
    found = find_holder(ctx.db, ctx.socket, holder)
    if found.elsewhere:
        fail(f"{found.mismatch()}; nothing changed", EXIT_USAGE)


UNREADABLE = "unreadable"


def lock_holder(db: Path) -> str | None:
    """The pid of the daemon holding db's lock, None when none does, UNREADABLE when this user
    may not read the lock file (then who holds it cannot be told: lock_unread says why)."""
    return _holder_or_why(db)[0]


def lock_unread(db: Path) -> str:
    """Why who holds db cannot be told, naming its lock file (lock_holder's UNREADABLE)."""
    why = _holder_or_why(db)[1]         # ('': readable after all, a moment later)
    return f"whether a daemon holds {db} (one still starting, its socket not open yet) cannot be told" + \
        (f": {why}" if why else "")


def _holder_or_why(db: Path) -> tuple[str | None, str]:
    from state.db import StoreError
    from state.lock import DaemonLock
    lock = DaemonLock(db)
    try:
        return lock.holder(), ""
    except StoreError as e:             # not readable, or not a plain file (a planted link): its words name the file
        return UNREADABLE, str(e)
    except OSError as e:
        return UNREADABLE, f"lock file {lock.path}: {e.strerror or e}"


def not_running(ctx: Ctx, why: object) -> str:
    """Where no daemon answered (why: DaemonUnreachable's words): 'daemon is not running (...)'; where the lock file
    cannot be read (the service's, 0600, to an operator in its group), that whether one holds the database cannot be
    told, and why (it said 'not running', naming the socket asked: with --db alone, the default one)."""
    if lock_holder(ctx.db) != UNREADABLE:
        return f"daemon is not running ({why})"
    asked = f" ({why})" if ctx.socket_given or not ctx.db_given else ""    # (with --db alone: _check_db's words)
    return f"no daemon answers{asked}, and {lock_unread(ctx.db)}"


def full_params(saved: dict) -> dict:
    """The saved policy's parameters with its defaults filled in, as the running daemon shows them (the saved
    setting holds only those given); one that no longer builds (saved by an older version) at its default, as the
    daemon's start runs it (policies.runnable_params); a policy this version does not know: as saved."""
    from policies import PolicyError, make_policy, runnable_params
    params = dict(saved.get("params", {}))
    if saved.get("name"):
        try:
            return dict(make_policy(saved["name"], runnable_params(saved["name"], params)[0]).params)
        except PolicyError:
            pass
    return params


def trial_note(threshold: int | None, best: int | None, trial: bool | None) -> str | None:
    """What a threshold that is not the policy's best says beside it, or None: bandits try a neighbour of their best
    threshold now and then (trial), so a status read during a trial must not look like a new verdict; otherwise the
    guard holds the way to the best (its rate cap, or no live batch size between them: not a trial). trial None: not
    known (the daemon down)."""
    if best is None or best == threshold:
        return None
    if trial is None:
        return f"the policy's best so far is {best}"
    return f"a trial; the policy's best so far is {best}" if trial else f"held by the guard; the policy's best is {best}"


def alias_note(policy: dict) -> str:
    """" (= thompson)" where the policy's name (`name`) is an alias of the one it runs (`policy`)."""
    resolved = policy.get("policy")
    return f" (= {resolved})" if resolved and resolved != policy.get("name") else ""
