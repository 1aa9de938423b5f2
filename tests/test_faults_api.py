"""Fault injection at the control socket: many clients at once, a huge body, a stalled client, a
busy socket seen by specctl. Real unix sockets throughout."""
import json
import math
import socket
import threading

import pytest

from controller.cli import client
from controller.cli.client import DaemonError, DaemonUnreachable, request
from controller.daemon import api, clients
from controller.daemon.api import ControlServer
from tests.conftest import scripted_socket


class _Service:
    """What the routes need for /health and /status."""

    class engine:
        @staticmethod
        def health():
            return {"ok": True}

    @staticmethod
    def status():
        return {"daemon": {"running": True}}


def _connect(path, blocking=False) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(blocking)
    s.connect(str(path))
    return s


def test_a_hundred_clients_connecting_at_once_all_get_in(short_tmp):
    server = ControlServer(short_tmp / "c.sock", _Service())      # not serving yet: every connect queues
    socks, refused = [], 0
    for _ in range(100):
        try:
            socks.append(_connect(short_tmp / "c.sock"))
        except BlockingIOError:                   # EAGAIN: the old backlog of 5 refused 94 of 100
            refused += 1
    assert refused == 0
    for s in socks:
        s.close()
    server.stop()


def _serve(short_tmp, **kw) -> ControlServer:
    server = ControlServer(short_tmp / "c.sock", _Service(), **kw)
    server.start()
    return server


def _exchange(path, data: bytes, timeout: float = 10.0) -> bytes:
    s = _connect(path, blocking=True)
    s.settimeout(timeout)
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
        if b"\r\n\r\n" in out and b'"}' in out:
            break
    s.close()
    return out


def test_a_huge_body_is_refused_before_it_is_read(short_tmp):
    server = _serve(short_tmp)
    answer = _exchange(short_tmp / "c.sock", b"POST /threshold/pin HTTP/1.1\r\nHost: x\r\n"
                                              b"Content-Length: 200000000\r\n\r\n{")   # the old code read 200 MB
    assert answer.startswith(b"HTTP/1.0 413") or answer.startswith(b"HTTP/1.1 413"), answer
    assert b"over the limit" in answer
    for bad in (b"-5", b"lots"):
        answer = _exchange(short_tmp / "c.sock", b"POST /threshold/pin HTTP/1.1\r\nContent-Length: " + bad
                           + b"\r\n\r\n")
        assert b" 400 " in answer.split(b"\r\n")[0], answer
    server.stop()


def test_a_stalled_client_is_dropped_after_the_read_timeout(short_tmp):
    server = _serve(short_tmp, read_timeout_s=0.3)
    s = _connect(short_tmp / "c.sock", blocking=True)
    s.settimeout(30)
    s.sendall(b"GET /status HTTP/1.1\r\n")         # and then nothing: the old code waited for ever
    assert s.recv(100) == b""                       # closed by the daemon
    s.close()
    assert request(short_tmp / "c.sock", "GET", "/status") == {"daemon": {"running": True}}
    server.stop()


def test_a_client_that_trickles_its_request_is_dropped_and_frees_its_slot(short_tmp, monkeypatch):
    """helper-101: a timeout on each read alone let a client sending a byte every few seconds (each read well inside
    the timeout) keep its slot for ever; 64 of them locked `specctl status` out (busy). Now the whole request has the
    read timeout to arrive."""
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(client, "BUSY_RETRY_S", 0)
    server = _serve(short_tmp, read_timeout_s=0.5)
    s = _connect(short_tmp / "c.sock", blocking=True)
    request_bytes = b"GET /status HTTP/1.1\r\nX-Pad: " + b"a" * 600
    dropped = None
    for byte in range(len(request_bytes)):         # 30 s of trickle at most: the old code took it all
        try:
            s.send(request_bytes[byte:byte + 1])
        except OSError as e:                        # EPIPE / ECONNRESET: the daemon closed it
            dropped = e
            break
        threading.Event().wait(0.05)                # (each byte well inside the 0.5 s a read may wait)
    s.close()
    assert isinstance(dropped, (BrokenPipeError, ConnectionResetError)), "the trickling client kept its slot"
    assert request(short_tmp / "c.sock", "GET", "/status") == {"daemon": {"running": True}}   # the slot is free
    server.stop()


def test_clients_beyond_the_limit_are_told_to_retry_and_specctl_does(short_tmp, monkeypatch):
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(clients, "CUT_AFTER_S", math.inf)     # (the holder's half request keeps its slot)
    monkeypatch.setattr(client, "BUSY_RETRY_S", 0.3)
    server = _serve(short_tmp, read_timeout_s=30)
    holder = _connect(short_tmp / "c.sock", blocking=True)         # holds the only slot
    holder.sendall(b"GET /status HTTP/1.1\r\n")
    with pytest.raises(DaemonError, match="busy .too many clients at once"):
        request(short_tmp / "c.sock", "GET", "/status")
    retried = threading.Event()
    monkeypatch.setattr(client, "BUSY_RETRY_S", 30)
    monkeypatch.setattr(client.time, "sleep", lambda s: retried.set() or threading.Event().wait(s))
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("answer", request(short_tmp / "c.sock", "GET", "/status")))
    t.start()
    assert retried.wait(10)
    holder.close()                                  # the slot frees: the retry gets in
    t.join(30)
    assert got["answer"] == {"daemon": {"running": True}}
    server.stop()


def _full_listener(path):
    """A socket whose listen queue is full: connects fail with EAGAIN at once."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    fillers = []
    while True:
        try:
            fillers.append(_connect(path))
        except BlockingIOError:
            return listener, fillers


def test_specctl_says_busy_not_gone_when_the_socket_stays_full(short_tmp, monkeypatch):
    monkeypatch.setattr(client, "BUSY_RETRY_S", 0.3)
    listener, fillers = _full_listener(short_tmp / "b.sock")
    with pytest.raises(DaemonError, match="busy"):                 # the old code: "daemon not running"
        request(short_tmp / "b.sock", "GET", "/status")
    for s in fillers + [listener]:
        s.close()


def test_specctl_retries_a_full_socket_until_it_is_served(short_tmp, monkeypatch):
    listener, fillers = _full_listener(short_tmp / "b.sock")
    retried = threading.Event()
    real_sleep = client.time.sleep

    def sleep(seconds):
        retried.set()
        real_sleep(seconds)
    monkeypatch.setattr(client.time, "sleep", sleep)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("answer", request(short_tmp / "b.sock", "GET", "/status")))
    t.start()
    assert retried.wait(10)                         # it met EAGAIN and is retrying
    for _ in fillers:                               # the daemon catches up with its queue
        listener.accept()[0].close()
    conn, _ = listener.accept()                     # specctl's connection
    conn.recv(65536)
    body = json.dumps({"daemon": {"running": True}}).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    t.join(10)
    assert got["answer"] == {"daemon": {"running": True}}
    conn.close()
    listener.close()


def test_no_socket_is_still_reported_as_no_daemon(short_tmp):
    with pytest.raises(DaemonUnreachable):
        request(short_tmp / "none.sock", "GET", "/status")


@pytest.mark.parametrize("reset", [False, True])
def test_a_daemon_that_drops_a_read_at_the_end_of_its_drain_is_gone_when_asked_again(short_tmp, reset):
    """helper-56: `specctl status` just after `stop --no-wait` said "gave no usable answer ([Errno 104] ...)", exit 1:
    the daemon closes its socket last, dropping clients it had not served; asked again it is gone, and the read takes
    the database's word (DaemonUnreachable)."""
    listener, dropped = scripted_socket(short_tmp / "d.sock", read=not reset, drops=1)
    with pytest.raises(DaemonUnreachable):
        request(short_tmp / "d.sock", "GET", "/status")
    assert dropped == [1]


@pytest.mark.parametrize("reset", [False, True])
def test_a_daemon_that_drops_every_client_is_a_fault_not_a_stopped_daemon(short_tmp, reset, monkeypatch):
    """...but one that stays and drops every request is not taken for a stopped one (helper-58), and a change it
    dropped is neither called applied nor lost."""
    monkeypatch.setattr(client, "DROPPED_RETRY_S", 0.3)
    listener, dropped = scripted_socket(short_tmp / "d.sock", read=not reset)
    try:
        with pytest.raises(DaemonError, match="closed the connection without answering, every time for 0.3 s"):
            request(short_tmp / "d.sock", "GET", "/status")
        assert len(dropped) >= 2
        with pytest.raises(DaemonError, match=r"without answering: whether POST /threshold/pin was applied, `specctl "
                                              "status` says"):
            request(short_tmp / "d.sock", "POST", "/threshold/pin", {"threshold": 3})
    finally:
        listener.close()
