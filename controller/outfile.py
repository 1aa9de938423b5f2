"""Writing a file an operator names (a plot, a launch turned into a config, an engine's key file): whole or not at
all, never through a link another user planted, the file replaced keeping its mode and owner. Standard library only;
daemon and `specctl`."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable


def directory_name(path: str | Path) -> str | None:
    """Why a file cannot be written at `path` as given: a name ending in /, /. or /.. is a directory's ('out.toml/',
    'out.toml/.': realpath and pathlib drop them, which wrote out.toml where a shell's `>` refuses it); None otherwise."""
    if str(path).endswith("/"):
        return "a directory's name (the trailing /), not a file's"
    last = str(path).rsplit("/", 1)[-1]
    return f"a directory's name (it ends in /{last}), not a file's" if last in (".", "..") else None


def planted_link(path: str | Path) -> str | None:
    """Why a symbolic link on the way to `path` must not be followed, or None: the kernel's fs.protected_symlinks rule,
    which realpath (a resolution in user space) escapes: a link in a sticky, world-writable folder (/tmp) owned neither
    by this user nor by the folder's owner. (newcomer-146: another user's /tmp/demo.png -> /etc/passwd, and root's
    `specctl plot /tmp/demo.png` wrote the figure over /etc/passwd; a shell's `>` is refused there.)"""
    return _walk(path)[1]


def _walk(path: str | Path) -> tuple[Path | None, str | None]:
    """(path resolved as realpath does, links followed, or None past 40 links; why a link on the way must not be
    followed, or None): one walk for both, so that a link planted after the check is not followed by a resolution
    made after it (helper-149: planted_link, then realpath)."""
    euid, hops = os.geteuid(), 0
    # (not abspath: it folds 'link/..' by name, where the kernel and realpath go to the link's target's parent)
    pending, here = list(Path(os.path.join(os.getcwd(), path)).parts[1:]), Path("/")
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            here = here.parent
            continue
        step = here / name
        try:
            st = os.lstat(step)
        except OSError:                 # (nothing there: nothing further to follow; the write says what it meets)
            return Path(os.path.normpath(step.joinpath(*pending))), None
        if not stat.S_ISLNK(st.st_mode):
            here = step
            continue
        hops += 1
        try:
            folder = os.stat(here)
            target = os.readlink(step)
        except OSError:
            return step.joinpath(*pending), None
        shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        if hops > 40:
            return None, None           # (the write meets ELOOP and says so)
        if shared and st.st_uid not in (euid, folder.st_uid):
            return None, (f"{step} is a symbolic link another user (uid {st.st_uid}) made in the shared folder {here}; "
                          "refusing to follow it")
        parts = Path(target).parts
        if parts and parts[0] == "/":
            here, parts = Path("/"), parts[1:]
        pending = list(parts) + pending
    return here, None


def replace_whole(path: str | Path, write: Callable[[str], None], private: bool = False,
                  refused: str = "not a regular file, which would be replaced") -> None:
    """The file at `path` made by write(PARTIAL), a partial file beside it, and renamed over the path only once complete:
    a failed write (a full disk) leaves what was there. A file replaced keeps its mode (when `private`, an API key in
    it, less what others may do) and, where this user may set them, its owner and group (`chmod 640` for the service
    stays); a new one is made as the umask says (0600 when `private`). A symbolic link is followed (the file it names
    is replaced, as a shell's `>` writes it), but not one planted_link refuses (OSError(EACCES)); anything but a regular file there is OSError(EINVAL, refused): as root,
    `-o /dev/null` made /dev/null a regular file. What write() raises passes through."""
    if why := directory_name(path):
        raise OSError(errno.EISDIR, why)
    target, why = _walk(path)
    if why:
        raise OSError(errno.EACCES, why)
    if target is None:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    partial = target.with_name(f".{target.name[:200]}.{os.getpid()}.partial")     # (a 250-character name fits)
    try:
        before = target.stat()
    except FileNotFoundError:
        before = None
    if before is not None and not stat.S_ISREG(before.st_mode):
        raise OSError(errno.EINVAL, refused)
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private or before else 0o666))
        write(str(partial))
        if before is not None:
            try:
                os.chown(partial, before.st_uid, before.st_gid)
            except PermissionError:
                pass                    # another user's file: its owner stays only where this one may keep it
            os.chmod(partial, before.st_mode & (0o7770 if private else 0o7777))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write a file the daemon owns without following a symbolic link planted at its path (the
    daemon runs as root); created with `mode`. OSError on failure (ELOOP for a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
