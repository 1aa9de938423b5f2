"""helper-162's review of today's changes: DropWatch against probes of the telemetry socket, the drain's waits on a
slow writer, the 431 of a request's head over its size cap."""
import time

from controller import contract
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.sockprobe import LIVE, who_listens
from tests.test_review_h157 import BASE, _run_receiver


def test_another_daemons_probes_of_the_telemetry_socket_are_no_dropped_messages(short_tmp):
    """A start that finds the telemetry socket (sglang.start's who_listens: a second daemon on the same runtime
    directory) connects and hangs up before zmq's handshake: DropWatch took each such disconnect for a sender's, and
    the next connection, a probe's too, for its reconnect: two probes were one 'message over 1042 bytes' dropped."""
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        push.send(contract.pack_sample(now, 4, 0, 4, 0.01, True))
        for _ in range(3):
            assert who_listens(short_tmp / "t.ipc")[0] == LIVE
        push.send(contract.pack_sample(now, 5, 0, 5, 0.01, True))
    got = _run_receiver(short_tmp, eng, send, lambda got: len(got) == 2)
    assert [s.batch_size for s in got] == [4, 5]
    assert eng.bad_messages == 0


def test_a_message_over_the_cap_after_probes_is_counted_once(short_tmp):
    eng = SGLangEngine(BASE)
    now = time.time()

    def send(push):
        push.send(contract.pack_sample(now, 4, 0, 4, 0.01, True))
        for _ in range(2):
            assert who_listens(short_tmp / "t.ipc")[0] == LIVE
        push.send(b"\x01" * (contract.MAX_TELEMETRY_MESSAGE + 1))
        deadline = time.monotonic() + 30              # (counted once zmq has connected the dropped sender again)
        while not eng.bad_messages and time.monotonic() < deadline:
            time.sleep(0.02)
        push.send(contract.pack_sample(now, 5, 0, 5, 0.01, True))
    got = _run_receiver(short_tmp, eng, send, lambda got: len(got) == 2)
    assert [s.batch_size for s in got] == [4, 5]
    assert eng.bad_messages == 1
