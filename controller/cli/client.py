"""specctl's side of the control API: HTTP/1.1 over the daemon's unix socket.

One request per connection, written and read by hand: http.client alone (email parsing, ssl)
cost ~20 ms of every `specctl status`, more than the rest of the call (bench/status_latency.py).
A busy daemon (full listen queue, or its cap on clients served at once) is retried briefly
before anything is said about it."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from ..paths import denied_step

MAX_ANSWER = 64 * 1024 * 1024
MAX_HEAD = 64 * 1024         # the daemon's status line and headers: ~150 bytes
BUSY_RETRY_S = 3.0      # how long a full connection queue (EAGAIN) is retried before giving up
DROPPED_RETRY_S = 1.0   # how long a read that the daemon drops unanswered is asked again (a stopping daemon: gone by then)
ANSWER_TIMEOUT_S = 10.0  # a pin waits on SGLang's set_internal_state (up to 30 s): the command may land after this
# What each endpoint answers (docs/api.md): its JSON kind and a key it always holds (a dotted one within an object; a
# list's keys are its items'). An answer without them is not a spec-controller daemon's: a --socket naming another
# program's HTTP socket printed "specctl: None" for its JSON 404, and a traceback (KeyError) for its JSON answer.
ANSWERS: dict[str, tuple[type, tuple[str, ...]]] = {
    "/status": (dict, ("daemon.running",)), "/health": (dict, ("ok",)), "/policy": (dict, ("name", "params")),
    "/policies": (list, ("name", "params")), "/threshold/pin": (dict, ("pinned",)),
    "/threshold/unpin": (dict, ("pinned",)), "/history": (list, ("wall", "old", "new", "policy", "reason")),
    "/stop": (dict, ("stopping",))}
GROUP_STEP = "run as root or a member of its group"     # (a socket or folder of another user: the service's)


class DaemonUnreachable(Exception):
    """No daemon answers on the socket (missing, refused); specctl falls back to the database."""


class DaemonError(Exception):
    """The daemon answered with an error (the message is its one line); status: its HTTP status, None where no
    answer came (400: the request was refused as given, nothing changed)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class DaemonDenied(DaemonError):
    """The socket's permissions refuse this user (the service's, to someone outside its group)."""


class DaemonDropped(DaemonError):
    """The daemon closed the connection of a change without answering (status None): a daemon closing its socket at
    the end of its drain drops the clients it has not served. `specctl stop` tells that drain from a fault."""


class _Dropped(Exception):
    """The connection was closed or reset before a byte of the answer (the daemon is stopping, or it crashed)."""


class _Busy(Exception):
    """The daemon is alive but busy with other clients: a full listen queue (EAGAIN) or its cap on
    connections served at once (503 with Retry-After). Retried before anything is said."""


def _connect(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except BaseException as e:
        sock.close()
        if isinstance(e, FileNotFoundError):
            raise DaemonUnreachable(f"no daemon socket at {path}") from None
        if isinstance(e, PermissionError):
            raise DaemonDenied(f"permission denied on {path} ({denied_step(path) or GROUP_STEP})") from None
        if isinstance(e, ConnectionRefusedError):
            raise DaemonUnreachable(f"nothing listens on {path}") from None
        if isinstance(e, BlockingIOError):
            raise _Busy("its connection queue is full") from None
        if isinstance(e, OSError):
            raise DaemonUnreachable(f"cannot reach {path}: {e.strerror or e}") from None
        raise
    return sock


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one HTTP/1.1 answer with a Content-Length (the daemon always sends one)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:     # (a program streaming on the socket was read into memory for as long as it sent)
            raise ValueError(f"no end of the answer's headers in {MAX_HEAD // 1024} KiB")
        chunk = sock.recv(65536)
        if not chunk:
            if not buf:
                raise _Dropped()
            raise ValueError("connection closed before the answer's headers")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    if length > MAX_ANSWER:
        raise ValueError(f"answer of {length} bytes")
    while len(body) < length:
        chunk = sock.recv(min(65536, length - len(body)))
        if not chunk:
            raise ValueError("connection closed inside the answer")
        body += chunk
    return status, headers, body[:length]


def request(socket_path: str | Path, method: str, path: str, body: dict | None = None,
            timeout: float | None = None) -> Any:
    """The daemon's JSON answer. DaemonUnreachable when no daemon is there, DaemonError for its
    one-line errors; a busy daemon is retried (with backoff) for BUSY_RETRY_S first."""
    timeout = ANSWER_TIMEOUT_S if timeout is None else timeout
    end, pause = time.monotonic() + BUSY_RETRY_S, 0.005
    dropped_until = time.monotonic() + DROPPED_RETRY_S
    while True:
        try:
            return _request_once(str(socket_path), method, path, body, timeout)
        except _Dropped:
            # A daemon closing its socket at the end of its drain drops the clients it has not served: asked again, it
            # is gone (DaemonUnreachable: a read takes the database's word). One that drops every client is a fault.
            closed = f"the daemon at {socket_path} closed the connection without answering"
            if method != "GET":
                raise DaemonDropped(f"{closed}: whether {method} {path} was applied, `specctl status` says") from None
            if time.monotonic() > dropped_until:
                raise DaemonError(f"{closed}, every time for {DROPPED_RETRY_S:g} s") from None
            time.sleep(0.1)
        except _Busy as e:
            if time.monotonic() + pause > end:
                raise DaemonError(f"the daemon on {socket_path} is busy ({e}) for {BUSY_RETRY_S:g} s; "
                                  "try again") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def _request_once(socket_path: str, method: str, path: str, body: dict | None, timeout: float) -> Any:
    sock = _connect(socket_path, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                f"Content-Length: {len(data)}\r\n" + ("Content-Type: application/json\r\n" if data else "") + "\r\n")
        try:
            try:
                sock.sendall(head.encode() + data)
            except (BrokenPipeError, ConnectionResetError):
                pass            # a daemon at its client cap answers and closes before reading: read that
            status, headers, raw = _read_answer(sock)
            payload = json.loads(raw or b"null")
        except ConnectionResetError:
            raise _Dropped() from None
        except TimeoutError:
            late = f"the daemon at {socket_path} did not answer in {timeout:g} s"
            raise DaemonError(late + (f": whether {method} {path} was applied (the daemon may still be waiting on "
                                      "SGLang), `specctl status` says" if method != "GET" else "")) from None
        except (OSError, ValueError, IndexError) as e:      # JSONDecodeError is a ValueError
            raise DaemonError(f"daemon at {socket_path} gave no usable answer ({e})") from None
        error = payload.get("error") if isinstance(payload, dict) else None
        if status != 200 and not isinstance(error, str):
            raise DaemonError(f"{_foreign(socket_path)}: it answered {method} {path} with HTTP {status} and no error "
                              "line of the daemon's")
        if status == 503 and headers.get("retry-after"):
            raise _Busy(error)
        if status != 200:
            raise DaemonError(error, status)
        if why := _not_the_answer(path, payload):
            raise DaemonError(f"{_foreign(socket_path)}: its answer to {method} {path} {why}")
        return payload
    finally:
        sock.close()


def _foreign(socket_path: str) -> str:
    return f"the program on {socket_path} is not a spec-controller daemon (or one of another release)"


def _not_the_answer(path: str, payload: Any) -> str | None:
    """Why a 200 answer is not what the endpoint gives (ANSWERS), or None."""
    kind, keys = ANSWERS.get(path.partition("?")[0], (object, ()))
    if not isinstance(payload, kind):
        return f"is not a JSON {'object' if kind is dict else 'list'}"
    for item in payload if kind is list else [payload]:
        for key in keys:
            value = item
            for part in key.split("."):
                if not isinstance(value, dict) or part not in value:
                    return f"lacks {key!r}"
                value = value[part]
    return None
