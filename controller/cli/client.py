"""specctl's side of the control API: HTTP over the daemon's unix socket."""
from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path

BUSY_RETRY_S = 3.0      # how long a full connection queue (EAGAIN) is retried before giving up


class DaemonUnreachable(Exception):
    """No daemon answers on the socket (missing, refused); specctl falls back to the database."""


class DaemonError(Exception):
    """The daemon answered with an error (the message is its one line)."""


class _Busy(Exception):
    """The daemon is alive but busy with other clients: a full listen queue (EAGAIN) or its cap on
    connections served at once (503 with Retry-After). Retried before anything is said."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def request(socket_path: str | Path, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
    """The daemon's answer. DaemonUnreachable when no daemon is there, DaemonError for its one-line
    errors; a busy daemon is retried (with backoff) for BUSY_RETRY_S first."""
    end, pause = time.monotonic() + BUSY_RETRY_S, 0.005
    while True:
        try:
            return _request_once(socket_path, method, path, body, timeout)
        except _Busy as e:
            if time.monotonic() + pause > end:
                raise DaemonError(f"the daemon on {socket_path} is busy ({e}) for {BUSY_RETRY_S:g} s; "
                                  "try again") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def _request_once(socket_path: str | Path, method: str, path: str, body: dict | None, timeout: float):
    conn = _UnixConnection(str(socket_path), timeout)
    try:
        try:
            conn.connect()
        except FileNotFoundError:
            raise DaemonUnreachable(f"no daemon socket at {socket_path}") from None
        except PermissionError:
            raise DaemonError(f"permission denied on {socket_path} (run as root or a member of its group)") from None
        except ConnectionRefusedError:
            raise DaemonUnreachable(f"nothing listens on {socket_path}") from None
        except BlockingIOError:
            raise _Busy("its connection queue is full") from None
        except OSError as e:
            raise DaemonUnreachable(f"cannot reach {socket_path}: {e.strerror or e}") from None
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        try:
            try:
                conn.request(method, path, body=data, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                pass            # a daemon at its client cap answers and closes before reading: read that
            resp = conn.getresponse()
            payload = json.loads(resp.read() or b"null")
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
            raise DaemonError(f"daemon at {socket_path} gave no usable answer ({e})") from None
        error = payload.get("error") if isinstance(payload, dict) else f"HTTP {resp.status}"
        if resp.status == 503 and resp.getheader("Retry-After"):
            raise _Busy(error)
        if resp.status != 200:
            raise DaemonError(error)
        return payload
    finally:
        conn.close()
