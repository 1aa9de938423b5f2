"""A stand-in for `python -m sglang.launch_server` with the plugin loaded, for fault campaigns on CPU:
it answers /health, /health_generate and /set_internal_state as SGLang does, and sends telemetry on
$SPEC_CONTROLLER_TELEMETRY like the plugin's rank 0 — sound decode batches at --rate per second,
and, with FAKE_SGLANG_HOSTILE=N, N hostile messages per second besides (malformed bytes, NaN and
infinite fields, batch size 0, impossible token counts, 1e-300 step times, timestamps far ahead);
FAKE_SGLANG_OVERSIZE=N sends N messages per second one byte over the daemon's cap (each drops the connection);
FAKE_SGLANG_STALL_S=S makes every /set_internal_state after the first take S seconds; FAKE_SGLANG_READY_S=S answers
/health 503 for the first S seconds (an engine still loading). Run as `python -c ...` (the
daemon asking what the interpreter has installed) it answers SGLang FAKE_VERSION with the plugin's entry point.

    [sglang] python = "<a script that runs: python bench/fake_sglang.py "$@">"
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.contract import (ENV_ADDRESS, MAX_TELEMETRY_MESSAGE, SAMPLE, THRESHOLD_KEY, encode_stats,  # noqa: E402
                                 pack_sample)

NAN, INF = float("nan"), float("inf")
FAKE_VERSION = "0.5.17"             # what it answers the daemon's `python -c` look at what is installed


def hostile(rng: random.Random, now: float) -> bytes:
    """One message nothing sound would send."""
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:
        return b"\x01" + rng.randbytes(SAMPLE.size - 1)                       # a sample of random bytes
    if kind == 2:
        return struct.pack("<B", 2) + rng.randbytes(41)                       # a stats message, wrong size
    fields = [(now, 4, 3, 12, NAN), (now, 0, 0, 0, 0.01), (now, 4, 3, 12, 1e-300), (1e18, 4, 0, 4, 0.01),
              (NAN, 4, 0, 4, 0.01), (now, 4, 3, 4000, 0.02), (now, 60000, 0, 60000, INF)][kind - 3]
    return pack_sample(*fields, True)


class State:
    threshold = 0
    calls = 0
    ready_at = 0.0          # time.monotonic() from which /health answers 200


def handler(state: State):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, body: bytes = b"{}") -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path not in ("/health", "/health_generate"):
                return self._send(404)
            self._send(200 if time.monotonic() >= state.ready_at else 503)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            state.calls += 1
            if state.calls > 1:                 # the daemon's first call (at start-up) is answered at once
                time.sleep(float(os.environ.get("FAKE_SGLANG_STALL_S", 0)))     # a scheduler slow to answer
            value = (body.get("server_args") or {}).get(THRESHOLD_KEY)
            if isinstance(value, int):
                state.threshold = value
            self._send(200, json.dumps({"updated": isinstance(value, int)}).encode())
    return H


def telemetry(state: State, rate: float, hostile_rate: float, stop: threading.Event, oversize_rate: float = 0.0) -> None:
    import zmq
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 10000)
    sock.connect(os.environ[ENV_ADDRESS])
    rng, i, t0 = random.Random(0), 0, time.monotonic()
    while not stop.is_set():
        i += 1
        lag = t0 + i / rate - time.monotonic()
        if lag > 0:
            stop.wait(lag)
        bs = rng.randint(1, 64)
        spec = bs <= state.threshold
        step = (0.01 + 0.0005 * bs) * (1.4 if spec else 1.0)
        msgs = [pack_sample(time.time(), bs, 3 if spec else 0, bs * (rng.randint(1, 4) if spec else 1), step, True)]
        for _ in range(int(hostile_rate / rate) + (rng.random() < (hostile_rate / rate) % 1)):
            msgs.append(hostile(rng, time.time()))
        if oversize_rate and (i * oversize_rate) // rate > ((i - 1) * oversize_rate) // rate:
            msgs.append(b"\x01" + bytes(MAX_TELEMETRY_MESSAGE))        # (a separate stream: the hostile draws stay)
        for m in msgs:
            try:
                sock.send(m, zmq.NOBLOCK)
            except zmq.Again:
                pass
        if i % 256 == 0:
            sock.send(encode_stats({"sent": i}, 1), zmq.NOBLOCK)
    sock.close(linger=0)


def main() -> None:
    if sys.argv[1:2] == ["-c"]:         # the daemon asks the interpreter what it has installed before launching
        print(json.dumps({"sglang": FAKE_VERSION, "plugins": ["spec_controller"], "platforms": []}))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("-m")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--rate", type=float, default=float(os.environ.get("FAKE_SGLANG_RATE", 500)))
    args, _ = ap.parse_known_args()
    state, stop = State(), threading.Event()
    state.ready_at = time.monotonic() + float(os.environ.get("FAKE_SGLANG_READY_S", 0))
    server = ThreadingHTTPServer((args.host, args.port), handler(state))
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sender = threading.Thread(target=telemetry, args=(state, args.rate, float(os.environ.get("FAKE_SGLANG_HOSTILE", 0)),
                                                      stop, float(os.environ.get("FAKE_SGLANG_OVERSIZE", 0))),
                              daemon=True)
    sender.start()
    stop.wait()
    server.shutdown()
    sender.join(5)


if __name__ == "__main__":
    main()
