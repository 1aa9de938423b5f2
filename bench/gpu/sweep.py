"""Concurrency sweep with the real sglang.bench_serving (called in-process, once per level).

    python3 bench/gpu/sweep.py --port 30000 --tokenizer DIR --label never --levels 1,4,16,64,128 --out sweep.jsonl
    python3 bench/gpu/sweep.py --port 30000 --tokenizer DIR --modes never=0,always=128,static5=5,bandit=policy \
        --socket /tmp/sc/ctl.sock --repeats 2 --out sweep.jsonl
Each level appends one JSON line: label, concurrency, output tok/s, requests, duration, accept length.
--modes interleaves the daemon's modes inside each level (a pin, or `policy` = unpinned), rotating
their order on every repeat, so that drift between runs does not decide a ranking.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def bench_level(args, c: int) -> dict:
    from sglang.benchmark.serving import cli_main
    n = max(args.min_prompts, args.prompts_per_client * c)
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as tmp:
        path = tmp.name
    sys.argv = ["bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(args.port),
                "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
                "--random-output-len", str(args.output_len), "--random-range-ratio", str(args.range_ratio),
                "--num-prompts", str(n), "--max-concurrency", str(c), "--tokenizer", args.tokenizer,
                "--model", args.tokenizer, "--output-file", path, "--disable-tqdm", "--seed", "1"]
    t0 = time.time()
    try:
        cli_main()
        with open(path) as f:
            res = json.loads(f.read().strip().splitlines()[-1])
    except BaseException as e:      # one failed level must not lose the others
        res = {"error": f"{type(e).__name__}: {e}"}
    finally:
        os.unlink(path)
    return {"concurrency": c, "prompts": n, "wall_s": round(time.time() - t0, 2),
            "output_tok_s": res.get("output_throughput"), "completed": res.get("completed"),
            "duration_s": res.get("duration"), "accept_length": res.get("accept_length"), "error": res.get("error")}


def apply_mode(socket: str, setting: str) -> None:
    cli = [sys.executable, "-m", "controller.cli", "--socket", socket]
    cmd = ["threshold", "unpin"] if setting == "policy" else ["threshold", "pin", setting]
    subprocess.run(cli + cmd, check=True, capture_output=True)


def record(out: str, row: dict) -> None:
    print("SWEEP " + json.dumps(row), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--tokenizer")
    ap.add_argument("--label")
    ap.add_argument("--modes", help="label=pin|policy,...: interleave the daemon's modes inside each level")
    ap.add_argument("--socket", help="the daemon's control socket (with --modes)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--show", metavar="LABEL", help="print LABEL's levels from --out (concurrency:tok/s) and exit")
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--out", required=True)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--range-ratio", type=float, default=1.0, help="bench_serving --random-range-ratio")
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--prompts-per-client", type=int, default=3)
    args = ap.parse_args()
    if args.show:
        rows = [json.loads(line) for line in open(args.out)]
        print(" ".join(f"{r['concurrency']}:{r['output_tok_s'] or 0:.0f}" for r in rows
                       if r.get("label") == args.show and "concurrency" in r))
        return
    if not (args.port and args.tokenizer and (args.label or (args.modes and args.socket))):
        ap.error("--port, --tokenizer and --label (or --modes with --socket) are required for a sweep")
    modes = [tuple(m.split("=", 1)) for m in args.modes.split(",")] if args.modes else [(args.label, None)]
    for c in [int(x) for x in args.levels.split(",")]:
        for rep in range(args.repeats):
            shift = rep % len(modes)
            for label, setting in modes[shift:] + modes[:shift]:
                if setting is not None:
                    apply_mode(args.socket, setting)
                record(args.out, {"label": label, "repeat": rep, **bench_level(args, c)})


if __name__ == "__main__":
    main()
