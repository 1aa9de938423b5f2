"""What the file system under a path allows, asked without making anything: a read-only mount (what a write refused to
root too means), a kernel file system where nothing can be made (access(2) passes root there, whose create then
fails). Standard library only."""
from __future__ import annotations

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
