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


def find_socket() -> Path:
    """For specctl: $SPECCTL_SOCKET, the service's socket if present, else the user daemon's."""
    if os.environ.get("SPECCTL_SOCKET"):
        return Path(os.environ["SPECCTL_SOCKET"])
    for cand in (SYSTEM_RUNTIME / "control.sock", default_socket()):
        if cand.exists():
            return cand
    return default_socket()


def find_db() -> Path:
    if os.environ.get("SPECCTL_DB"):
        return Path(os.environ["SPECCTL_DB"])
    for cand in (SYSTEM_STATE / "spec-controller.db", default_db()):
        if cand.exists():
            return cand
    return default_db()
