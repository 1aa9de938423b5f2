"""helper-157: the control socket against clients that hold their slots (silent, trickling, half a body), telemetry's
cap on a message (what a real message can be, counted when exceeded), and a drain within systemd's TimeoutStopSec."""
import logging
import socket
import struct
import threading
import time

import pytest
import zmq

from controller import contract
from controller.daemon.engines.child import telemetry_pull
from controller.daemon.engines.sglang import SGLangEngine

BASE = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "max_running_requests": 64}


# --- telemetry: the cap on a message ----------------------------------------------------------------------------------
def _largest_messages() -> list[bytes]:
    """Every field at its maximum: the plugin's fullest send of samples, its stats, and stats of as many counters as
    decode() reads (a later plugin's)."""
    top = 2 ** 64 - 1
    sample = contract.pack_sample(1e308, 2 ** 32 - 1, 2 ** 16 - 1, 2 ** 32 - 1, 1e308, True)
    stats = contract.encode_stats(dict.fromkeys(contract.STATS_FIELDS, top), 255, 255, (65535, 65535, 65535))
    wider = struct.pack("<B" + "Q" * contract.MAX_STATS_FIELDS + "BB3H", contract.KIND_STATS,
                        *[top] * contract.MAX_STATS_FIELDS, 255, 255, 65535, 65535, 65535)
    return [sample * contract.SAMPLES_PER_MESSAGE, stats, wider]


def test_every_message_the_plugin_can_send_fits_under_the_cap_and_the_cap_is_small(short_tmp):
    """The receiver took messages of up to 64 KiB, RCVHWM (100,000) of them in memory: ~6 GiB, for messages of at most
    448 bytes. The cap is the contract's, what the plugin sends with margin, and the receiver's socket uses it."""
    from controller.plugin import telemetry
    assert telemetry.BATCH == contract.SAMPLES_PER_MESSAGE
    for message in _largest_messages():
        assert len(message) <= contract.MAX_TELEMETRY_MESSAGE
        contract.decode(message)                                       # (each is one decode() reads)
    assert contract.MAX_TELEMETRY_MESSAGE <= 2 * max(map(len, _largest_messages()))
    pull = telemetry_pull(f"ipc://{short_tmp}/cap.ipc")
    try:
        assert pull.getsockopt(zmq.MAXMSGSIZE) == contract.MAX_TELEMETRY_MESSAGE
        assert pull.getsockopt(zmq.RCVHWM) * contract.MAX_TELEMETRY_MESSAGE <= 128 * 2 ** 20
    finally:
        pull.close(linger=0)


def _run_receiver(short_tmp, eng, send, until):
    """The engine's receiver on the daemon's own PULL (telemetry_pull); send(push) on a real PUSH, then until() awaited
    (30 s at most), then the receiver stopped. -> the samples received."""
    address = f"ipc://{short_tmp}/t.ipc"
    pull, push = telemetry_pull(address), zmq.Context.instance().socket(zmq.PUSH)
    got = []
    rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    rx.start()
    push.connect(address)
    try:
        send(push)
        deadline = time.monotonic() + 30
        while not until(got) and time.monotonic() < deadline:
            rx.join(0.02)
    finally:
        push.close(linger=0)
        eng._stop.set()
        rx.join(10)
    assert not rx.is_alive()
    return got


def test_a_message_over_the_cap_is_counted_and_logged_as_undecodable_and_the_sender_goes_on(short_tmp, caplog):
    """zmq drops, unread, the connection of a message over MAXMSGSIZE: nothing counted it, nothing said it (a plugin
    whose messages outgrew the cap would have sent nothing that arrived, under '0 undecodable')."""
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        push.send(b"\x01" * (contract.MAX_TELEMETRY_MESSAGE + 1))
        deadline = time.monotonic() + 30              # (counted once zmq has connected the dropped sender again)
        while not eng.bad_messages and time.monotonic() < deadline:
            time.sleep(0.02)
        push.send(contract.pack_sample(now, 4, 0, 4, 0.01, True))
    with caplog.at_level(logging.WARNING, "spec_controller"):
        got = _run_receiver(short_tmp, eng, send, lambda got: got and eng.bad_messages)
    assert [s.batch_size for s in got] == [4]
    assert eng.bad_messages == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry:")]
    assert lines == [f"telemetry: a message over {contract.MAX_TELEMETRY_MESSAGE} bytes (or not zmq's) dropped its "
                     "sender's connection: not read (a plugin of another release?)"], lines


def test_a_sender_that_exits_is_no_dropped_message(short_tmp):
    """The engine's stop or exit disconnects its sender too: not a message dropped."""
    eng = SGLangEngine(BASE)
    got = _run_receiver(short_tmp, eng, lambda push: push.send(contract.pack_sample(time.time(), 4, 0, 4, 0.01, True)),
                        lambda got: got)
    assert len(got) == 1 and eng.bad_messages == 0


# --- the control socket: clients that hold their slots ----------------------------------------------------------------
class _Service:
    """What the routes need, each command recorded; /status waits while `hold` is set (clear() to let it go)."""

    def __init__(self):
        self.calls, self.hold = [], threading.Event()
        self.hold.set()

    class engine:
        @staticmethod
        def health():
            return {"ok": True}

    def status(self):
        self.hold.wait(30)
        return {"daemon": {"running": True}}

    def pin(self, threshold):
        self.calls.append(("pin", threshold))
        return {"pinned": threshold}


def _unix(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(path))
    return s


def _status_after(sock: socket.socket, data: bytes) -> int | None:
    """The status of the answer to data sent on sock; None where the connection was closed or reset unanswered."""
    try:
        sock.sendall(data)
        first = sock.recv(65536)
    except OSError:
        return None
    return int(first.split()[1]) if first else None


def _stop_recorder(stops: list):
    return lambda: stops.append("stop") or {"stopping": True}


def test_64_silent_clients_do_not_lock_specctl_out_of_the_control_socket(short_tmp, monkeypatch):
    """helper-157: 64 clients that connected and sent nothing held every slot until their read deadline (10 s, here
    60): `specctl status` and `stop` were answered 'busy' after 3 s of retries, every round of them. Now, at the cap,
    a request still arriving after a second gives its slot to the next client. (The defaults; specctl's retries given
    30 s so that a slow machine cannot make it fail.)"""
    from controller.cli import client
    from controller.daemon.api import ControlServer
    monkeypatch.setattr(client, "BUSY_RETRY_S", 30.0)
    stops = []
    server = ControlServer(short_tmp / "c.sock", _Service(), on_stop=_stop_recorder(stops), read_timeout_s=60)
    server.start()
    silent = [_unix(short_tmp / "c.sock") for _ in range(64)]
    try:
        assert client.request(short_tmp / "c.sock", "GET", "/status") == {"daemon": {"running": True}}
        assert client.request(short_tmp / "c.sock", "POST", "/stop") == {"stopping": True} and stops == ["stop"]
    finally:
        for s in silent:
            s.close()
        server.stop()


PIN = b'POST /threshold/pin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n'
HOLDERS = {
    "silent": b"",
    "request line only": b"GET /status HTTP/1.1\r\n",
    "headers without their end": b"POST /threshold/pin HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 30000,
    "half a body": PIN + b'{"thresh',
    "kept alive, idle": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("sent", HOLDERS.values(), ids=HOLDERS.keys())
def test_at_the_cap_a_request_still_arriving_gives_its_slot_to_the_next_client_and_is_not_applied(short_tmp,
                                                                                                  monkeypatch, sent):
    """Each kind of client that holds a slot without a whole request: the next client is served (the cut one's reads
    end as at its deadline: closed, or 408 in its body; nothing it sent half is applied)."""
    from controller.cli.client import request
    from controller.daemon import api, clients
    from controller.daemon.api import ControlServer
    monkeypatch.setattr(api, "MAX_CLIENTS", 4)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    service, stops = _Service(), []
    server = ControlServer(short_tmp / "c.sock", service, on_stop=_stop_recorder(stops), read_timeout_s=60)
    server.start()
    holders = [_unix(short_tmp / "c.sock") for _ in range(4)]
    try:
        for s in holders:
            s.sendall(sent)
        if sent.endswith(b"\r\n\r\n"):                  # (their answers read: they wait for their next request)
            assert all(s.recv(65536).startswith(b"HTTP/1.1 200 ") for s in holders)
        assert request(short_tmp / "c.sock", "POST", "/stop") == {"stopping": True} and stops == ["stop"]
        assert request(short_tmp / "c.sock", "GET", "/status") == {"daemon": {"running": True}}
        assert service.calls == []
        if sent == HOLDERS["half a body"]:               # the rest of each pin: applied where its slot was kept only
            statuses = [_status_after(s, b'old": 5}') for s in holders]
            assert None in statuses or 408 in statuses, statuses
            assert len(service.calls) == statuses.count(200), (statuses, service.calls)
    finally:
        for s in holders:
            s.close()
        server.stop()


def test_a_command_being_answered_keeps_its_slot_at_the_cap(short_tmp, monkeypatch):
    """Only a request still arriving gives its slot up: one whose command runs (a pin waiting on SGLang) is never cut,
    and the cap holds against such clients (503, Retry-After)."""
    from controller.daemon import api, clients
    from controller.daemon.api import ControlServer
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    service = _Service()
    service.hold.clear()
    server = ControlServer(short_tmp / "c.sock", service, read_timeout_s=60)
    server.start()
    busy = _unix(short_tmp / "c.sock")
    try:
        busy.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:               # (until its thread has read it whole)
            with server.server._served_lock:
                if [slot.since for slot in server.server._served.values()] == [None]:
                    break
            time.sleep(0.01)
        other = _unix(short_tmp / "c.sock")                # (answered at once, before it sends anything)
        assert other.recv(65536).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        other.close()
        service.hold.set()
        assert busy.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        service.hold.set()
        busy.close()
        server.stop()


def test_specctl_status_and_stop_get_through_64_silent_clients_of_a_running_daemon(short_tmp, monkeypatch):
    """End to end: the daemon (a subprocess, the simulator) with every slot of its control socket taken by a client that
    sent nothing; `specctl status` answers and `specctl stop` stops it (both were 'busy' for as long as they held)."""
    from click.testing import CliRunner

    from controller.cli import client
    from controller.cli.main import cli
    from tests.daemon_proc import DaemonProc
    # specctl's retries of a busy daemon: 8 s, a slow machine's margin over the second it now takes, and short of the
    # 10 s that the silent clients held their slots for
    monkeypatch.setattr(client, "BUSY_RETRY_S", 8.0)
    d = DaemonProc(short_tmp, "--concurrency", "4")
    silent = []

    def specctl(*args):
        for s in silent:
            s.close()
        silent[:] = [_unix(d.socket) for _ in range(64)]       # (a new round of them before each command)
        return CliRunner().invoke(cli, ["--socket", str(d.socket), "--db", str(d.db), *args])
    try:
        d.wait_socket()
        res = specctl("status")
        assert res.exit_code == 0 and res.output.startswith("daemon:      running"), res.output
        res = specctl("stop")
        assert res.exit_code == 0 and res.output.strip() == f"daemon pid {d.proc.pid} stopped", res.output
        assert d.proc.wait(30) == 0
    finally:
        for s in silent:
            s.close()
        d.close()


# --- the drain on stop: one budget, inside systemd's TimeoutStopSec ---------------------------------------------------
class _Clock:
    """The drain's clock, moved by the waits below as a hung SGLang would make them last."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _HungRetune:
    """A retune stuck in SGLang's set_internal_state (up to 30 s): its stop waits all it is given (Ticker's default)."""

    def __init__(self, clock):
        self.clock, self.given = clock, []

    def stop(self, timeout: float = 30.0) -> None:
        self.given.append(timeout)
        self.clock.t += timeout


class _ProbeHeld:
    """The scheduler with a health probe waiting on a hung SGLang (/health_generate, up to 60 s): shutdown(wait=True)
    returns once released, or after the probe's 60 s (a drain that waited for it in line)."""

    def __init__(self, clock):
        self.clock, self.released = clock, threading.Event()

    def shutdown(self, wait: bool = True) -> None:
        if wait and not self.released.wait(30):
            self.clock.t += 60.0


def test_a_hung_sglang_cannot_hold_the_drain_past_its_budget_and_the_stop_is_still_recorded(short_tmp):
    """helper-157: the drain's waits on SGLang (a retune in set_internal_state 30 s, a health probe 60 s, its exit 60 s)
    came to 150 s, past the unit's TimeoutStopSec of 120, whose SIGKILL lost the final flush and the stop event. Now
    they share one budget, what the final writes need kept from them: the stop is recorded within it."""
    import sqlite3

    from controller.daemon.drain import STOP_BUDGET_S
    from controller.daemon.lifecycle import Daemon
    from tests.fakes import make_service
    from tests.test_review_h114 import _Stops
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    clock = _Clock()
    retune, sched, exits = _HungRetune(clock), _ProbeHeld(clock), []

    def engine_stop(timeout: float = 60.0) -> None:        # SGLang's exit, never coming: killed when its time is up
        exits.append(timeout)
        clock.t += timeout
    svc.engine.stop = engine_stop
    ingest = threading.Thread(target=lambda: None)
    ingest.start()
    daemon = Daemon(svc.cfg)
    daemon.stop_reason, daemon.monotonic = "SIGTERM", clock
    try:
        daemon._drain(svc.engine, svc, (_Stops(), sched, ingest, retune), svc.writer.db, _Stops())
    finally:
        sched.released.set()
    assert clock.t - 1000.0 <= STOP_BUDGET_S, (retune.given, exits)
    conn = sqlite3.connect(short_tmp / "s.db")
    stops = [d for (d,) in conn.execute("SELECT detail FROM events WHERE kind = 'stop'")]
    conn.close()
    assert stops == ["SIGTERM: exit 0"] and daemon.exit_code == 0


def test_the_drains_budget_fits_inside_the_units_timeout_stop_sec():
    """One budget in the code, the unit's TimeoutStopSec in systemd/spec-controller.service: held apart by a margin
    for the interpreter's exit, so that neither drifts past the other."""
    from controller.daemon.drain import FOLD_S, STOP_BUDGET_S, STOP_MARGIN_S
    from tests.test_systemd_unit import UNIT, _settings
    timeout_stop = _settings(UNIT.read_text())["TimeoutStopSec"]
    assert len(timeout_stop) == 1 and timeout_stop[0].isdigit(), timeout_stop      # (seconds, as written there)
    assert STOP_BUDGET_S + STOP_MARGIN_S <= int(timeout_stop[0])
    assert STOP_BUDGET_S - FOLD_S >= 30.0              # (SGLang's drain still gets half a minute)


def test_the_sglang_engines_stop_keeps_within_the_time_it_is_given(short_tmp):
    """Its waits after SGLang's exit (the telemetry receiver, the log relay: STOP_READ_S + 1 each) came on top of the
    timeout it was given; now within it. An SGLang that ignores SIGTERM is killed in that time."""
    import subprocess
    import sys

    class Thread:
        def __init__(self):
            self.given = []

        def join(self, timeout=None):
            self.given.append(timeout)
    eng = SGLangEngine(BASE)
    eng._rx, eng._log_relay = Thread(), Thread()
    eng.proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\nsignal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)"], stdout=subprocess.PIPE)
    try:
        assert eng.proc.stdout.readline() == b"ready\n"
        eng.stop(timeout=2.0)
        assert eng.proc.returncode == -9
        assert all(given <= 2.0 for thread in (eng._rx, eng._log_relay) for given in thread.given), \
            (eng._rx.given, eng._log_relay.given)
    finally:
        if eng.proc.poll() is None:
            eng.proc.kill()
        eng.proc.stdout.close()
        eng.proc.wait()


# --- a request's line and headers: a cap on their size ----------------------------------------------------------------
def _head_just_over_the_cap(path: bytes) -> bytes:
    """A request line and header lines, MAX_HEAD + 1 bytes in all, its last line not yet ended: the server reads all of
    it (nothing left unread to reset the connection at its close) and would wait for more."""
    from controller.daemon.clients import MAX_HEAD
    head = b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n"
    while len(head) + 60000 < MAX_HEAD:
        head += b"X-Pad: " + b"a" * 59991 + b"\r\n"
    return head + b"X-Last: " + b"a" * (MAX_HEAD + 1 - len(head) - 8)


def _answer_to(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_a_request_whose_headers_run_past_128_kib_is_refused_there(short_tmp):
    """http.server's own limits (100 header lines of 64 KiB) let a client hand the daemon ~6.5 MB to hold for up to
    its 10 s (64 such clients: 450 MB). Now a request's line and headers stop at MAX_HEAD (128 KiB): 431, one line.
    (Before, this head was read and the next line waited for until the read deadline, then closed unanswered.)"""
    import json

    from controller.daemon.api import ControlServer
    server = ControlServer(short_tmp / "c.sock", _Service(), read_timeout_s=5)
    server.start()
    try:
        answer = _answer_to(_unix(short_tmp / "c.sock"), _head_just_over_the_cap(b"/status"))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 "), head
        assert json.loads(body) == {"error": "Request Header Fields Too Large: request line and headers over 128 KiB"}
        ordinary = b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-Pad: aaaa\r\n" * 90 + b"\r\n"
        assert _answer_to(_unix(short_tmp / "c.sock"), ordinary).startswith(b"HTTP/1.1 200 OK\r\n")
        # (helper-162: the 431 was worded 'Too many headers', http.server's words for any header parse error; the
        # count's own refusal keeps them)
        many = b"GET /status HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n"
        head, _, body = _answer_to(_unix(short_tmp / "c.sock"), many).partition(b"\r\n\r\n")
        assert json.loads(body) == {"error": "Too many headers: got more than 100 headers"}
    finally:
        server.stop()


def test_a_scrape_whose_headers_run_past_128_kib_is_refused_there(monkeypatch):
    from controller.daemon import metrics
    from tests.test_review_h119 import _Service as Scraped
    monkeypatch.setattr(metrics, "READ_TIMEOUT_S", 5.0)
    httpd = metrics.start_metrics(Scraped(), 0)
    try:
        with socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=30) as s:
            answer = _answer_to(s, _head_just_over_the_cap(b"/metrics"))
        assert answer.split(b" ", 2)[1] == b"431", answer[:100]
    finally:
        httpd.stop()
