"""helper-162's review of today's changes: DropWatch against probes of the telemetry socket, the drain's waits on a
slow writer (the 431 of a request's head over its size cap: test_review_h157)."""
import time

import pytest

from controller import contract
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.sockprobe import LIVE, who_listens
from tests.test_review_h157 import BASE, _run_receiver


def _sample_then_probes(push, where, now: float, probes: int) -> None:
    """A sample of batch 4, then `probes` connections that hang up before zmq's handshake (a start's who_listens)."""
    push.send(contract.pack_sample(now, 4, 0, 4, 0.01, True))
    for _ in range(probes):
        assert who_listens(where / "t.ipc")[0] == LIVE


def test_another_daemons_probes_of_the_telemetry_socket_are_no_dropped_messages(short_tmp):
    """A start that finds the telemetry socket (sglang.start's who_listens: a second daemon on the same runtime
    directory) connects and hangs up before zmq's handshake: DropWatch took each such disconnect for a sender's, and
    the next connection, a probe's too, for its reconnect: two probes were one 'message over 1042 bytes' dropped."""
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        _sample_then_probes(push, short_tmp, now, 3)
        push.send(contract.pack_sample(now, 5, 0, 5, 0.01, True))
    got = _run_receiver(short_tmp, eng, send, lambda got: len(got) == 2)
    assert [s.batch_size for s in got] == [4, 5]
    assert eng.bad_messages == 0


def test_a_message_over_the_cap_after_probes_is_counted_once(short_tmp):
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        _sample_then_probes(push, short_tmp, now, 2)
        push.send(b"\x01" * (contract.MAX_TELEMETRY_MESSAGE + 1))
        deadline = time.monotonic() + 30              # (counted once zmq has connected the dropped sender again)
        while not eng.bad_messages and time.monotonic() < deadline:
            time.sleep(0.02)
        push.send(contract.pack_sample(now, 5, 0, 5, 0.01, True))
    got = _run_receiver(short_tmp, eng, send, lambda got: len(got) == 2)
    assert [s.batch_size for s in got] == [4, 5]
    assert eng.bad_messages == 1


# --- the drain: one budget, and no wait longer than before it ------------------------------------------------------
class _Waits:
    """Each wait of the drain that is given a timeout (a thread's join, the writer's flush): takes it all, on the
    drain's clock (a writer stuck on a locked database, an ingest thread blocked on its queue), recorded by name."""

    def __init__(self, clock):
        self.clock, self.given = clock, {}

    def wait(self, name: str, result=None):
        def waited(timeout=None, *args, **kwargs):
            self.given.setdefault(name, []).append(timeout)
            self.clock.t += timeout
            return result
        return waited


@pytest.mark.parametrize("stuck", ["retune", "ingest", "flush"])
def test_a_stuck_part_holds_the_drain_no_longer_than_before_its_budget(short_tmp, stuck):
    """helper-157's budget let each wait take what was left of 100 s: where SGLang exits at once and the writer is
    stuck (a database locked by another process), the final flush was given ~90 s (30 s before) and `systemctl stop` of
    such a daemon took ~90 s to exit 5 where it took ~30; the ingest thread's join ~70 s, the retune's 60 s (30 s each
    before). Each wait keeps its earlier ceiling inside the budget."""
    from controller.daemon.lifecycle import Daemon
    from tests.fakes import make_service
    from tests.test_review_h114 import _Stops
    from tests.test_review_h157 import _Clock
    svc, writer = make_service(short_tmp)
    clock = _Clock()
    waits = _Waits(clock)
    at_once = lambda *args, **kwargs: None
    ingest = type("Ingest", (), {"join": staticmethod(waits.wait("ingest") if stuck == "ingest" else at_once)})()
    retune = type("Retune", (), {"stop": staticmethod(waits.wait("retune") if stuck == "retune" else at_once)})()
    svc.engine.stop = lambda timeout=60.0: None            # SGLang gone at once
    flush = svc.writer.flush
    if stuck == "flush":
        svc.writer.flush = waits.wait("flush", result=False)
    daemon = Daemon(svc.cfg)
    daemon.stop_reason, daemon.monotonic = "SIGTERM", clock
    try:
        daemon._drain(svc.engine, svc, (_Stops(), _Stops(), ingest, retune), svc.writer.db, _Stops())
    finally:
        svc.writer.flush = flush
        writer.stop()
    assert len(waits.given[stuck]) == 1 and waits.given[stuck][0] <= 30.0, waits.given


def test_each_message_over_the_cap_is_one_drop(short_tmp):
    """The handshakes' outcomes name no connection and come out of the connections' order (a probe's failure before
    the sender's success: the oldest-connection match counted none, 4 runs in 6): two over-cap messages, two drops."""
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        _sample_then_probes(push, short_tmp, now, 1)
        for n in (1, 2):
            push.send(b"\x01" * (contract.MAX_TELEMETRY_MESSAGE + 1))
            deadline = time.monotonic() + 30
            while eng.bad_messages < n and time.monotonic() < deadline:
                time.sleep(0.02)
        push.send(contract.pack_sample(now, 5, 0, 5, 0.01, True))
    got = _run_receiver(short_tmp, eng, send, lambda got: len(got) == 2)
    assert [s.batch_size for s in got] == [4, 5]
    assert eng.bad_messages == 2
