"""What the file system under a path allows, asked without making anything: a read-only mount (what a write refused to
root too means), a kernel file system where nothing can be made (access(2) passes root there, whose create then
fails), whether a folder and a file in it can be made (refusing). Standard library and state.db's access check."""
from __future__ import annotations

import errno
import os
from pathlib import Path


def on_read_only_mount(path: Path) -> bool:
    """Whether path lies on a file system mounted read-only (what a write refused to root too means); False where it
    cannot be told."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# the kernel's own file systems, where no file or socket can be made, by root neither (/proc: ENOENT; sysfs: EPERM)
KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                                 "configfs", "pstore", "bpf"})


def kernel_file_system(path: Path) -> str | None:
    """The type of the file system path lies on where it is one of KERNEL_FILE_SYSTEMS (its device's mount in
    /proc/self/mountinfo), else None, also where that cannot be told."""
    try:
        dev = os.stat(path).st_dev
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    device = f"{os.major(dev)}:{os.minor(dev)}"
    for line in mounts:             # (ID PARENT MAJOR:MINOR ROOT POINT OPTIONS ... - TYPE SOURCE OPTIONS)
        fields, _, tail = line.partition(" - ")
        if fields.split()[2:3] == [device] and (kind := tail.split()[:1]) and kind[0] in KERNEL_FILE_SYSTEMS:
            return kind[0]
    return None


def refusing(directory: Path) -> tuple[Path | None, OSError] | None:
    """Why `mkdir -p directory` and then a file in it would fail: the folder that refuses (its nearest existing
    ancestor no directory, one on a kernel file system, or one this user may not write in: the directory itself where
    it exists, e.g. /run for a user not root; None where the error was met while asking: one above that cannot be
    searched, an I/O error) and the error a start would meet, or None; asked without making anything (the daemon's
    preflight: the database's folder and the control socket's, for run and config check alike)."""
    from .db import may         # (db imports this module)
    existing = directory
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as e:            # (a folder above without x: Path.exists raises)
        return None, e
    if not existing.is_dir():
        return existing, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    # (first: access(2) passes root there, whose bind then failed, exit 1, late; a user was told to get write access)
    if kind := kernel_file_system(existing):
        return existing, OSError(errno.EROFS, f"nothing can be made in it ({kind}: the kernel's own file system)")
    if not may(existing, os.W_OK | os.X_OK):      # (as root: a read-only mount only)
        code = errno.EROFS if on_read_only_mount(existing) else errno.EACCES
        return existing, (PermissionError if code == errno.EACCES else OSError)(code, os.strerror(code))
    return None
