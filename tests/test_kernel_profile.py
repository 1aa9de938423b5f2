"""bench/gpu/kernel_profile.py's trace arithmetic: kernel time per step and the difference table."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
from kernel_profile import per_step, table  # noqa: E402


def kernel(name: str, ts: float, dur: float, cat: str = "kernel", tid: int = 7) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}


def test_per_step_sums_gpu_events_only_and_divides_by_steps():
    events = [kernel("gemm", 0, 10), kernel("gemm", 20, 10), kernel("norm", 40, 4),
              kernel("copy", 50, 2, cat="gpu_memcpy"),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},   # CPU: not counted
              {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5}]                  # not a span
    s = per_step(events, steps=2)
    assert s["by_name"] == {"gemm": [10.0, 1.0], "norm": [2.0, 0.5], "copy": [1.0, 0.5]}
    assert s["busy_us"] == 13.0 and s["kernels"] == 2.0
    assert s["span_us"] == 26.0          # first start 0, last end 52, over 2 steps


def test_per_step_without_kernels_is_empty_not_an_error():
    assert per_step([], 10)["by_name"] == {} and per_step([kernel("k", 0, 1)], 0)["busy_us"] == 0.0
    assert per_step([], 10)["by_stream"] == {}           # main() prints it for every engine, traced or not


def test_table_lists_differences_largest_first_and_skips_equal_kernels():
    a = per_step([kernel("gemm", 0, 100), kernel("norm", 100, 5)], 1)
    b = per_step([kernel("gemm", 0, 100), kernel("norm", 100, 5), kernel("fill", 105, 3),
                  kernel("fc_gemm", 110, 20)], 1)
    rows = table(a, b, "nospec", "off")
    body = [r for r in rows[2:] if not r.startswith(("| all", "| span"))]
    assert [r.split(" | ")[0] for r in body] == ["| fc_gemm", "| fill"]
    assert "+20.0" in body[0] and "+3.0" in body[1] and body[0].endswith("| - / 20.00 |")
    assert rows[-2].startswith("| all (busy) | 105.0") and rows[-2].endswith("+23.0 | |")


def test_per_step_splits_kernel_time_by_stream_busiest_first():
    events = [kernel("gemm", 0, 10), kernel("gemm", 20, 10), kernel("fc", 5, 6, tid=9), kernel("store", 30, 2, tid=9)]
    s = per_step(events, steps=2)
    assert s["by_stream"] == {"7": {"kernels": 1.0, "busy_us": 10.0, "gaps_us": 5.0},   # 10 us idle over 2 steps
                              "9": {"kernels": 1.0, "busy_us": 4.0, "gaps_us": 9.5}}
    assert list(s["by_stream"]) == ["7", "9"] and s["busy_us"] == 14.0
    apart = per_step([kernel("a", 0, 1), kernel("b", 500, 1), kernel("c", 503, 1)], steps=1)
    assert apart["by_stream"]["7"]["gaps_us"] == 2.0          # 499 us between steps is not a gap inside one


def test_waits_name_what_the_forward_stream_resumed_after():
    from kernel_profile import waits
    events = [kernel("gemm", 0, 100), kernel("attn", 110, 50),       # 10 us idle: the copy ended 1 us before
              kernel("h2d", 95, 14, cat="gpu_memcpy", tid=9),
              kernel("norm", 164, 5),                                   # 4 us idle, nothing ended just before
              kernel("gemm", 171, 100),                                 # 2 us: below WAIT_US
              kernel("gemm", 400, 100)]                                 # 129 us: between steps
    w = waits(events, steps=1)
    assert w == {"[step] gemm <- -": [129.0, 1.0], "attn <- h2d": [10.0, 1.0], "norm <- -": [4.0, 1.0]}
    assert list(w) == ["[step] gemm <- -", "attn <- h2d", "norm <- -"]   # largest first
    assert waits([], 1) == {} and per_step([], 1)["waits"] == {}


def streaming_engine(tokens: int, sent: list, gate=None, gate_at: int = 0, error: str | None = None):
    """/generate with stream: one SSE line per output token (meta_info.completion_tokens), then [DONE]; after token
    gate_at it waits for `gate` (what the client has read by then is exactly that); `error`: SGLang's error chunk."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["stream"] is True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if error:
                self.wfile.write(f"data: {json.dumps({'error': {'message': error}})}\n\ndata: [DONE]\n\n".encode())
                return
            for n in range(1, tokens + 1):
                sent.append(n)
                meta = {"completion_tokens": n} if n > 1 else {"completion_tokens": None}   # a chunk without a count
                self.wfile.write(f"data: {json.dumps({'text': 'x', 'meta_info': meta})}\n\n".encode())
                self.wfile.flush()
                if gate is not None and n == gate_at:
                    gate.wait(10)
            self.wfile.write(b"data: [DONE]\n\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_profile_starts_when_the_streamed_request_reaches_the_position():
    import threading

    import pytest
    from kernel_profile import stream_to
    sent: list = []
    gate = threading.Event()
    server = streaming_engine(50, sent, gate=gate, gate_at=20)
    try:
        with stream_to(server.server_port, {"input_ids": [1]}, 20) as at:
            # the server holds token 21 back until the profile has started: the client stopped reading at 20
            assert at == 20 and sent[-1] == 20
            gate.set()
        with pytest.raises(RuntimeError, match="ended at 50 tokens, before position 60"):
            with stream_to(server.server_port, {"input_ids": [1]}, 60):
                pass
    finally:
        server.shutdown()


def test_a_request_that_fails_in_the_stream_says_why():
    import pytest
    from kernel_profile import stream_to
    server = streaming_engine(0, [], error="out of memory")
    try:
        with pytest.raises(RuntimeError, match="failed: .*out of memory"):
            with stream_to(server.server_port, {"input_ids": [1]}, 5):
                pass
    finally:
        server.shutdown()
