"""Greedy generation against a running SGLang server, compared token for token.

    python3 bench/gpu/greedy.py --port 30000 --label fast-off --prompts 200 --save /tmp/a.json \
        [--chain MODEL/next.json] [--reference /tmp/nospec.json] [--toggle 0,128 --toggle-ms 10] --out results.jsonl

--chain: the crafted model's successor table: every output must follow it exactly.
--reference: outputs saved by an earlier run (e.g. an engine without speculation): must be identical.
--toggle: while generating, switch the plugin's threshold between these values every --toggle-ms
(afterwards it is left at the first value).
Appends one JSON line (label, prompts, mismatching prompts, first mismatch, accept length, toggles).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def post(port: int, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


def generate(port: int, ids: list[int], new_tokens: int) -> tuple[list[int], float | None]:
    out = post(port, "/generate", {"input_ids": ids, "sampling_params": {
        "temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}})
    return out["output_ids"], out.get("meta_info", {}).get("spec_accept_length")


def set_threshold(port: int, value: int) -> bool:
    return updated(post(port, "/set_internal_state",
                        {"server_args": {"speculative_disable_batch_threshold": value}}, 30))


def updated(answer) -> bool:
    """SGLang answers set_internal_state with {"updated": ...} or a list of those (or of bools)."""
    items = answer if isinstance(answer, list) else [answer]
    flags = [item.get("updated") if isinstance(item, dict) else item for item in items]
    return bool(flags) and all(flag is True for flag in flags)


def generate_all(port: int, batch: list[list[int]], new_tokens: list[int], concurrency: int,
                 toggle: list[int] | None = None, toggle_ms: float = 10.0) -> dict:
    """Every prompt, greedily, from `concurrency` clients; with `toggle`, the threshold cycles through
    those values every `toggle_ms` meanwhile. Outputs in prompt order, accept lengths, changes made."""
    counts = {"sent": 0, "refused": 0}
    stop = threading.Event()

    def toggler() -> None:
        i = 0
        while not stop.is_set():
            counts["sent" if set_threshold(port, toggle[i % len(toggle)]) else "refused"] += 1
            i += 1
            time.sleep(toggle_ms / 1000)

    thread = threading.Thread(target=toggler, daemon=True) if toggle else None
    if thread:
        thread.start()
    t_start = time.time()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda job: generate(port, *job), zip(batch, new_tokens)))
    t_end = time.time()
    stop.set()
    if thread:
        thread.join()
        # leave the engine at the first value: a daemon pinned there does not resend a pin it already holds
        counts["sent" if set_threshold(port, toggle[0]) else "refused"] += 1
    return {"outputs": [r[0] for r in results], "accepts": [r[1] for r in results if r[1]],
            "t_start": t_start, "t_end": t_end, **counts}


def chain(nxt: list[int], last: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        last = nxt[last]
        out.append(last)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--output-len-min", type=int, default=None,
                    help="outputs uniform in [this, --output-len] (seeded): requests end and arrive continuously")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--chain")
    ap.add_argument("--reference")
    ap.add_argument("--save")
    ap.add_argument("--toggle")
    ap.add_argument("--toggle-ms", type=float, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    batch = prompts(args.prompts, args.input_len, args.vocab, args.seed)
    rnd = random.Random(args.seed + 1)
    lengths = [rnd.randint(args.output_len_min, args.output_len) if args.output_len_min else args.output_len
               for _ in batch]
    run = generate_all(args.port, batch, lengths, args.concurrency,
                       [int(v) for v in args.toggle.split(",")] if args.toggle else None, args.toggle_ms)
    outputs, accepts = run["outputs"], run["accepts"]
    expected = None
    if args.chain:
        nxt = json.load(open(args.chain))
        expected = [chain(nxt, ids[-1], n) for ids, n in zip(batch, lengths)]
    elif args.reference:
        expected = json.load(open(args.reference))
    bad = [i for i, out in enumerate(outputs) if expected is not None and out != expected[i]]
    first = None
    if bad:
        i = bad[0]
        pos = next((k for k, (a, b) in enumerate(zip(outputs[i], expected[i])) if a != b),
                   min(len(outputs[i]), len(expected[i])))
        first = {"prompt": i, "position": pos, "got": outputs[i][pos:pos + 4], "expected": expected[i][pos:pos + 4]}
    if args.save:
        json.dump(outputs, open(args.save, "w"))
    row = {"label": args.label, "prompts": len(batch), "concurrency": args.concurrency, "output_len": args.output_len,
           "output_len_min": args.output_len_min,
           "compared_with": "chain" if args.chain else ("reference" if args.reference else None),
           "mismatching_prompts": len(bad), "first_mismatch": first, "wall_s": round(run["t_end"] - run["t_start"], 2),
           "accept_length": round(sum(accepts) / len(accepts), 3) if accepts else None,
           "threshold_changes": run["sent"], "threshold_refused": run["refused"],
           "t_start": run["t_start"], "t_end": run["t_end"], "output_tokens": sum(map(len, outputs))}
    print("GREEDY " + json.dumps(row), flush=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--updated":   # for shell scripts: SGLang's answer -> True/False
        print("updated", updated(json.loads(sys.argv[2])))
        raise SystemExit(0)
    main()
