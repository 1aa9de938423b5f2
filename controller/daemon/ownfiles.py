"""The daemon's database and control socket as it opened them, watched while it runs.

Removed or replaced under it (an operator's `rm -rf` of the state directory to start afresh, the daemon still up) the
daemon ran on unseen: no specctl reached its socket, and what it wrote went into a database no one can open again.
The daemon's main loop asks `changed()` and exits 1 naming the file (systemd restarts it on fresh files).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path


class OwnFiles:
    def __init__(self) -> None:
        self._files: dict[str, tuple[Path, tuple[int, int]]] = {}

    def add(self, what: str, path: str | os.PathLike) -> None:
        """Remember `path` as it is now (its device and inode), named `what` in the message."""
        st = os.lstat(path)
        self._files[what] = (Path(path), (st.st_dev, st.st_ino))

    def changed(self) -> str | None:
        """The first remembered file no longer at its path, or another file there; None while all are."""
        return next((why for what in self._files if (why := self.moved(what))), None)

    def moved(self, what: str) -> str | None:
        """Why `what` is no longer the file remembered at its path (removed, replaced); None while it is, or unknown."""
        if what not in self._files:
            return None
        path, ident = self._files[what]
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):    # (its directory now a file: gone as surely)
            return f"{what} {path} was removed under the daemon"
        except OSError as e:              # (not readable now, e.g. a directory's mode changed: not proof it is gone)
            if e.errno == errno.ELOOP:    # (a directory on the path now a symlink loop: nothing can be there)
                return f"{what} {path} was removed under the daemon"
            return None
        if (st.st_dev, st.st_ino) != ident:
            return f"{what} {path} was replaced under the daemon"
        return None
