"""Does the daemon's view match what the clients received? (TP runs: telemetry must come from one rank.)

    python3 bench/gpu/tokens_check.py DB RESULTS.jsonl LABEL [--k 3]
Takes greedy.py's row LABEL (its wall-clock window, requests and output tokens) and the daemon's
samples in that window. Each request's first token comes from its prefill, the rest from decode
batches, and a final verify may accept up to K tokens past max_new_tokens that the client never sees:
    client decode tokens <= daemon tokens <= client decode tokens + K x requests,
and no decode batch larger than the number of clients. A second reporting rank would double the count. Prints one JSON line; exit 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys


def check(db_path: str, row: dict, k: int, slack_s: float = 1.0) -> dict:
    db = sqlite3.connect(db_path)
    n, tokens, batches, largest = db.execute(
        "SELECT count(*), coalesce(sum(tokens), 0), coalesce(sum(batch_size), 0), coalesce(max(batch_size), 0) "
        "FROM samples WHERE t >= ? AND t <= ?", [row["t_start"], row["t_end"] + slack_s]).fetchone()
    requests = row["prompts"]
    client_decode = row["output_tokens"] - requests
    ok = client_decode <= tokens <= client_decode + k * requests and largest <= row.get("concurrency", largest)
    return {"label": row["label"], "samples": n, "daemon_tokens": tokens, "client_decode_tokens": client_decode,
            "overshoot_allowed": k * requests, "request_steps": batches, "largest_batch": largest,
            "clients": row.get("concurrency"), "match": ok}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("results")
    ap.add_argument("label")
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.results)]
    row = [r for r in rows if r.get("label") == args.label and "t_start" in r][-1]
    out = check(args.db, row, args.k)
    print("TOKENS " + json.dumps(out), flush=True)
    sys.exit(0 if out["match"] else 1)


if __name__ == "__main__":
    main()
