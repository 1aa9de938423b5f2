"""Concurrency sweep with the real sglang.bench_serving (called in-process, once per level).

    python3 bench/gpu/sweep.py --port 30000 --tokenizer DIR --label never --levels 1,4,16,64,128 --out sweep.jsonl
    python3 bench/gpu/sweep.py --port 30000 --tokenizer DIR --modes never=0,always=128,static5=5,bandit=policy \
        --socket /tmp/sc/ctl.sock --repeats 2 --out sweep.jsonl
Each level appends one JSON line: label, concurrency, output tok/s, requests, duration, its time window;
with --db, one more line per level at the end: the daemon's measured spec share and accept length in it.
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

from jsonl import emit


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
    return {"concurrency": c, "prompts": n, "t_start": t0, "t_end": time.time(), "wall_s": round(time.time() - t0, 2),
            "output_tok_s": res.get("output_throughput"), "completed": res.get("completed"),
            "duration_s": res.get("duration"), "server_accept_length": res.get("accept_length"),
            "error": res.get("error")}


def measured(db_path: str, rows: list[dict]) -> list[dict]:
    """What the daemon recorded inside each level's window: the share of decode batches that
    speculated (shows the mode took effect) and their mean accept length (bench_serving's own
    figure is the server's running average, not this level's)."""
    import sqlite3
    time.sleep(1.5)                     # the daemon's writer commits in batches
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    out = []
    for r in rows:
        n, spec, acc = db.execute("SELECT count(*), avg(steps > 0), avg(CASE WHEN steps > 0 THEN 1.0 * tokens / "
                                  "batch_size END) FROM samples WHERE t BETWEEN ? AND ?",
                                  [r["t_start"], r["t_end"]]).fetchone()
        out.append({"label": r["label"], "repeat": r["repeat"], "measured_concurrency": r["concurrency"],
                    "batches": n, "spec_share": None if spec is None else round(spec, 3),
                    "accept_measured": None if acc is None else round(acc, 3)})
    return out


def apply_mode(socket: str, setting: str) -> None:
    cli = [sys.executable, "-m", "controller.cli", "--socket", socket]
    cmd = ["threshold", "unpin"] if setting == "policy" else ["threshold", "pin", setting]
    subprocess.run(cli + cmd, check=True, capture_output=True)


def record(out: str, row: dict) -> None:
    emit("SWEEP", row, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--tokenizer")
    ap.add_argument("--label")
    ap.add_argument("--modes", help="label=pin|policy,...: interleave the daemon's modes inside each level")
    ap.add_argument("--socket", help="the daemon's control socket (with --modes)")
    ap.add_argument("--db", help="the daemon's database: add each level's measured spec share and accept length")
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
                       if r.get("label") == args.show and "output_tok_s" in r))
        return
    if not (args.port and args.tokenizer and (args.label or (args.modes and args.socket))):
        ap.error("--port, --tokenizer and --label (or --modes with --socket) are required for a sweep")
    modes = [tuple(m.split("=", 1)) for m in args.modes.split(",")] if args.modes else [(args.label, None)]
    rows = []
    for c in [int(x) for x in args.levels.split(",")]:
        for rep in range(args.repeats):
            shift = rep % len(modes)
            for label, setting in modes[shift:] + modes[:shift]:
                if setting is not None:
                    apply_mode(args.socket, setting)
                rows.append({"label": label, "repeat": rep, **bench_level(args, c)})
                record(args.out, rows[-1])
    if args.db:                         # one more line per level: what the daemon measured in its window
        for r in measured(args.db, rows):
            record(args.out, r)


if __name__ == "__main__":
    main()
