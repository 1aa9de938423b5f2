"""Where the database and the control socket live, for the daemon and for specctl alike."""
from __future__ import annotations

import os
from pathlib import Path

SYSTEM_STATE = Path("/var/lib/spec-controller")
SYSTEM_RUNTIME = Path("/run/spec-controller")
DEFAULT_CONFIG = Path("/etc/spec-controller/config.toml")


def user_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spec-controller"


def state_dir() -> Path:
    """systemd's StateDirectory when run as the service, else the per-user state directory."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    return user_state_dir()


def default_db() -> Path:
    return state_dir() / "spec-controller.db"


def default_socket() -> Path:
    if os.environ.get("RUNTIME_DIRECTORY"):
        return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0]) / "control.sock"
    return state_dir() / "control.sock"


def present(path: Path) -> bool:
    """Exists, as far as this user can tell: a path in a directory it may not enter (the service's,
    for someone outside its group) counts as present, so the error names the permission."""
    try:
        return path.exists()
    except PermissionError:
        return True


def _first_existing(env: str, candidates: tuple[Path, ...], default: Path) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    return next((c for c in candidates if present(c)), default)


def find_socket() -> Path:
    """For specctl: $SPECCTL_SOCKET, the service's socket if present, else the user daemon's."""
    return _first_existing("SPECCTL_SOCKET", (SYSTEM_RUNTIME / "control.sock", default_socket()), default_socket())


def find_db() -> Path:
    """For specctl: $SPECCTL_DB, the service's database if present, else the user daemon's."""
    return _first_existing("SPECCTL_DB", (SYSTEM_STATE / "spec-controller.db", default_db()), default_db())


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write a file the daemon owns without following a symbolic link planted at its path (the
    daemon runs as root); created with `mode`. OSError on failure (ELOOP for a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
