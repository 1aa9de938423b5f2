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
    listener.close()


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
    listener.close()


def _previous_run(db, wall):
    """A database as a run that ended at `wall` left it: samples, its last decision and checkpoint, its stop."""
    from state.db import open_store
    from state.items import INSERTS
    store = open_store(db)
    store.conn.executemany(INSERTS["samples"], [(100.0 + i * 0.01, 8, 3, 24, 0.01, 1) for i in range(200)])
    store.conn.execute(INSERTS["decisions"], {"t": 101.0, "wall": wall, "old": 0, "new": 8, "policy": "thompson",
                                              "reason": "x", "exploratory": 0})
    store.conn.execute(INSERTS["policy_state"], {"wall": wall, "policy": "thompson", "params": "{}", "state": "{}"})
    store.conn.execute(INSERTS["events"], {"wall": wall, "kind": "stop", "detail": "SIGTERM: exit 0"})
    store.conn.close()


def test_status_during_a_long_engine_start_shows_the_old_figures_as_old(short_tmp):
    """A daemon loading SGLang (minutes) has written its start event; `specctl status` then showed the
    previous run's accept length and tok/s, a day old, as current ('as of' left out: figures_age_s 0)."""
    import json
    import time

    from click.testing import CliRunner

    from controller.cli.main import cli
    from tests.daemon_proc import StartingDaemon
    db, sock = short_tmp / "state.db", short_tmp / "no.sock"
    _previous_run(db, time.time() - 86400)
    with StartingDaemon(db, sock):
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "status", "--json"])
    assert res.exit_code == 4, res.output
    st = json.loads(res.stdout)
    assert st["daemon"]["starting"] and st["tok_per_s"] > 0
    assert st["figures_age_s"] >= 86400 - 60, st["figures_age_s"]


def test_the_engine_starts_with_the_restored_pin_not_the_configured_initial_threshold(short_tmp):
    """SGLang got [policy] initial_threshold in its environment whatever was pinned or restored: its warm-up
    and the requests it served before the daemon's first set_threshold ran another threshold than the pin."""
    from controller.daemon.lifecycle import Daemon
    from state.db import open_store
    from state.items import INSERTS
    from state.queries import setting_row
    from tests.fakes import FakeEngine

    class Recording(FakeEngine):
        def start(self, on_sample):
            self.started_with = getattr(self, "initial_threshold", None)

        def wait_ready(self, timeout, cancel=None):
            cancel.set()                           # stopped while it starts: nothing else is brought up
            return False

    store = open_store(short_tmp / "s.db")
    store.conn.execute(INSERTS["settings"], setting_row("pinned", 7))
    store.conn.close()
    engine = Recording()
    svc, writer = make_service(short_tmp, engine=engine)
    svc.cfg["policy"]["initial_threshold"] = 30
    assert Daemon(svc.cfg)._start(engine, svc, writer) == (None, None, None, None)
    assert engine.started_with == 7
    writer.stop()


def test_a_ready_timeout_of_inf_starts_and_extends_systemds_start_timeout(short_tmp, monkeypatch):
    """`[sglang] ready_timeout_s = inf` (TOML allows it; the engine's wait takes it as no limit): the start-timeout
    extension computed int(inf * 1e6) and the daemon refused to start (OverflowError)."""
    from controller.daemon import lifecycle, notify
    from controller.daemon.lifecycle import Daemon
    from tests.fakes import FakeEngine

    sent = []
    monkeypatch.setattr(lifecycle, "sd_notify", lambda m: sent.append(m) or True)

    class Stopped(FakeEngine):
        def start(self, on_sample):
            pass

        def wait_ready(self, timeout, cancel=None):
            cancel.set()
            return False

    engine = Stopped()
    svc, writer = make_service(short_tmp, engine=engine)
    engine.ready_timeout_s = float("inf")
    try:
        assert Daemon(svc.cfg)._start(engine, svc, writer) == (None, None, None, None)
    finally:
        writer.stop()
    assert sent == [f"EXTEND_TIMEOUT_USEC={int(notify.MAX_EXTEND_S * 1e6)}"]
    assert notify.extend_timeout_usec(900.0) == 1020000000 and notify.extend_timeout_usec(float("nan")) is None
