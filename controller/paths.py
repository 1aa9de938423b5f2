"""Where the database and the control socket live, for the daemon and for specctl alike."""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

SYSTEM_STATE = Path("/var/lib/spec-controller")
SYSTEM_RUNTIME = Path("/run/spec-controller")
DB_NAME, SOCKET_NAME = "spec-controller.db", "control.sock"
UNIT_DB, UNIT_SOCKET = SYSTEM_STATE / DB_NAME, SYSTEM_RUNTIME / SOCKET_NAME     # the service's (systemd's directories)
DEFAULT_CONFIG = Path("/etc/spec-controller/config.toml")


def pid_namespace() -> int | None:
    """This process's pid namespace (its inode), where /proc says it: a pid names one process only within one (a
    container's daemon, pid 1, is not the host's pid 1)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


class NoHome(RuntimeError):
    """No per-user state directory can be named: no absolute $XDG_STATE_HOME, no absolute $HOME and no home in the
    password database (a container run as a uid it does not list); the message is one line for the operator."""


def user_state_dir() -> Path:
    """$XDG_STATE_HOME/spec-controller, or ~/.local/state/spec-controller where it is unset, empty or relative (the XDG
    spec: a relative path there is invalid, ignored; it put the database under whatever directory the daemon began in)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    return (Path(base) if os.path.isabs(base) else _home() / ".local" / "state") / "spec-controller"


def _home() -> Path:
    """$HOME where it is an absolute path, else the account's home from the password database (Path.home() took an
    empty HOME for '/', the state under /.local, and a relative one from whatever directory the process began in)."""
    home = os.environ.get("HOME", "")
    if os.path.isabs(home):
        return Path(home)
    import pwd
    try:
        entry = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:        # (newcomer-146: Path.home()'s RuntimeError was a 40-line traceback from every command)
        entry = ""
    if os.path.isabs(entry):    # (an empty or relative one is the working directory's, as an empty $HOME was)
        return Path(entry)
    raise NoHome(f"no state directory: $HOME is {'not an absolute path' if home else 'unset'} and uid "
                 f"{os.getuid()} has no home in the password database; set XDG_STATE_HOME (or HOME) to an "
                 "absolute path")


def systemd_dir(env: str) -> Path | None:
    """The first directory of systemd's $STATE_DIRECTORY / $RUNTIME_DIRECTORY (absolute paths, ':' between them), or
    None where unset or not absolute: a relative one (systemd sets none) put the database and the socket under
    whatever directory specctl or the daemon began in, as a relative $XDG_STATE_HOME did."""
    first = os.environ.get(env, "").split(":")[0]
    return Path(first) if os.path.isabs(first) else None


def state_dir() -> Path:
    """systemd's StateDirectory when run as the service, else the per-user state directory."""
    return systemd_dir("STATE_DIRECTORY") or user_state_dir()


def default_db() -> Path:
    return state_dir() / DB_NAME


def default_socket() -> Path:
    return (systemd_dir("RUNTIME_DIRECTORY") or state_dir()) / SOCKET_NAME


def present(path: Path) -> bool:
    """Exists, as far as this user can tell: a path in a directory it may not enter (the service's,
    for someone outside its group) counts as present, so the error names the permission."""
    try:
        return path.exists()
    except PermissionError:
        return True
    except OSError as e:        # a name too long ($XDG_STATE_HOME's 5,000 characters: exists() raised, a traceback)
        if e.errno != errno.ENAMETOOLONG:
            raise
        return False


def denied_step(path: str | Path) -> str | None:
    """What this user can do about a refusal (EACCES) on path, where what refuses is its own: the first part of the path
    it cannot pass (a folder without x), else path itself (a folder without w and x, a file or socket without w; the
    folder a path not there would be made in), named with the chmod (a state folder at mode 000 said only 'Permission
    denied'). None where nothing refuses, what refuses is another user's (the caller's own advice then: the service's
    group, another --socket), or its mode grants what is refused (a read-only mount, an ACL: no chmod helps)."""
    target = Path(path).absolute()

    def passes(p: Path, mode: int) -> bool:     # (as open and connect judge it: the effective ids)
        return os.access(p, mode, effective_ids=os.access in os.supports_effective_ids)

    blocker = next((p for p in reversed(target.parents) if not passes(p, os.X_OK)), None)
    if blocker is None and not os.path.lexists(target):
        target = target.parent          # (a file to be made there: its folder refuses it)
    try:
        st = os.stat(blocker or target)
    except OSError:
        return None
    folder = stat.S_ISDIR(st.st_mode)
    if blocker is None:
        if passes(target, os.W_OK | (os.X_OK if folder else 0)):
            return None
        blocker, need = target, (stat.S_IWUSR | stat.S_IXUSR if folder else stat.S_IWUSR)
    else:
        need = stat.S_IXUSR
    if st.st_uid != os.geteuid() or st.st_mode & need == need:
        return None
    kind = "folder" if folder else "socket" if stat.S_ISSOCK(st.st_mode) else "file"
    bits = "rwx" if folder else "rw"
    return f"the {kind} {blocker} is yours but its mode {st.st_mode & 0o777:o} refuses you: chmod u+{bits} {blocker}"


def denied_note(path: str | Path, error: BaseException | None = None) -> str:
    """' (denied_step's words)' to end a refusal's line with, or '' (none, or an error that is not a refusal)."""
    if error is not None and not isinstance(error, PermissionError):
        return ""
    return f" ({step})" if (step := denied_step(path)) else ""

def _first_existing(env: str, candidates: tuple[Path, ...], default: Path) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    return next((c for c in candidates if present(c)), default)


def find_socket() -> Path:
    """For specctl: $SPECCTL_SOCKET, the service's socket if present, else the user daemon's."""
    return _first_existing("SPECCTL_SOCKET", (UNIT_SOCKET, default_socket()), default_socket())


def find_db() -> Path:
    """For specctl: $SPECCTL_DB, the service's database if present, else the user daemon's; but the user daemon's
    while its socket is there and the service's is not (the pair find_socket chose): a service run once left its
    database, and a pin for the user's daemon, saved offline, went into the service's."""
    if not os.environ.get("SPECCTL_DB") and not present(UNIT_SOCKET) and present(default_socket()):
        return default_db()
    return _first_existing("SPECCTL_DB", (UNIT_DB, default_db()), default_db())


TEXT_FILE_LIMIT = 16 << 20
NOT_PLAIN = (errno.EINVAL, errno.EFBIG)     # read_text_file's own refusals: not a regular file, over its limit


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file, else OSError ("not a regular file"): opening a FIFO waited
    for a writer for good, and a device (/dev/zero) has no end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)      # (non-blocking: a FIFO's open returns)
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return f


def read_text_file(path: str | Path, limit: int = TEXT_FILE_LIMIT, errors: str = "strict") -> str:
    """A config, profile, trace or SGLang --config YAML file's text. OSError for what is not a regular file of at most
    `limit` bytes (errno in NOT_PLAIN): a FIFO blocked `config check` for good and /dev/zero read until memory ran
    out. UnicodeDecodeError as read_text's (errors="strict")."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    return data.decode(errors=errors)


def db_path_problem(path: Path) -> str | None:
    """Why no database can be kept at `path`, or None: a name the file system refuses as too long, its own or its lock
    file's (`.lock` added; -wal and -shm are no longer), or something there that is no database file (a directory, a
    symbolic link state/db.py would refuse to follow). A path that does not exist yet passes; access: at its opening."""
    for name in (str(path), f"{path}.lock"):
        try:
            os.stat(name)
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                return f"file name too long{' (with .lock added)' if name != str(path) else ''}"
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link; refusing to follow it (give the real path)"
    return None if stat.S_ISREG(mode) else "a directory, not a database file" if stat.S_ISDIR(mode) else \
        "not a regular file"


UNIX_PATH_MAX = 107        # bytes in a unix socket's path (sun_path holds 108, the NUL included)


def socket_path_too_long(path: Path) -> str | None:
    """Why no unix socket can be bound or reached at `path` whatever is there, or None."""
    size = len(os.fsencode(str(path)))
    return f"too long for a unix socket ({size} bytes, at most {UNIX_PATH_MAX})" if size > UNIX_PATH_MAX else None


def is_db_own_path(path: Path, db: Path) -> bool:
    """`path` is the database's file or one SQLite or the daemon keeps beside it (lock, -wal, -shm, -journal)."""
    path, db = Path(path).absolute(), Path(db).absolute()
    return path in (db, *(Path(f"{db}{s}") for s in (".lock", "-wal", "-shm", "-journal")))


def shared_path(sock: Path, db: Path, engine_files: tuple[tuple[str, Path], ...]) -> str | None:
    """Why the control socket or the database cannot be where given, or None: on one another, or on a file the engine
    writes (found late: SGLang was started, and the database written, before the socket's bind refused it)."""
    real_sock, real_db = (Path(os.path.realpath(p)) for p in (sock, db))   # (through a link or '..': the same file)
    if is_db_own_path(real_sock, real_db):
        return f"control socket {sock} is the database's own path; give another --socket"
    for what, path in engine_files:
        real = Path(os.path.realpath(path))
        if real_sock == real:
            return f"control socket {sock} is {what}; give another --socket"
        if is_db_own_path(real, real_db):
            return f"{what} {path} is the database's own path; give another --db"
    return None


def socket_path_problem(path: Path) -> str | None:
    """Why `path` cannot be a control socket to connect to, or None: too long for a unix socket, or something
    else already there (a directory, a file). A path that does not exist yet, or that this user may not look
    at, passes: connecting then says what is wrong."""
    if (too_long := socket_path_too_long(path)) is not None:
        return too_long
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return None
    return "a directory, not a socket" if stat.S_ISDIR(mode) else "not a socket"


def names_a_file(name_or_path: str) -> bool:
    """A simulator profile or trace given as a file (a .toml / .json name, or any path with a slash), not a built-in."""
    return Path(name_or_path).suffix in (".toml", ".json") or "/" in name_or_path


def beside(path: str, base: Path) -> str:
    """A path a file names, read from that file's directory (base) when relative: a config's db, a trace's profile."""
    return path if Path(path).is_absolute() else os.path.normpath(Path(base).absolute() / path)


def home_unexpanded(path: str) -> str | None:
    """Why a path written with ~ is refused (neither the daemon nor SGLang expands it: it would be a directory named ~),
    or None."""
    return "nothing expands ~ here: write the path out" if path.startswith("~") else None


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """The process's umask set to `mask` for a socket made by a bind (its mode from the first moment), then back."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
