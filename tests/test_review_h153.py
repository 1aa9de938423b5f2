"""helper-153: the telemetry intake as the SGLang engine's receiver runs it (real zmq, the contract's codec), SIGHUP
reloads as status reports them, and a SIGHUP that reaches the daemon while it still imports."""
import struct
import threading
import time

import zmq

from controller.contract import pack_sample
from controller.daemon.engines.sglang import SGLangEngine
from tests.fakes import make_service

BASE = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "max_running_requests": 64}


def _newer_layout(t: float) -> bytes:
    """16 samples of a plugin whose sample carries one more field (what a release that changed SAMPLE would send)."""
    return b"".join(struct.pack("<BdIHIdBd", 1, t, 8, 0, 8, 0.01, 1, 0.0) for _ in range(16))


def _receive(short_tmp, eng, messages, bad: int):
    """messages through a real PUSH -> the engine's receiver, stopped once it has counted `bad` undecodable ones."""
    pull, push = zmq.Context.instance().socket(zmq.PULL), zmq.Context.instance().socket(zmq.PUSH)
    pull.bind(f"ipc://{short_tmp}/u.ipc")
    push.connect(f"ipc://{short_tmp}/u.ipc")
    eng._stop.clear()
    rx = threading.Thread(target=eng._receive, args=(pull, lambda s: None), daemon=True)
    rx.start()
    for m in messages:
        push.send(m)
    deadline = time.monotonic() + 30
    while eng.bad_messages < bad and rx.is_alive() and time.monotonic() < deadline:
        rx.join(0.01)
    eng._stop.set()
    rx.join(10)
    push.close(linger=0)


def test_nothing_but_undecodable_telemetry_is_a_problem_status_names(short_tmp):
    """A plugin whose every message the daemon cannot decode (another release's sample layout) sent 14,000 messages in
    70 s: status said healthy, '0 dropped', no log line, while nothing was learned. Now: counted, said in status's
    samples line, a problem once a minute of nothing else has passed, cleared by the next sample message."""
    eng = SGLangEngine(BASE)
    svc, writer = make_service(short_tmp, engine=eng)
    try:
        real = [1000.0]
        eng.undecodable.monotonic = lambda: real[0]
        now = svc.clock.now()
        _receive(short_tmp, eng, [_newer_layout(now), b"", b"\x07garbage"], 3)
        assert eng.bad_messages == 3 and eng.health()["telemetry"] is None        # not yet a minute of them
        real[0] += 61.0
        _receive(short_tmp, eng, [_newer_layout(now)], 4)                          # ... and still coming
        problems = svc.status()["daemon"]["problems"]
        said = [p for p in problems if p.startswith("telemetry:")]
        assert said == ["telemetry: no sample decoded for 61 s, only undecodable messages (4 this run); nothing is learned: is the engine's "
                        "plugin ([sglang] python's spec-controller) of another release than the daemon?"], problems
        eng.undecodable.samples_came()
        assert not [p for p in svc.status()["daemon"]["problems"] if p.startswith("telemetry:")]
    finally:
        writer.stop()


def test_the_receiver_clears_the_run_on_a_sample_message_not_on_a_stats_one(short_tmp):
    from controller.contract import encode_stats
    eng = SGLangEngine(BASE)
    eng.undecodable.run = (1.0, 2.0)
    pull, push = zmq.Context.instance().socket(zmq.PULL), zmq.Context.instance().socket(zmq.PUSH)
    pull.bind(f"ipc://{short_tmp}/s.ipc")
    push.connect(f"ipc://{short_tmp}/s.ipc")
    rx = threading.Thread(target=eng._receive, args=(pull, lambda s: None), daemon=True)
    rx.start()
    push.send(encode_stats({"sent": 1}, 1))
    deadline = time.monotonic() + 30
    while not eng.plugin_stats and time.monotonic() < deadline:
        time.sleep(0.01)
    assert eng.plugin_stats and eng.undecodable.run == (1.0, 2.0)         # counters are no samples
    push.send(pack_sample(5.0, 2, 0, 2, 0.01, True))
    while eng.undecodable.run is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    eng._stop.set()
    rx.join(10)
    push.close(linger=0)
    assert eng.undecodable.run is None


def test_undecodable_messages_are_logged_once_a_minute_with_what_they_were(short_tmp, caplog):
    eng = SGLangEngine(BASE)
    with caplog.at_level("WARNING", logger="spec_controller"):
        _receive(short_tmp, eng, [b"\x07garbage"] * 50, 50)
    lines = [r.getMessage() for r in caplog.records if "telemetry:" in r.getMessage()]
    assert lines == ["telemetry: unknown telemetry message (8 bytes), first byte 0x07: not read (a plugin of another "
                     "release?)"], lines


def test_specctl_status_says_how_many_telemetry_messages_were_undecodable():
    from controller.cli.status import _samples
    st = {"daemon": {"running": True}, "samples": {"per_s": 1.0, "total": 5, "dropped": 0},
          "engine": {"bad_telemetry": 14000}}
    assert _samples(st, False).endswith("0 dropped, 14,000 undecodable telemetry messages")
    st["engine"]["bad_telemetry"] = 0
    assert _samples(st, False).endswith("0 dropped")


def _reload(daemon_cfg, service):
    from controller.daemon.lifecycle import Daemon
    Daemon(daemon_cfg)._reload(service)


def test_a_refused_reload_is_a_problem_status_names_until_a_reload_works(short_tmp):
    """A SIGHUP meeting a bad config kept the running one and logged it, and status said 'healthy' with no word of it,
    though a restart (systemd's after a crash) would meet the same refusal."""
    from controller.daemon.config import load_config
    config = short_tmp / "c.toml"
    config.write_text("[guard]\nexplore_share = 0.05\n")
    cfg = {**load_config(config), "_overrides": None}
    svc, writer = make_service(short_tmp)
    try:
        assert svc.status()["daemon"]["healthy"]
        config.write_text('[guard]\nstabilise_s = "x"\n')
        _reload(cfg, svc)
        st = svc.status()
        said = [p for p in st["daemon"]["problems"] if p.startswith("reload: refused at ")]
        assert len(said) == 1 and ", the running config kept: config: [guard] unknown guard setting 'stabilise_s' (did " \
            "you mean 'stabilisation_s'?" in said[0], st["daemon"]["problems"]
        assert not st["daemon"]["healthy"] and st["job_errors"]["reload"] == 1
        config.unlink()
        config.mkdir()                                                # a file replaced by a directory
        _reload(cfg, svc)
        said = [p for p in svc.status()["daemon"]["problems"] if p.startswith("reload:")]
        assert len(said) == 1 and said[0].endswith(f"config file {config}: cannot read (Is a directory)"), said
        config.rmdir()
        config.write_text("[guard]\nexplore_share = 0.02\n")
        _reload(cfg, svc)
        st = svc.status()
        assert st["daemon"]["healthy"] and st["job_errors"]["reload"] == 2, st["daemon"]["problems"]
        assert svc.loop.guard_config.explore_share == 0.02
    finally:
        writer.stop()


def test_a_sighup_while_run_still_imports_is_ignored_until_the_daemons_handler(monkeypatch):
    """`kill -HUP` within ~0.3 s of `spec-controller run` (its imports) ended the process by SIGHUP's default action:
    no line, and systemd does not restart a unit that SIGHUP ended. The entry point ignores it for `run` until the
    daemon installs its own handler (lifecycle.Daemon._signals); other commands keep the default."""
    import signal
    import sys

    from controller import entry
    from controller.daemon import main as daemon_main
    seen = []
    monkeypatch.setattr(daemon_main, "main", lambda: seen.append(signal.getsignal(signal.SIGHUP)))
    before = signal.getsignal(signal.SIGHUP)
    try:
        for argv, want in ((["spec-controller", "config", "check"], before), (["spec-controller", "run"], signal.SIG_IGN)):
            monkeypatch.setattr(sys, "argv", argv)
            entry.daemon()
            assert seen.pop() == want, argv
    finally:
        signal.signal(signal.SIGHUP, before)
