"""What the daemon's two servers (the control API on its unix socket, the metrics on their TCP port) give a client,
in one place: a deadline on each whole request and a cap on the connections served at once. Without them the metrics
server (prometheus_client's, a thread per connection and no timeout) kept a thread and a descriptor for every client
that connected and sent nothing, for ever: any local user could pile up thousands (helper-114)."""
from __future__ import annotations

import logging
import math
import socket
import sys
import threading
import time

log = logging.getLogger("spec_controller.api")


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
    thread; one more is answered `busy` and closed on the accepting thread, which never waits for a client."""
    max_clients = 64
    busy = busy_answer("application/json", b'{"error": "too many clients at once"}')

    def __init__(self, *args, **kwargs):
        self._slots = threading.BoundedSemaphore(self.max_clients)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
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
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """A client that hung up or stalled mid-request is no fault of the daemon's: one debug line, not socketserver's
        traceback on stderr. Anything else keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("a client's connection failed: %s", error)
        else:
            log.exception("a connection failed")
