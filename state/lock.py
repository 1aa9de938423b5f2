"""The daemon's lock file beside its database: one daemon per database, and specctl's offline writes kept apart
from a daemon's start (held_off)."""
from __future__ import annotations

import fcntl
import os
import shlex
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .db import Lasting, StoreError, folder_refused, open_nofollow


def _shareable(fd: int) -> bool:
    """A shared lock can be had: nobody holds it, or only shared (held_off: specctl writing offline), no daemon."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _words_in(fd: int) -> list[str]:
    """What the lock holder wrote into the lock file: its pid, then its pid namespace where it knew it."""
    return os.pread(fd, 64, 0).decode(errors="replace").split()


def _pid_in(fd: int) -> str:
    """The pid the lock holder wrote into the lock file ("?" if unreadable)."""
    return (_words_in(fd) or ["?"])[0]


LOOK_GRACE_S = 0.5        # how long a start retries a lock specctl's holder() may be looking at
HELD_OFF_S = 30.0         # ... and one only held shared (held_off: specctl writing offline, each statement 2 s at most)


class DaemonLock:
    """An exclusive flock beside the database: one daemon per database."""

    def __init__(self, db_path: str | os.PathLike):
        self.path = Path(f"{db_path}.lock")
        self._fd: int | None = None
        self.created = False

    def acquire(self, namespace: int | None = None) -> None:
        """namespace: the holder's pid namespace, written after its pid (a pid names a process only within it)."""
        try:
            fd, self.created = self._made(os.O_RDWR)
        except OSError as e:        # (its folder: the file's own refusals are StoreError's)
            raise folder_refused(self.path.parent, e) from None
        deadline = time.monotonic() + LOOK_GRACE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                shared = _shareable(fd)          # (the exclusive lock refused: held, only shared)
                if time.monotonic() < deadline + (HELD_OFF_S if shared else 0):   # (holder() looks for microseconds)
                    time.sleep(0.01)
                    continue
                holder = _pid_in(fd)
                os.close(fd)
                if shared:
                    raise StoreError(f"{self.path} stayed locked by another process (specctl writing offline?) for "
                                     f"{HELD_OFF_S:g} s") from None
                db = self.path.with_suffix("")          # (what to do, as the socket's refusal says it: helper-142)
                raise StoreError(f"another spec-controller (pid {holder}) is running on {db}; stop it (specctl --db "
                                 f"{shlex.quote(str(db))} stop) or give another --db") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}{'' if namespace is None else f' {namespace}'}".encode(), 0)
        self._fd = fd

    @contextmanager
    def held_off(self) -> Iterator[None]:
        """A daemon kept from starting while inside (a shared flock, which acquire() waits out): an offline write's
        check that no daemon holds the database, and its write, are then one step. A daemon that started between them
        had read its settings before the write: it ran without the pin specctl called saved, and an unpin it was then
        given changed nothing, while the pin came back at the next start. Where no lock file is (no daemon ever ran
        here) it is made first, as the daemon's start makes it: with none, nothing was held, and a first start beside
        an offline write (a pin on a fresh state folder) read its settings between specctl's check and its write (the
        pin acknowledged 'applied at next start' not applied, an unpin then 'not pinned', the pin back at the next
        start). Where it cannot be made or read, nothing is held: the check (holder()) says what it finds."""
        try:
            fd, made = self._made(os.O_RDONLY)
        except (StoreError, OSError):
            fd = None
        else:
            if made:
                self._owned_as_its_database(fd)
        try:
            if fd is not None:
                with suppress(BlockingIOError):     # (a daemon holds it: the check refuses the write)
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            yield
        finally:
            if fd is not None:
                os.close(fd)                               # (lets the shared flock go)

    def _owned_as_its_database(self, fd: int) -> None:
        """A lock file root made (held_off: an offline write as root) is given the owner of the database beside it, or
        of its folder, as SQLite gives its journals: left root's, 0600, the service's user could not open it and the
        service's next start was refused ('lock file ...: Permission denied'; a restored database, no lock file yet)."""
        if os.geteuid() != 0:
            return
        with suppress(OSError):
            try:
                st = os.lstat(self.path.with_suffix(""))
            except FileNotFoundError:
                st = os.lstat(self.path.parent)
            if (st.st_uid, st.st_gid) != (0, 0):
                os.fchown(fd, st.st_uid, st.st_gid)

    def _made(self, flags: int) -> tuple[int, bool]:
        """The lock file opened with flags, made (and its folder, 0750) where none is, as the daemon's start and an
        offline write both need it; and whether this call made it. OSError for the folder, StoreError for the file.
        Made is this open's own O_EXCL answer: asked before the open (lexists), a file put there in between (a hard
        link to another file, by whoever may write the folder) was taken for one made here, and root gave it away."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        for _ in range(3):          # (one removed between the two opens is made again, and said made: helper-145)
            try:
                return self._open(flags | os.O_CREAT | os.O_EXCL), True
            except StoreError:      # (there already: opened, not made; or gone again, or not to be made)
                try:
                    return self._open(flags), False
                except StoreError:
                    if os.path.lexists(self.path):
                        raise                   # (there and refused: a FIFO, no permission; said as it is)
        return self._open(flags | os.O_CREAT | os.O_EXCL), True    # (its refusal in its own words)

    def _open(self, flags: int) -> int:
        """The lock file, never a FIFO planted at its path (a read-only open waited for a writer: specctl's look, an
        offline write and the daemon's start hung) nor anything else but a regular file; StoreError in one line."""
        fd = open_nofollow(self.path, flags | os.O_NONBLOCK, "lock file")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Lasting(f"lock file {self.path} is not a regular file; remove it (nothing else belongs there)")
        return fd

    def check_file(self) -> None:
        """StoreError, in acquire's words, where a lock file is there that a start could not open (anything but a
        regular file, a symbolic link, one this user may not open for writing); nothing is made, locked or written
        (config check's look)."""
        if os.path.lexists(self.path):
            os.close(self._open(os.O_RDWR))

    def held_by_other(self) -> bool:
        """True if a live daemon holds the lock (used by specctl for offline writes)."""
        return self.holder() is not None

    def holder(self) -> str | None:
        """The pid written by the live daemon holding the lock ("?" if unreadable), or None if free.
        StoreError if the lock file cannot be read."""
        try:
            os.lstat(self.path)         # (Path.exists raises PermissionError in a directory this user may not enter)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"lock file {self.path}: {e.strerror}") from None
        fd = self._open(os.O_RDONLY)
        try:
            return None if _shareable(fd) else _pid_in(fd)
        finally:
            os.close(fd)

    def holder_namespace(self, pid: str | None = None) -> int | None:
        """The pid namespace the live holder wrote beside its pid; None where none holds the lock, it wrote none
        (an older version) or no number (isdigit alone took a superscript two, which int() refused: a traceback out
        of `specctl stop`), or the file cannot be read. pid: the namespace pid's daemon wrote there, whether it holds
        the lock still or not (release leaves the file as written): a drain that let go of its lock between specctl's
        look at the holder and this one was taken for one of this namespace (mutation-today-2026-12-07u)."""
        try:
            fd = self._open(os.O_RDONLY)
        except StoreError:
            return None
        try:
            words = _words_in(fd) if pid is not None or not _shareable(fd) else []
        finally:
            os.close(fd)
        if pid is not None and words[:1] != [str(pid)]:
            return None
        return int(words[1]) if len(words) > 1 and words[1].isascii() and words[1].isdigit() else None

    def release(self, remove_if_created: bool = False) -> None:
        """remove_if_created: also delete the lock file if acquire() made it (a database refused at start)."""
        if self._fd is not None:
            if remove_if_created and self.created:
                self.path.unlink(missing_ok=True)     # while still held: no other daemon's lock is removed
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
