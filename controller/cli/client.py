"""specctl's side of the control API: HTTP/1.1 over the daemon's unix socket.

One request per connection, written and read by hand: http.client alone (email parsing, ssl)
cost ~20 ms of every `specctl status`, more than the rest of the call (bench/status_latency.py)."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

MAX_ANSWER = 64 * 1024 * 1024


class DaemonUnreachable(Exception):
    """No daemon answers on the socket (missing, refused); specctl falls back to the database."""


class DaemonError(Exception):
    """The daemon answered with an error (the message is its one line)."""


def _connect(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except FileNotFoundError:
        sock.close()
        raise DaemonUnreachable(f"no daemon socket at {path}") from None
    except PermissionError:
        sock.close()
        raise DaemonError(f"permission denied on {path} (run as root or a member of its group)") from None
    except ConnectionRefusedError:
        sock.close()
        raise DaemonUnreachable(f"nothing listens on {path}") from None
    except OSError as e:
        sock.close()
        raise DaemonUnreachable(f"cannot reach {path}: {e.strerror or e}") from None
    return sock


def _read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 answer with a Content-Length (the daemon always sends one)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("connection closed before the answer's headers")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length > MAX_ANSWER:
        raise ValueError(f"answer of {length} bytes")
    while len(body) < length:
        chunk = sock.recv(min(65536, length - len(body)))
        if not chunk:
            raise ValueError("connection closed inside the answer")
        body += chunk
    return status, body[:length]


def request(socket_path: str | Path, method: str, path: str, body: dict | None = None,
            timeout: float = 10.0) -> Any:
    """The daemon's JSON answer; DaemonUnreachable when none listens, DaemonError on its error."""
    sock = _connect(str(socket_path), timeout)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                f"Content-Length: {len(data)}\r\n" + ("Content-Type: application/json\r\n" if data else "") + "\r\n")
        try:
            sock.sendall(head.encode() + data)
            status, raw = _read_answer(sock)
            payload = json.loads(raw or b"null")
        except (OSError, ValueError, IndexError) as e:      # JSONDecodeError is a ValueError
            raise DaemonError(f"daemon at {socket_path} gave no usable answer ({e})") from None
        if status != 200:
            raise DaemonError(payload.get("error") if isinstance(payload, dict) else f"HTTP {status}")
        return payload
    finally:
        sock.close()
