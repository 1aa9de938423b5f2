"""This process's open descriptors as a leak check should read them: only those the code under test could leave open.

A comparison of the whole table failed now and then in a full run, never alone (helper-159): a store an earlier test
in the same worker dropped unclosed keeps its descriptors until the next cyclic collection (Python 3.11's sqlite3
connection sits in a reference cycle), which may fall inside the checked window; zmq closes a socket's descriptors on
its own thread after close() has returned; a server thread an earlier test left winds down on its own."""
from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Callable


def descriptors(matching: Callable[[str], bool]) -> dict[str, str]:
    """{descriptor: what it is open on} for those whose target (readlink of /proc/self/fd/N) matches. Earlier tests'
    garbage is collected first, so that what it holds is not closed inside the window being checked."""
    gc.collect()
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:          # (listdir's own descriptor, closed since)
            continue
        if matching(target):
            out[fd] = target
    return out


def on_devnull(target: str) -> bool:
    return target == os.devnull


def unix_sockets_under(directory: Path) -> Callable[[str], bool]:
    """Matches a socket descriptor bound to a path under directory (as /proc/net/unix names it when called)."""
    bound = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith(f"{directory}/"):
                bound.add(f"socket:[{fields[6]}]")
    return bound.__contains__
