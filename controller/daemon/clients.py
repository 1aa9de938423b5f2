"""What the daemon's two servers (the control API on its unix socket, the metrics on their TCP port) give a client,
in one place: a deadline on each whole request and a cap on the connections served at once. Without them the metrics
server (prometheus_client's, a thread per connection and no timeout) kept a thread and a descriptor for every client
that connected and sent nothing, for ever: any local user could pile up thousands (helper-114)."""
from __future__ import annotations

import logging
import math
import select
import socket
import sys
import threading
import time

log = logging.getLogger("spec_controller.api")
HUNG_UP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)     # (RDHUP: Linux; a TCP peer's FIN)


class DeadlineIO(socket.SocketIO):
    """The connection's reads, each waiting only until `deadline`: a timeout on each read alone let a client that sent
    a byte every few seconds hold its slot for ever (64 such locked `specctl status` out)."""
    deadline = math.inf

    def readinto(self, b) -> int | None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        timeout = self._sock.gettimeout()
        self._sock.settimeout(min(left, timeout or math.inf))
        try:
            return super().readinto(b)
        finally:
            self._sock.settimeout(timeout)          # (writes keep the whole timeout)


def busy_answer(content_type: str, body: bytes) -> bytes:
    """The 503 a client beyond the cap gets at once (Retry-After: 1), its connection then closed."""
    return (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {content_type}\r\nRetry-After: 1\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class BoundedClients:
    """Mixed in before socketserver.ThreadingMixIn: at most `max_clients` connections served at once, each on its own
    thread; one more is answered `busy` and closed on the accepting thread, which never waits for a client.

    A connection whose client has hung up, or whose one answer is on its way (`finishing`: the metrics'), no longer
    counts: its thread is only on its way out, and a client that closed and connected again at once found its old
    connection still holding the slot (at 63 others, half such reconnects got a 503; helper-119). Those still count
    toward a hard ceiling of twice the cap: clients that send a slow command and hang up cannot pile up threads."""
    max_clients = 64
    busy = busy_answer("application/json", b'{"error": "too many clients at once"}')

    def __init__(self, *args, **kwargs):
        self._served: dict[socket.socket, bool] = {}        # connection -> finishing
        self._served_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        with self._served_lock:
            admitted = self._room()
            if admitted:
                self._served[request] = False
        if not admitted:
            try:
                request.setblocking(False)          # (a full send buffer: the answer is lost, the server goes on)
                request.send(self.busy)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:              # (no thread started: "can't start new thread")
            self._forget(request)
            raise

    def _room(self) -> bool:
        """Under _served_lock: may one more connection be served? Only at the cap are the others looked at."""
        served = self._served
        if len(served) < self.max_clients:
            return True
        if len(served) >= 2 * self.max_clients:
            return False
        fds = [conn.fileno() for conn, finishing in served.items() if not finishing]    # (-1: closed already)
        poller = select.poll()
        for fd in fds:
            if fd >= 0:
                poller.register(fd, HUNG_UP)
        gone = fds.count(-1) + sum(1 for _, events in poller.poll(0) if events & HUNG_UP)
        return len(fds) - gone < self.max_clients

    def finishing(self, request) -> None:
        """What `request`'s thread writes next is its connection's last: its slot is the next client's (a TCP client's
        hang-up may reach the server after its next connection does)."""
        with self._served_lock:
            if request in self._served:
                self._served[request] = True

    def _forget(self, request) -> None:
        with self._served_lock:
            self._served.pop(request, None)

    def shutdown_request(self, request) -> None:
        self._forget(request)          # before its close: its descriptor's number may be another's at once
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A client that hung up or stalled mid-request is no fault of the daemon's: one debug line, not socketserver's
        traceback on stderr. Anything else keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("a client's connection failed: %s", error)
        else:
            log.exception("a connection failed")
