"""The daemon's stop lets go of its metrics server (controller/daemon/metrics.py): its listening port released and its
threads (serve_forever's, each scrape's) ended. start_metrics' server was started and never closed: a daemon run in a
process that goes on (the tests', an embedding) kept the port bound and a thread serving a service that had stopped,
and an idle scrape connection kept its thread too."""
import socket
import threading
import time

import pytest

from controller.daemon.config import load_config
from controller.daemon.lifecycle import Daemon
from tests.conftest import unheld_port


def _metrics_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "metrics" or "process_request_thread" in t.name]


def _bindable(port: int) -> bool:
    with socket.socket() as s:        # (SO_REUSEADDR: past the scrapes' TIME_WAIT; a listener still open refuses it)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def running(short_tmp, monkeypatch):
    """A daemon (simulated engine) run in this process on a thread, serving metrics on a free port. A scrape's read
    waits an hour here: a stop that waited for an idle client's read would not end within the test's joins."""
    monkeypatch.setattr(Daemon, "_signals", lambda self: None)        # (signal handlers: the main thread's only)
    monkeypatch.setattr("controller.daemon.metrics.READ_TIMEOUT_S", 3600.0)
    port = unheld_port()
    cfg = load_config(None, {"engine": {"kind": "sim"}, "sim": {"concurrency": 2, "speed": 20.0},
                             "storage": {"db": str(short_tmp / "s.db")},
                             "control": {"socket": str(short_tmp / "c.sock"), "metrics_port": port}})
    daemon = Daemon(cfg)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(daemon.run()), name="daemon-under-test")
    before = set(_metrics_threads())
    thread.start()
    end = time.monotonic() + 30
    while not (short_tmp / "c.sock").exists():
        assert thread.is_alive() and time.monotonic() < end, "the daemon did not come up"
        time.sleep(0.05)
    yield daemon, thread, port, codes, before
    daemon.request_stop("test teardown")
    thread.join(60)


def test_the_daemons_stop_releases_the_metrics_port_and_ends_its_threads(running):
    daemon, thread, port, codes, before = running
    with socket.create_connection(("127.0.0.1", port), timeout=5) as scrape:
        scrape.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := scrape.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200") and b"specctl_threshold_batch_size" in answer
    assert not _bindable(port)                              # (serving: the port is the metrics server's)
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)       # a client that connected, sent nothing
    try:
        end = time.monotonic() + 10
        while len([t for t in _metrics_threads() if t not in before]) < 2 and time.monotonic() < end:
            time.sleep(0.05)                                # (accepted: its thread waits on its request)
        daemon.request_stop("test")
        thread.join(60)
        assert not thread.is_alive() and codes == [0], "the daemon's stop did not end (waiting on a scrape's read?)"
    finally:
        idle.close()
    assert _bindable(port), "the metrics port is still bound after the daemon stopped"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert [t for t in _metrics_threads() if t not in before and t.is_alive()] == []


def test_a_start_that_fails_after_the_metrics_server_started_lets_its_port_go(short_tmp, monkeypatch):
    """The metrics server starts before the control socket: a control socket that cannot be made (its directory
    changed since the preflight) fails the start, and the metrics port is let go with it (mutation LC2)."""
    from controller.daemon import api
    monkeypatch.setattr(Daemon, "_signals", lambda self: None)
    port = unheld_port()

    def refuse(self, *args, **kwargs):
        assert not _bindable(port), "the metrics server was not serving when the control socket was made"
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(api.ControlServer, "__init__", refuse)
    cfg = load_config(None, {"engine": {"kind": "sim"}, "sim": {"concurrency": 2, "speed": 20.0},
                             "storage": {"db": str(short_tmp / "s.db")},
                             "control": {"socket": str(short_tmp / "c.sock"), "metrics_port": port}})
    daemon = Daemon(cfg)
    try:
        code = daemon.run()
    except SystemExit as e:
        code = e.code
    except Exception as e:            # (Fatal: the start's one line)
        code = str(e)
    assert code not in (0, None) and daemon.metrics is None
    assert _bindable(port), "the metrics port is still bound after the failed start"
