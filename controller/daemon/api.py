"""The control API: HTTP + JSON on a unix socket (mode 0660), no TCP listener.

Sized for many operators and scripts at once (a listen backlog of 128, at most MAX_CLIENTS
connections served together) and safe against a client that stalls or sends too much (a read
timeout, a cap on the body)."""
from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlparse

from policies import PolicyError, list_policies
from state import queries

from .service import CommandRefused

log = logging.getLogger("spec_controller.api")

BACKLOG = 128
MAX_BODY = 64 * 1024          # a command is a few hundred bytes
READ_TIMEOUT_S = 10.0         # a connection that sends nothing for this long is closed
MAX_CLIENTS = 64              # connections served at once; beyond it a client gets 503 at once


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ApiError(400, f"{name} must be an integer")
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, got {value!r}") from None


def make_routes(service, on_stop: Callable[[], dict] | None = None
                ) -> dict[tuple[str, str], Callable[[dict, dict], dict | list]]:
    """on_stop: asks the daemon to drain and exit (POST /stop); the answer is sent before it does."""
    def history(query, body):
        limit = _int(query.get("limit", ["20"])[0], "limit")
        if not 1 <= limit <= 10000:
            raise ApiError(400, f"limit {limit} out of range (1 .. 10000)")
        service.writer.flush(5)
        db = service.reader()
        try:
            return queries.recent_decisions(db, limit)
        finally:
            db.conn.close()

    def set_policy(query, body):
        if not isinstance(body.get("name"), str):
            raise ApiError(400, "body needs a policy name")
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise ApiError(400, "params must be an object")
        return service.set_policy(body["name"], params)

    def pin(query, body):
        return service.pin(_int(body.get("threshold"), "threshold"))

    return {
        ("GET", "/status"): lambda q, b: service.status(),
        ("GET", "/health"): lambda q, b: {"ok": bool(service.engine.health().get("ok"))},
        ("GET", "/policy"): lambda q, b: service.policy_info(),
        ("GET", "/policies"): lambda q, b: list_policies(),
        ("POST", "/policy"): set_policy,
        ("POST", "/threshold/pin"): pin,
        ("POST", "/threshold/unpin"): lambda q, b: service.pin(None),
        ("GET", "/history"): history,
        **({("POST", "/stop"): lambda q, b: on_stop()} if on_stop else {}),
    }


def _body_length(headers) -> int:
    raw = headers.get("Content-Length") or "0"
    try:
        length = int(raw)
    except ValueError:
        raise ApiError(400, f"bad Content-Length {raw!r}") from None
    if length < 0:
        raise ApiError(400, f"bad Content-Length {raw!r}")
    if length > MAX_BODY:
        raise ApiError(413, f"request body of {length} bytes is over the limit of {MAX_BODY}")
    return length


class _Handler(BaseHTTPRequestHandler):
    routes: dict = {}
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S           # socketserver sets it on the connection: every read is bounded

    def address_string(self) -> str:
        return "unix"

    def log_message(self, fmt, *args) -> None:
        log.debug("api: " + fmt, *args)

    def _reply(self, status: int, payload) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        route = self.routes.get((method, url.path))
        try:
            if route is None:
                raise ApiError(404, f"no such endpoint: {method} {url.path}")
            body = {}
            length = _body_length(self.headers)
            if length:
                try:
                    body = json.loads(self.rfile.read(length))
                except json.JSONDecodeError:
                    raise ApiError(400, "body is not valid JSON") from None
                if not isinstance(body, dict):
                    raise ApiError(400, "body must be a JSON object")
            self._reply(200, route(parse_qs(url.query), body))
        except ApiError as e:
            if e.status == 413:
                self.close_connection = True       # the unread body must not be taken for a request
            self._reply(e.status, {"error": str(e)})
        except CommandRefused as e:
            self._reply(503, {"error": str(e)})
        except (PolicyError, ValueError) as e:
            self._reply(400, {"error": str(e)})
        except Exception as e:                   # the daemon keeps running; the caller gets one line
            log.exception("api: %s %s failed", method, url.path)
            self._reply(500, {"error": f"internal error: {type(e).__name__}: {e}"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, *args, **kwargs):
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b'HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n'
                                b'Retry-After: 1\r\nConnection: close\r\nContent-Length: 37\r\n\r\n'
                                b'{"error": "too many clients at once"}')
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def check_socket_free(path: Path) -> None:
    """Remove a crashed daemon's leftover socket; RuntimeError if a live daemon answers on it, or if
    anything but a socket is at the path (a file given as --socket is never deleted)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise RuntimeError(f"control socket path {path}: {e.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a socket"
        raise RuntimeError(f"control socket path {path} exists and is {kind}; refusing to remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = None
    try:
        probe.connect(str(path))
        pid = listener_pid(probe)
    except BlockingIOError:
        pass                                          # its backlog is full: a live, busy daemon
    except OSError:
        path.unlink()                                 # nobody listening: a leftover of a crash
        return
    finally:
        probe.close()
    who = f"another daemon (pid {pid})" if pid else "another daemon"
    raise RuntimeError(f"control socket {path} is in use by {who}; stop it (specctl --socket {path} stop) or give "
                       f"another --socket")


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


class ControlServer:
    def __init__(self, path: str | os.PathLike, service, on_stop: Callable[[], dict] | None = None,
                 read_timeout_s: float = READ_TIMEOUT_S):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        check_socket_free(self.path)
        handler = type("Handler", (_Handler,), {"routes": make_routes(service, on_stop), "timeout": read_timeout_s})
        old = os.umask(0o117)                          # socket created 0660, never world-accessible
        try:
            self.server = _UnixHTTPServer(str(self.path), handler)
        finally:
            os.umask(old)
        st = os.lstat(self.path)
        self._inode = (st.st_dev, st.st_ino)           # stop() removes this socket and nothing else
        self.thread = threading.Thread(target=self.server.serve_forever, name="control-api", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        if self.thread.is_alive():         # shutdown() waits for serve_forever, forever if it never ran
            self.server.shutdown()
        self.server.server_close()
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass
