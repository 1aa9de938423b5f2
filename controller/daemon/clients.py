"""What the daemon's two servers (the control API on its unix socket, the metrics on their TCP port) give a client,
in one place: a deadline on each whole request and a cap on the connections served at once. Without them the metrics
server (prometheus_client's, a thread per connection and no timeout) kept a thread and a descriptor for every client
that connected and sent nothing, for ever: any local user could pile up thousands (helper-114). At the cap, a request
still arriving after CUT_AFTER_S gives its slot to the next client: 64 clients that connected and sent nothing (or
half a request) held every slot until their deadline, 10 s, and `specctl status` or `stop` was refused (helper-157);
so does an answer still being written after as long, to a client that does not read it (helper-166)."""
from __future__ import annotations

import http.client
import logging
import math
import select
import socket
import sys
import threading
import time

log = logging.getLogger("spec_controller.api")
# A peer gone: a unix socket's close shows as POLLHUP; over TCP a peer's FIN only as POLLRDHUP (Linux), which on a
# unix socket is a client that shut its writing side and still waits for its answer (helper-121): not gone there
HUNG_UP = select.POLLHUP | select.POLLERR
HUNG_UP_TCP = HUNG_UP | getattr(select, "POLLRDHUP", 0)
STOP_WAIT_S = 5.0           # how long a server's stop waits for the answers being written to finish
CUT_AFTER_S = 1.0           # at the cap, a request still arriving this long gives its slot up (a client's request comes
#                             in one write: specctl's retries of a 503, 3 s, get in behind clients that hold slots)
# A request's line and headers: http.server's own limits took 100 header lines of 64 KiB each, ~6.5 MB a connection held
# (64 such clients: 450 MB in the daemon). Above its request line's own limit (64 KiB, a 414) and a read's buffer.
MAX_HEAD = 128 * 1024


class HeadTooLarge(http.client.HTTPException):
    """Raised by a read past MAX_HEAD: http.server's parse_request answers it 431, as for too many headers."""


class Slot:
    """A served connection's standing: since when its current request has been arriving (None while it is answered),
    since when its answer has been being written (writing; None while it is not), whether its answer is its last
    (finishing: the slot is the next client's), whether the slot was given to another client (cut: its reads end, as
    at the deadline, and so does its answer's write where that answer was what took too long)."""
    __slots__ = ("since", "writing", "finishing", "cut")

    def __init__(self) -> None:
        self.since: float | None = time.monotonic()
        self.writing: float | None = None
        self.finishing = self.cut = False


class DeadlineIO(socket.SocketIO):
    """The connection's reads, each waiting only until `deadline`: a timeout on each read alone let a client that sent
    a byte every few seconds hold its slot for ever (64 such locked `specctl status` out). Once its slot is cut a read
    ends as one past the deadline (the server shut the reading side: a read waiting then returns at once)."""
    deadline = math.inf
    head_left = float(MAX_HEAD)         # (bytes the current request's line and headers may still take)

    def __init__(self, sock: socket.socket, mode: str, slot: Slot | None = None):
        super().__init__(sock, mode)
        self.slot = slot or Slot()

    def begin(self, timeout: float) -> None:
        """A request begins to arrive: it has `timeout` to, and holds its slot meanwhile only while none is wanted."""
        self.slot.since = now = time.monotonic()
        self.deadline, self.head_left = now + timeout, float(MAX_HEAD)

    def body(self) -> None:
        """The request's line and headers are read: its body (capped by its Content-Length's check) may follow."""
        self.head_left = math.inf

    def arrived(self) -> None:
        """The request is read whole: answered now, however long that takes, its slot never cut."""
        self.slot.since = None

    def readinto(self, b) -> int | None:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.slot.cut:
            raise TimeoutError("request not received in time" + " (its slot given to another client)" * self.slot.cut)
        if self.head_left < 0:
            raise HeadTooLarge(f"request line and headers over {MAX_HEAD // 1024} KiB")
        timeout = self._sock.gettimeout()
        self._sock.settimeout(min(left, timeout or math.inf))
        try:
            got = super().readinto(b)
        finally:
            self._sock.settimeout(timeout)          # (writes keep the whole timeout)
        if self.slot.cut:               # (what a cut read returned, the end or a part, is not taken for a request)
            raise TimeoutError("request not received in time (its slot given to another client)")
        self.head_left -= got or 0
        return got


def busy_answer(content_type: str, body: bytes) -> bytes:
    """The 503 a client beyond the cap gets at once (Retry-After: 1), its connection then closed."""
    return (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {content_type}\r\nRetry-After: 1\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


class BoundedClients:
    """Mixed in before socketserver.ThreadingMixIn: at most `max_clients` connections served at once, each on its own
    thread; one more is answered `busy` and closed on the accepting thread, which never waits for a client. It serves
    on `thread` (thread.start()); stop() ends that thread and every client's, and lets go of the listening socket.

    A connection whose client has hung up, or whose one answer is on its way (`finishing`: the metrics'), no longer
    counts: its thread is only on its way out, and a client that closed and connected again at once found its old
    connection still holding the slot (at 63 others, half such reconnects got a 503; helper-119). Those still count
    toward a hard ceiling of twice the cap: clients that send a slow command and hang up cannot pile up threads."""
    max_clients = 64
    busy = busy_answer("application/json", b'{"error": "too many clients at once"}')
    thread_name = "server"

    def __init__(self, *args, **kwargs):
        self._served: dict[socket.socket, Slot] = {}
        self._connection_threads: dict[socket.socket, threading.Thread] = {}    # (stop joins them)
        self._served_lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)
        super().__init__(*args, **kwargs)

    def stop(self) -> None:
        """serve_forever ended, the listening socket closed and each client's thread ended (socketserver joins no
        daemon thread): a request still being read ends at once (a client that connected and sent nothing held its
        thread until its read deadline), an answer being written is finished, within STOP_WAIT_S in all."""
        if self.thread.is_alive():         # shutdown() waits for serve_forever, forever if it never ran
            self.shutdown()
        self.server_close()
        with self._served_lock:       # (held: no connection is closed, its descriptor reused, while cut)
            serving = dict(self._connection_threads)
            for request in serving:
                try:
                    request.shutdown(socket.SHUT_RD)
                except OSError:                # (closed meanwhile)
                    pass
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in serving.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        if left := sum(thread.is_alive() for thread in serving.values()):
            log.warning("%s: %d client%s still being answered at stop", self.thread_name, left, "s" * (left != 1))
        if self.thread.ident is not None:
            self.thread.join()

    def process_request(self, request, client_address) -> None:
        """socketserver.ThreadingMixIn's, each thread kept until it ends (stop() joins them)."""
        with self._served_lock:
            admitted = self._room()
            if admitted:
                self._served[request] = Slot()
        if not admitted:
            try:
                request.setblocking(False)          # (a full send buffer: the answer is lost, the server goes on)
                request.send(self.busy)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        with self._served_lock:
            self._connection_threads[request] = thread
        try:
            thread.start()
        except BaseException:              # (no thread started: "can't start new thread")
            self._forget(request)
            raise

    def _room(self) -> bool:
        """Under _served_lock: may one more connection be served? Only at the cap are the others looked at: those whose
        client hung up do not count, and else the request that has been arriving longest, or the answer that has been
        being written longest (Slot.writing), CUT_AFTER_S or more, gives its slot up."""
        served = self._served
        if len(served) < self.max_clients:
            return True
        if len(served) >= 2 * self.max_clients:
            return False
        counted = {conn: slot for conn, slot in served.items() if not (slot.finishing or slot.cut)}
        fds = [conn.fileno() for conn in counted]       # (-1: closed already)
        poller, mask = select.poll(), HUNG_UP if self.address_family == socket.AF_UNIX else HUNG_UP_TCP
        for fd in fds:
            if fd >= 0:
                poller.register(fd, mask)
        gone = fds.count(-1) + sum(1 for _, events in poller.poll(0) if events & mask)
        if len(fds) - gone < self.max_clients:
            return True
        # (an answer still being written after CUT_AFTER_S waits on a client that does not read it: 64 clients that
        # asked for a long history and read nothing held every slot for the write's 10 s, every round of them)
        waiting = [(since, conn, how) for conn, slot in counted.items()
                   for since, how in ((slot.since, socket.SHUT_RD), (slot.writing, socket.SHUT_RDWR)) if since is not None]
        since, conn, how = min(waiting, key=lambda seen: seen[0], default=(math.inf, None, None))
        if time.monotonic() - since < CUT_AFTER_S:
            return False
        counted[conn].cut = True
        # (its thread's read returns at once; the answer to a request cut while arriving may still be written, also
        # where its handler began writing since it was picked: only an answer picked as such has its write ended)
        try:
            conn.shutdown(how)
        except OSError:
            pass
        return True

    def slot(self, request) -> Slot:
        """`request`'s standing, for its handler's reads (DeadlineIO)."""
        with self._served_lock:
            return self._served.get(request) or Slot()

    def finishing(self, request) -> None:
        """What `request`'s thread writes next is its connection's last: its slot is the next client's (a TCP client's
        hang-up may reach the server after its next connection does)."""
        with self._served_lock:
            if request in self._served:
                self._served[request].finishing = True

    def _forget(self, request) -> None:
        with self._served_lock:
            self._served.pop(request, None)
            self._connection_threads.pop(request, None)

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
