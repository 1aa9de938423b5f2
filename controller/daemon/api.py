"""The control API: HTTP + JSON on a unix socket (mode 0660), no TCP listener.

Sized for many operators and scripts at once (a listen backlog of 128, at most MAX_CLIENTS
connections served together) and safe against a client that stalls or sends too much (a deadline
on each whole request, at the cap a slot given up by a request still arriving after a second, a cap on the body;
clients.py, shared with the metrics server)."""
from __future__ import annotations

import io
import json
import logging
import os
import socketserver
import stat
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable

from policies import PolicyError, list_policies
from state import queries

from ..paths import pid_namespace, socket_path_too_long, umask
from .apicheck import ApiError, Route, body_length, check, json_int, query_int, shown
from . import clients
from .clients import BoundedClients, DeadlineIO
from .commands import CommandRefused
from .sockprobe import SocketRefused, check_socket_free, stop_command

log = logging.getLogger("spec_controller.api")

BACKLOG = 128
READ_TIMEOUT_S = 10.0         # a request (line, headers, body) not all received in this long: its connection closed
MAX_CLIENTS = 64              # connections served at once; beyond it a client gets 503 at once


def make_routes(service, on_stop: Callable[[], dict] | None = None) -> dict[tuple[str, str], Route]:
    """on_stop: asks the daemon to drain and exit (POST /stop); the answer is sent before it does."""
    def history(query, body):
        limit = query_int(query.get("limit", "20"), "limit")
        if not 1 <= limit <= 10000:
            raise ApiError(400, f"limit {limit} out of range (allowed 1 .. 10000)")
        service.writer.flush(5)
        db = service.reader()
        try:
            return queries.recent_decisions(db, limit)
        finally:
            db.conn.close()

    def set_policy(query, body):
        if not isinstance(body.get("name"), str):
            raise ApiError(400, "body needs a policy name")
        params = body.get("params", {})
        if not isinstance(params, dict):       # ([], 0, "", false and null were taken for "no parameters")
            raise ApiError(400, f"params must be an object, got {shown(params)}")
        return service.set_policy(body["name"], params)

    def pin(query, body):
        return service.pin(json_int(body.get("threshold"), "threshold"))

    return {
        ("GET", "/status"): Route(lambda q, b: service.status()),
        ("GET", "/health"): Route(lambda q, b: {"ok": bool(service.engine.health().get("ok"))}),
        ("GET", "/policy"): Route(lambda q, b: service.policy_info()),
        ("GET", "/policies"): Route(lambda q, b: list_policies()),
        ("POST", "/policy"): Route(set_policy, body=frozenset({"name", "params"})),
        ("POST", "/threshold/pin"): Route(pin, body=frozenset({"threshold"})),
        ("POST", "/threshold/unpin"): Route(lambda q, b: service.pin(None)),
        ("GET", "/history"): Route(history, query=frozenset({"limit"})),
        **({("POST", "/stop"): Route(lambda q, b: on_stop())} if on_stop else {}),
    }


class _Handler(BaseHTTPRequestHandler):
    routes: dict = {}
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S           # the time a whole request may take to arrive, and each write
    _reads: DeadlineIO | None = None   # (setup's: the connection's reads)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()                             # (its makefile's: it holds the socket open until closed)
        self._reads = DeadlineIO(self.connection, "rb", self.server.slot(self.request))
        self.rfile = io.BufferedReader(self._reads)

    def handle_one_request(self) -> None:
        # (the wait for a kept-alive connection's next request counts: an idle one is closed as before, and at the cap
        # gives its slot up as one that has sent nothing yet)
        self._reads.begin(self.timeout)
        super().handle_one_request()

    def address_string(self) -> str:
        return "unix"

    def log_message(self, fmt, *args) -> None:
        log.debug("api: " + fmt, *args)

    def _reply(self, status: int, payload, headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(payload).encode()
        slot = self._reads.slot if self._reads is not None else clients.Slot()
        slot.writing = time.monotonic()         # (at the cap, an answer its client does not read gives its slot up)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError as e:           # the client hung up before its answer: nothing to tell it, nothing to log
            self.close_connection = True
            log.debug("api: answer to a client that has gone: %s", e)
        finally:
            slot.writing = None

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":      # ("GET /status" alone: answered without a status line)
            self.send_error(400, "bad request line: expected METHOD PATH HTTP/1.1")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (request line, headers, method, HTTP version) as the API's: a status line always
        (it wrote none for a request line it did not read as HTTP/1.x), one line of JSON (not an HTML page), a 4xx
        (an unknown method was 501, a version other than 1.x 505: the client's error, not the daemon's)."""
        self.request_version = self.protocol_version
        self.close_connection = True
        status = {HTTPStatus.NOT_IMPLEMENTED: HTTPStatus.METHOD_NOT_ALLOWED,
                  HTTPStatus.HTTP_VERSION_NOT_SUPPORTED: HTTPStatus.BAD_REQUEST}.get(code, code)
        self.log_error("code %d, message %s", code, message)
        said = message or HTTPStatus(code).phrase         # (431's explain says which limit: a line, the count, the size)
        if code == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE and self._reads is not None and self._reads.head_left < 0:
            said = HTTPStatus(code).phrase      # (the size cap's: http.server calls any parse error 'Too many headers')
        self._reply(status, {"error": f"{said}: {explain}" if explain else said},
                    (("Allow", "GET, POST"),) if status == HTTPStatus.METHOD_NOT_ALLOWED else ())

    def _request(self, method: str) -> tuple[Route, dict[str, str], dict]:
        """The body read whole first (so that a refusal leaves the connection in step), then apicheck's one check."""
        length = body_length(self.headers)
        if self._reads is not None:
            self._reads.body()
        try:
            data = self.rfile.read(length) if length else b""
        except TimeoutError:
            within = (f"within {clients.CUT_AFTER_S:g} s while the daemon served its most clients at once (its "
                      "slot went to another)") if self._reads and self._reads.slot.cut else f"within {self.timeout:g} s"
            raise ApiError(408, f"request body not received {within}") from None
        except OSError as e:
            raise ApiError(400, f"request body not received: {e.strerror or e}") from None
        if len(data) < length:             # (a client that ended its side early: a prefix that parsed was applied)
            raise ApiError(400, f"request body of {len(data)} bytes, shorter than its Content-Length {length}")
        if self._reads is not None:
            self._reads.arrived()
        return check(method, self.path, data, self.routes)

    def _answer(self, method: str) -> tuple[int, Any]:
        try:
            route, query, body = self._request(method)
            return 200, route.handler(query, body)
        except ApiError as e:
            if e.status in (400, 408, 411, 413):     # where the body may be unread: it must not be taken for a request
                self.close_connection = True
            return e.status, {"error": str(e)}
        except CommandRefused as e:
            return 503, {"error": str(e)}
        except (PolicyError, ValueError) as e:
            return 400, {"error": str(e)}
        except Exception as e:                   # the daemon keeps running; the caller gets one line
            log.exception("api: %s %s failed", method, self.path[:200])
            return 500, {"error": f"internal error: {type(e).__name__}: {e}"}

    def _handle(self, method: str) -> None:
        status, payload = self._answer(method)
        self._reply(status, payload)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


class _UnixHTTPServer(BoundedClients, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = BACKLOG
    thread_name = "control-api"

    def __init__(self, *args, **kwargs):
        self.max_clients = MAX_CLIENTS          # (read at each start: the tests set it lower)
        super().__init__(*args, **kwargs)


def own_name(path: Path) -> Path:
    """The name a daemon binds before it links path: its pid's, and its pid namespace's where /proc says it, as a pid
    names one process only within one (two containers' daemons, pid 1 both, on sockets in one shared folder whose
    names begin alike: the second removed the first's bound socket as dead and bound its own there; helper-145)."""
    ns = pid_namespace()
    return path.with_name(f".{path.name[:8]}.{'' if ns is None else f'{ns:x}.'}{os.getpid()}")


def _remove_dead_name(own: Path) -> None:
    """A daemon with this pid (in this pid namespace) killed between its bind and its link left this name (a
    container's pids repeat, and the bind would fail 'Address already in use'): no live daemon has it, as it is ours."""
    try:
        if stat.S_ISSOCK(os.lstat(own).st_mode):
            own.unlink()
    except FileNotFoundError:
        pass


class ControlServer:
    def __init__(self, path: str | os.PathLike, service, on_stop: Callable[[], dict] | None = None,
                 read_timeout_s: float = READ_TIMEOUT_S):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        check_socket_free(self.path)
        handler = type("Handler", (_Handler,), {"routes": make_routes(service, on_stop), "timeout": read_timeout_s})
        # Bound under a name of its own and listening before it takes the operator's (a hard link, which never replaces):
        # bound there at once, a daemon starting beside it on the same --socket found it between bind and listen, took it
        # for a crashed run's left-over (nothing listens) and removed it: the first exited 'No such file or directory',
        # or ran on, recording the second's socket as its own, where no specctl could reach it.
        own = own_name(self.path)
        if socket_path_too_long(own) or socket_path_too_long(self.path):     # (bound at once, as before: one too
            own = self.path                            # long for AF_UNIX is refused by the bind, not linked to)
        if own != self.path:
            _remove_dead_name(own)
        with umask(0o117):                             # socket created 0660, never world-accessible
            self.server = _UnixHTTPServer(str(own), handler)
        st = os.lstat(own)
        self._inode = (st.st_dev, st.st_ino)           # stop() removes this socket and nothing else
        if own != self.path:
            self._publish(own)
        self.thread = self.server.thread

    def _publish(self, own: Path) -> None:
        try:
            os.link(own, self.path)
        except FileExistsError:
            self.server.server_close()
            raise SocketRefused(f"control socket {self.path} appeared while this daemon was starting (another daemon on "
                               f"it?); stop that one ({stop_command(self.path)}) or give another --socket") from None
        except OSError:                     # (a file system without hard links: replaced whole, still only once listening)
            os.rename(own, self.path)
        finally:
            own.unlink(missing_ok=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.stop()
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass
