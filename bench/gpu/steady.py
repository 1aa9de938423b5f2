"""Decode throughput at a fixed batch size: C requests started together, short prompts, long outputs.

    python3 bench/gpu/steady.py --port 30000 --label fastoff --levels 1,4,16,64,128 --out results.jsonl
All C requests run from the first step to the last, so the engine decodes batches of exactly C for
nearly the whole run (one short prefill at the start): tokens / wall time is the decode throughput
at batch size C. Each level runs --repeats times; the best run is reported (and all of them).
"""
from __future__ import annotations

import argparse
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

from greedy import post


def one_level(port: int, c: int, input_len: int, output_len: int, seed: int) -> tuple[float, int]:
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(3, 32000) for _ in range(input_len)] for _ in range(c)]
    body = lambda ids: {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": output_len,
                                                              "ignore_eos": True}}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(c) as pool:
        outs = list(pool.map(lambda ids: post(port, "/generate", body(ids)), prompts))
    wall = time.perf_counter() - t0
    return wall, sum(len(o["output_ids"]) for o in outs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--label")
    ap.add_argument("--show", metavar="LABEL", help="print LABEL's levels from --out (batch:tok/s) and exit")
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.show:
        rows = [json.loads(line) for line in open(args.out)]
        print(" ".join(f"{r['batch_size']}:{r['tok_s']:.0f}" for r in rows
                       if r.get("kind") == "steady" and r["label"] == args.show))
        return
    if not (args.port and args.label):
        ap.error("--port and --label are required")
    one_level(args.port, 4, args.input_len, 32, 0)          # warm-up (first-use JIT, allocator)
    for c in [int(x) for x in args.levels.split(",")]:
        runs = []
        for r in range(args.repeats):
            wall, tokens = one_level(args.port, c, args.input_len, args.output_len, 100 * c + r)
            runs.append(round(tokens / wall, 1))
        row = {"label": args.label, "kind": "steady", "batch_size": c, "output_len": args.output_len,
               "tok_s": max(runs), "runs": runs}
        print("STEADY " + json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
