"""Who listens on a unix socket, for the daemon's start: its control socket (a crashed run's left-over is removed, a
live daemon's or another user's never) and its engine's telemetry socket (zmq's bind would unlink a live one)."""
from __future__ import annotations

import os
import shlex
import socket
import stat
import struct
from pathlib import Path

from ..paths import denied_note

LIVE, FOREIGN, NOBODY = "live", "foreign", "nobody"


class SocketRefused(RuntimeError):
    """A control socket the start may not take: its message is the whole line (not "start-up failed: RuntimeError")."""


def who_listens(path: str | os.PathLike, timeout_s: float = 2.0) -> tuple[str, int | None]:
    """(LIVE, pid or None): a process listens (its backlog full or slow to accept: a live, busy one); (FOREIGN, None):
    this user may not connect (another user's socket, live or not: never to be taken for a left-over and unlinked);
    (NOBODY, None): nothing listens there (a crashed run's left-over, nothing at all, a path AF_UNIX cannot take)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout_s)              # (blocking, a full backlog waited for good)
        try:
            probe.connect(str(path))
        except (BlockingIOError, TimeoutError):  # EAGAIN: its backlog full
            return LIVE, None
        except PermissionError:
            return FOREIGN, None
        except OSError:
            return NOBODY, None
        return LIVE, listener_pid(probe)


def check_socket_free(path: Path) -> None:
    """Remove a crashed daemon's leftover socket; RuntimeError if a live daemon answers on it, or if
    anything but a socket is at the path (a file given as --socket is never deleted)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:        # (its own state folder at mode 000: what refuses and the chmod, as specctl says it)
        raise SocketRefused(f"control socket path {path}: {e.strerror}{denied_note(path, e)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise SocketRefused(link_refused(path))
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketRefused(f"control socket path {path} exists and is not a socket; refusing to remove it")
    who, pid = who_listens(path)
    if who == FOREIGN:
        raise SocketRefused(f"control socket {path} is a socket this user may not connect to (another user's "
                           "daemon?); refusing to remove it: give another --socket")
    if who == NOBODY:
        try:
            now = os.lstat(path)       # (another daemon's start replaced the left-over meanwhile: asked again, not
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):     # removed as the left-over it replaced)
                return check_socket_free(path)
            path.unlink()                             # nobody listening: a leftover of a crash
        except FileNotFoundError:                     # (removed meanwhile: by a daemon starting beside this one)
            return None
        except OSError as e:          # (another user's in a sticky /tmp: was a PermissionError traceback)
            raise SocketRefused(f"control socket {path} is a left-over nobody listens on, which this user cannot "
                               f"remove ({e.strerror}); remove it or give another --socket") from None
        return
    whom = f"another daemon (pid {pid})" if pid else "another daemon"
    raise SocketRefused(f"control socket {path} is in use by {whom}; stop it ({stop_command(path)}) or give another "
                        "--socket")


def link_refused(path: Path) -> str:
    """A symbolic link at the control socket's path, in words: never followed nor removed (not the daemon's: it binds
    its socket there itself), whatever it points to; the preflight's (run's, config check's: exit 2) and the probe's."""
    return f"control socket path {path} is a symbolic link, which a start neither follows nor removes; remove it, or " \
        "give another --socket"


def stop_command(socket: Path) -> str:
    """The command that stops the daemon on socket, as a shell takes it whole (a path with a blank: helper-145)."""
    return f"specctl --socket {shlex.quote(str(socket))} stop"


def listener_pid(conn: socket.socket) -> int | None:
    """The pid that listens at a connected unix socket's other end (SO_PEERCRED: recorded by the kernel when it called
    listen()), None where the platform does not say."""
    try:
        pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (AttributeError, OSError, struct.error):
        return None
    if pid <= 0:                    # (0: a listener in another pid namespace)
        return None
    try:
        os.kill(pid, 0)             # (the pid that called listen() may have exited, its socket kept by a child)
    except ProcessLookupError:
        return None
    except OSError:
        pass                        # (alive, another user's)
    return pid
