"""helper-157: the control socket against clients that hold their slots (silent, trickling, half a body), telemetry's
cap on a message (what a real message can be, counted when exceeded), and a drain within systemd's TimeoutStopSec."""
import logging
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
