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
        for s in holders:                                # (the rest of a half sent pin, too late)
            try:
                s.sendall(b'old": 5}')
            except OSError:
                pass
        assert service.calls == []
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
        if d.proc.poll() is None:
            d.proc.kill()
        d.log.close()
