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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        """A unix socket whose listen queue is full answers EAGAIN at once: that is a live daemon
        busy with other clients, so it is retried (with backoff) rather than reported as gone."""
        end, pause = time.monotonic() + BUSY_RETRY_S, 0.005
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.unix_path)
            except BlockingIOError:
                sock.close()
                if time.monotonic() + pause > end:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.2)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return


def request(socket_path: str | Path, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
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
            raise DaemonError(f"the daemon on {socket_path} is busy: its connection queue stayed full for "
                              f"{BUSY_RETRY_S:g} s; try again") from None
        except OSError as e:
            raise DaemonUnreachable(f"cannot reach {socket_path}: {e.strerror or e}") from None
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = json.loads(resp.read() or b"null")
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
            raise DaemonError(f"daemon at {socket_path} gave no usable answer ({e})") from None
        if resp.status != 200:
            raise DaemonError(payload.get("error") if isinstance(payload, dict) else f"HTTP {resp.status}")
        return payload
    finally:
        conn.close()
