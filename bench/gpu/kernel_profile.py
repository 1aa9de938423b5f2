"""Issue 12 item 1 at the kernel level: what an off decode batch runs on the GPU that a no-spec decode
batch does not. Steady decode at batch C on each engine; once the prompts are in, SGLang's own torch
profiler (/start_profile, GPU activity, num_steps forward passes) records every kernel, CUDA-graph
kernels included; then per engine: kernel time per step by kernel name, busy time and span per step.
Run it LAST in a device call: a profiled engine is not known to run as before afterwards (h200-2026-12-01e).

    python3 bench/gpu/kernel_profile.py --engines nospec=30001,off=30000 --batch 48 --steps 40 --out DIR
(the profile starts when one streamed request of the batch has --position output tokens: 256)
Prints a KERNELS JSON line per engine and, per engine after the first stored in DIR/kernels.json (which
accumulates over invocations, so that a run-time switch can come between two), a table of the kernels
whose time per step differs from the first's.
`table()` is pure (tests/test_kernel_profile.py).
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import glob
import gzip
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from greedy import post, prompts
from loads import body

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def per_step(events: list[dict], steps: int) -> dict:
    """Kernel time per step (us) by name, busy time and span per step, from a chrome trace's events."""
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X" and "dur" in e]
    if not gpu or steps <= 0:
        return {"steps": steps, "kernels": 0, "busy_us": 0.0, "span_us": 0.0, "by_name": {}, "by_stream": {},
                "waits": {}}
    by_name: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for e in gpu:
        by_name[e["name"]] += e["dur"]
        counts[e["name"]] += 1
    start = min(e["ts"] for e in gpu)
    end = max(e["ts"] + e["dur"] for e in gpu)
    return {"steps": steps, "kernels": round(len(gpu) / steps, 1),
            "busy_us": round(sum(by_name.values()) / steps, 1), "span_us": round((end - start) / steps, 1),
            "by_name": {n: [round(t / steps, 2), round(counts[n] / steps, 2)] for n, t in by_name.items()},
            "by_stream": by_stream(gpu, steps), "waits": waits(gpu, steps)}


GAP_US = 50.0     # idle between two kernels of a stream up to this counts as a device-side gap inside a step


def streams_of(gpu: list[dict]) -> list[tuple[str, list[dict]]]:
    """The events per CUDA stream (the trace's tid), each in time order, busiest stream first (the forward one)."""
    streams: dict[str, list] = defaultdict(list)
    for e in gpu:
        streams[str(e.get("tid", "?"))].append(e)
    return [(tid, sorted(es, key=lambda e: e["ts"]))
            for tid, es in sorted(streams.items(), key=lambda kv: -sum(e["dur"] for e in kv[1]))]


def by_stream(gpu: list[dict], steps: int) -> dict:
    """Per CUDA stream, busiest first: launches, kernel time and the short gaps between its kernels (<= GAP_US:
    dependent small kernels back to back; longer idle is between steps) per step. Since 12-03i the kv writes run
    on a stream of their own: what stays on the forward stream is what the step waits for."""
    out = {}
    for tid, es in streams_of(gpu):
        gaps = (b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(es, es[1:]))
        out[tid] = {"kernels": round(len(es) / steps, 1), "busy_us": round(sum(e["dur"] for e in es) / steps, 1),
                    "gaps_us": round(sum(g for g in gaps if 0 < g <= GAP_US) / steps, 1)}
    return out


WAIT_US = 3.0     # idle on the forward stream at least this long is listed with what ended just before it resumed
EDGE_US = 2.0     # ... "just before": another stream's event that ended at most this long before the resumption


def waits(gpu: list[dict], steps: int) -> dict:
    """Where the forward stream (the busiest) sits idle, summed per step by the kernel it resumes with and by what
    another stream finished just before (<= EDGE_US: presumably what it waited for, an event wait or a copy; "-"
    when nothing ended then: the CPU had not launched it yet); idle longer than GAP_US ("[step] ": between steps)
    apart. The fast path's step in 12-04 was +49 us of idle against no-spec's with +9 us of kernels: this says
    after what."""
    streams = streams_of(gpu)
    if not streams or steps <= 0:
        return {}
    fwd = streams[0][1]
    others = sorted((e for _, es in streams[1:] for e in es), key=lambda e: e["ts"] + e["dur"])
    ends = [e["ts"] + e["dur"] for e in others]
    out: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for a, b in zip(fwd, fwd[1:]):
        idle = b["ts"] - (a["ts"] + a["dur"])
        if idle < WAIT_US:
            continue
        i = bisect.bisect_right(ends, b["ts"])
        before = others[i - 1] if i and b["ts"] - ends[i - 1] <= EDGE_US else None
        key = ("[step] " if idle > GAP_US else "") + f"{b['name'][:60]} <- {before['name'][:50] if before else '-'}"
        out[key][0] += idle
        out[key][1] += 1
    rows = sorted(out.items(), key=lambda kv: -kv[1][0])
    return {k: [round(t / steps, 2), round(n / steps, 2)] for k, (t, n) in rows[:25]}


def table(a: dict, b: dict, label_a: str, label_b: str, min_us: float = 1.0) -> list[str]:
    """Markdown rows: kernels whose time per step differs by at least min_us between the two, largest first."""
    names = set(a["by_name"]) | set(b["by_name"])
    rows = []
    for n in names:
        ta, ca = a["by_name"].get(n, [0.0, 0.0])
        tb, cb = b["by_name"].get(n, [0.0, 0.0])
        if abs(tb - ta) >= min_us:
            rows.append((tb - ta, n, ta, ca, tb, cb))
    rows.sort(key=lambda r: -abs(r[0]))
    per = lambda t, c: f"{t / c:.2f}" if c else "-"
    out = [f"| kernel | {label_a} us/step (launches) | {label_b} us/step (launches) | difference us "
           f"| us per launch {label_a} / {label_b} |", "|---|---|---|---|---|"]
    out += [f"| {n[:90]} | {ta:.1f} ({ca:g}) | {tb:.1f} ({cb:g}) | {d:+.1f} | {per(ta, ca)} / {per(tb, cb)} |"
            for d, n, ta, ca, tb, cb in rows]
    out.append(f"| all (busy) | {a['busy_us']:.1f} ({a['kernels']:g}) | {b['busy_us']:.1f} ({b['kernels']:g}) "
               f"| {b['busy_us'] - a['busy_us']:+.1f} | |")
    out.append(f"| span per step | {a['span_us']:.1f} | {b['span_us']:.1f} | {b['span_us'] - a['span_us']:+.1f} | |")
    return out


def load_trace(directory: str, timeout_s: float) -> list[dict]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        files = glob.glob(os.path.join(directory, "*.trace.json.gz"))
        if files:
            time.sleep(1.0)                       # let the writer finish
            try:
                with gzip.open(files[0], "rt") as f:
                    return json.load(f).get("traceEvents", [])
            except (OSError, EOFError, json.JSONDecodeError):
                pass
        time.sleep(0.5)
    raise TimeoutError(f"no trace in {directory} after {timeout_s} s")


def profile(port: int, batch: int, steps: int, directory: str, output_len: int, position: int) -> list[dict]:
    batch_ids = prompts(batch, 16, 32000, 0)
    # The profiler's first start in a process initialises CUPTI (seconds, while decoding goes on): a short
    # warm-up profile first, so that the measured one starts at the same point of the load in each engine
    # (the attention's time grows with the KV length; a GEMM's does not).
    warm = os.path.join(directory, "warmup")
    post_raw(port, "/start_profile", {"output_dir": warm, "num_steps": 1, "activities": ["GPU"]})
    post(port, "/generate", body(batch_ids[0], 8))
    load_trace(warm, 60)
    with ThreadPoolExecutor(batch) as pool:
        futures = [pool.submit(post, port, "/generate", body(ids, output_len)) for ids in batch_ids[1:]]
        # One request streams: the profile starts once it has `position` tokens, so every engine is profiled at
        # the same KV length whatever its speed (a fixed sleep put a slower engine at shorter sequences).
        with stream_to(port, body(batch_ids[0], output_len), position):
            post_raw(port, "/start_profile", {"output_dir": directory, "num_steps": steps, "activities": ["GPU"]})
        for fut in futures:
            fut.result()
    return load_trace(directory, 60)


@contextlib.contextmanager
def stream_to(port: int, request: dict, position: int) -> Iterator[int]:
    """/generate with stream, read until the request has `position` output tokens (meta_info.completion_tokens);
    yields that count, then reads the stream to its end (the request runs on meanwhile). Raises when the stream
    ends first."""
    import urllib.request
    with urllib.request.urlopen(json_request(port, "/generate", {**request, "stream": True}), timeout=600) as resp:
        done = 0
        for line in resp:
            payload = line.decode().strip().removeprefix("data:").strip()
            if not payload or payload == "[DONE]":
                continue
            chunk = json.loads(payload)
            if "error" in chunk:          # SGLang reports a failed request inside the 200 stream
                raise RuntimeError(f"the streamed request failed: {chunk['error']}")
            done = (chunk.get("meta_info") or {}).get("completion_tokens") or done
            if done >= position:
                break
        else:
            raise RuntimeError(f"the streamed request ended at {done} tokens, before position {position}")
        yield done
        for _ in resp:
            pass


def json_request(port: int, path: str, body: dict) -> "urllib.request.Request":
    import urllib.request
    return urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json"})


def post_raw(port: int, path: str, body: dict) -> None:
    import urllib.request
    urllib.request.urlopen(json_request(port, path, body), timeout=60).read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", required=True, help="label=PORT,label=PORT (the first is the reference)")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--position", type=int, default=256,
                    help="output tokens per request when the profile starts (the same KV length in every engine)")
    ap.add_argument("--out", required=True, help="directory for the traces' summaries")
    args = ap.parse_args()
    if not 0 < args.position <= args.output_len - args.steps:
        ap.error(f"--position {args.position}: must be 1 .. output-len - steps ({args.output_len - args.steps})")
    engines = [(lab, int(port)) for lab, port in (e.split("=") for e in args.engines.split(","))]
    os.makedirs(args.out, exist_ok=True)
    store = os.path.join(args.out, "kernels.json")      # accumulates over invocations (a switch in between)
    summaries = json.load(open(store)) if os.path.exists(store) else {}
    for label, port in engines:
        directory = os.path.join("/tmp/prof", label)
        shutil.rmtree(directory, ignore_errors=True)     # a warm machine keeps /tmp: no old trace decides
        os.makedirs(directory)
        try:
            s = per_step(profile(port, args.batch, args.steps, directory, args.output_len, args.position), args.steps)
        except Exception as e:               # one line, and the other engine still runs
            print(f"KERNELS {label}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        summaries[label] = s
        print("KERNELS " + json.dumps({"label": label, "batch": args.batch, "steps": s["steps"],
                                       "kernels": s["kernels"], "busy_us": s["busy_us"], "span_us": s["span_us"],
                                       "by_stream": s["by_stream"]}))
    with open(store, "w") as f:
        json.dump(summaries, f)
    labels = list(summaries)                  # the first one stored is the reference
    for other in labels[1:]:
        print("\n".join(table(summaries[labels[0]], summaries[other], labels[0], other)))
    for label in labels:                      # where each forward stream waits (us per step, times per step)
        print(f"WAITS {label} " + json.dumps(dict(list(summaries[label].get("waits", {}).items())[:8])))

if __name__ == "__main__":
    main()
