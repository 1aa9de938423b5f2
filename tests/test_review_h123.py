"""helper-123: the daemon's servers let go on every error path of the start. A start that failed after the control
socket was serving (here the job scheduler's thread refused, as when the process may start no more threads; an
[sglang] probe_s APScheduler could not schedule failed there once) stopped the metrics server but not the control
server, the retune ticker nor the ingest thread: they served on for a daemon that had given up, its socket left behind."""
import socket
import threading
import time

import pytest

from controller.daemon.config import load_config
from controller.daemon.lifecycle import Daemon

WORKERS = ("control-api", "retune", "ingest")      # the threads _bring_up starts before the job scheduler
NO_THREAD = "can't start new thread"        # (RuntimeError's text where a process may start no more threads)


def _new_threads(before: set, *names: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive() and t.name in names]


def test_a_start_that_fails_after_the_control_socket_served_stops_its_workers(short_tmp, monkeypatch):
    from apscheduler.schedulers.background import BackgroundScheduler

    def refuse(self, *args, **kwargs):
        assert (short_tmp / "c.sock").exists(), "the control socket was not serving when the scheduler started"
        raise RuntimeError(NO_THREAD)
    monkeypatch.setattr(Daemon, "_signals", lambda self: None)        # (signal handlers: the main thread's only)
    monkeypatch.setattr(BackgroundScheduler, "start", refuse)
    cfg = load_config(None, {"engine": {"kind": "sim"}, "sim": {"concurrency": 2, "speed": 20.0},
                             "storage": {"db": str(short_tmp / "s.db")},
                             "control": {"socket": str(short_tmp / "c.sock")}})
    before = set(threading.enumerate())
    with pytest.raises(Exception, match=NO_THREAD):
        Daemon(cfg).run()
    end = time.monotonic() + 10                   # (generous: a stop joins within its own bounds)
    while _new_threads(before, *WORKERS) and time.monotonic() < end:
        time.sleep(0.05)
    assert _new_threads(before, *WORKERS) == [], "still serving / retuning / ingesting after the failed start"
    assert not (short_tmp / "c.sock").exists(), "the control socket was left behind"
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(str(short_tmp / "c.sock"))


def test_a_metrics_server_whose_thread_cannot_start_lets_its_port_go(monkeypatch):
    """start_metrics bound the port, then its serving thread was refused: the server it had made was dropped unclosed,
    the port held for as long as the failure was kept (the daemon's start-up error keeps it as its context), and
    Daemon._start's _stop_metrics had nothing to stop (self.metrics not yet set)."""
    from controller.daemon import metrics
    from tests.conftest import unheld_port
    from tests.test_metrics_stop import _bindable
    from tests.test_review_h119 import _Service
    real = threading.Thread.start

    def start(self):
        if self.name == "metrics":
            raise RuntimeError(NO_THREAD)
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    port = unheld_port()
    with pytest.raises(RuntimeError, match=NO_THREAD):
        metrics.start_metrics(_Service(), port)
    assert _bindable(port), "the port is still bound after the failed start"
