"""Concurrency sweep with the real sglang.bench_serving (called in-process, once per level).

    python3 bench/gpu/sweep.py --port 30000 --tokenizer DIR --label never --levels 1,4,16,64,128 --out sweep.jsonl
Each level appends one JSON line: label, concurrency, output tok/s, requests, duration, accept length.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--tokenizer")
    ap.add_argument("--label")
    ap.add_argument("--show", metavar="LABEL", help="print LABEL's levels from --out (concurrency:tok/s) and exit")
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--out", required=True)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--min-prompts", type=int, default=8)
    ap.add_argument("--prompts-per-client", type=int, default=3)
    args = ap.parse_args()
    if args.show:
        rows = [json.loads(line) for line in open(args.out)]
        print(" ".join(f"{r['concurrency']}:{r['output_tok_s'] or 0:.0f}" for r in rows
                       if r.get("label") == args.show and "concurrency" in r))
        return
    if not (args.port and args.tokenizer and args.label):
        ap.error("--port, --tokenizer and --label are required for a sweep")
    from sglang.benchmark.serving import cli_main

    for c in [int(x) for x in args.levels.split(",")]:
        n = max(args.min_prompts, args.prompts_per_client * c)
        with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as tmp:
            path = tmp.name
        sys.argv = ["bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(args.port),
                    "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
                    "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0",
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
        row = {"label": args.label, "concurrency": c, "prompts": n, "wall_s": round(time.time() - t0, 2),
               "output_tok_s": res.get("output_throughput"), "completed": res.get("completed"),
               "duration_s": res.get("duration"), "accept_length": res.get("accept_length"),
               "error": res.get("error")}
        print("SWEEP " + json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
