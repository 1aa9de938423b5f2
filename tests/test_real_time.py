"""Bugs that show only when real time passes differently than in a quick test: systemd's watchdog
against a slow tick, a long engine start seen by `specctl status`, the threshold an engine starts with."""
import threading

from tests.daemon_proc import notify_listener, wait_notify
from tests.fakes import make_service


def _serving(daemon, svc):
    """The daemon's serving loop on a thread (the main thread in the daemon); join it to get the verdict."""
    t = threading.Thread(target=daemon._serve, args=(svc.engine, svc, svc.writer), daemon=True)
    t.start()
    return t


def test_the_watchdog_is_fed_between_retunes_slower_than_watchdogsec(short_tmp, monkeypatch):
    """WatchdogSec=60 in the unit, [policy] tick_s allows up to 3600: with pings only after a retune, a
    tick_s of 60 or more got a healthy daemon SIGABRTed by systemd every minute; and with the stall limit
    equal to WatchdogSec, systemd's SIGABRT always came before the daemon's orderly exit 1."""
    from controller.daemon.lifecycle import Daemon
    listener = notify_listener(str(short_tmp / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(short_tmp / "notify"))
    svc, writer = make_service(short_tmp)
    daemon = Daemon(svc.cfg)
    daemon.watch = {"state writer": writer.thread}
    daemon.stall_s = 2400.0                        # tick_s = 120: 20 ticks; no retune runs here
    svc.apply_initial()
    serving = _serving(daemon, svc)
    try:
        wait_notify(listener, b"WATCHDOG=1", timeout=10)
    finally:
        daemon.stop_flag.set()
        serving.join(10)
    assert daemon.exit_code == 0
    writer.stop()


def test_a_stalled_loop_is_not_fed_to_the_watchdog(short_tmp, monkeypatch):
    from controller.daemon.lifecycle import Daemon
    listener = notify_listener(str(short_tmp / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(short_tmp / "notify"))
    svc, writer = make_service(short_tmp)
    daemon = Daemon(svc.cfg)
    daemon.watch = {"state writer": writer.thread}
    daemon.stall_s = 60.0
    svc.last_retune_ok -= 61.0
    serving = _serving(daemon, svc)
    serving.join(20)
    assert not serving.is_alive() and daemon.exit_code == 1
    listener.setblocking(False)
    sent = []
    while True:
        try:
            sent.append(listener.recv(4096))
        except BlockingIOError:
            break
    assert b"WATCHDOG=1" not in sent
    writer.stop()
