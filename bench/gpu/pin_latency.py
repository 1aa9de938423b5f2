"""Time from `specctl threshold pin N` to the first decode batch that uses it (under load).

    python3 bench/gpu/pin_latency.py --db DB --socket SOCK --port 30000 --tokenizer DIR [--toggles 20]
Runs a background bench_serving load at concurrency 16 (more prompts than the toggles can use: it
is stopped afterwards; a toggle made when no request runs has no "first batch"), flips the pin
between 0 and --high, then finds in the daemon's sample table the first batch after each command in the new mode. Two
figures: from the start of the `specctl` process (includes the CLI's own start-up), and from the
daemon's recorded pin decision (the daemon -> set_internal_state -> scheduler -> batch path).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import time


def wait_for_load(db: sqlite3.Connection, load: subprocess.Popen, started: float, timeout: float = 120.0) -> None:
    """Until this load's decode batches of >= 8 requests flow (bench_serving first builds its prompts:
    a fixed sleep toggled before any request ran, which measured the load's start, not the pin; and
    batches from before `started` are an earlier run's)."""
    end = time.time() + timeout
    while time.time() < end:
        if load.poll() is not None:
            sys.exit("pin_latency: the background load ended before it started")
        recent = db.execute("SELECT count(*) FROM samples WHERE t > ? AND batch_size >= 8",
                            [max(started, time.time() - 2.0)]).fetchone()[0]
        if recent >= 20:
            time.sleep(2.0)             # past the ramp-up
            return
        time.sleep(0.5)
    sys.exit("pin_latency: no decode batches of >= 8 requests within %.0f s" % timeout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--toggles", type=int, default=20)
    ap.add_argument("--high", type=int, default=128, help="the speculating pin (<= max running requests)")
    args = ap.parse_args()
    started = time.time()
    load = subprocess.Popen([sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host",
                             "127.0.0.1", "--port", str(args.port), "--dataset-name", "random-ids",
                             "--random-input-len", "64", "--random-output-len", "512", "--random-range-ratio", "1.0",
                             "--num-prompts", "3000", "--max-concurrency", "16", "--tokenizer", args.tokenizer,
                             "--model", args.tokenizer, "--disable-tqdm"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    db = sqlite3.connect(args.db)
    wait_for_load(db, load, started)
    marks = []
    for i in range(args.toggles):
        value = args.high if i % 2 == 0 else 0
        t = time.time()
        if load.poll() is not None:
            sys.exit(f"pin_latency: the background load ended before toggle {i}")
        rc = subprocess.run([sys.executable, "-m", "controller.cli", "--socket", args.socket, "threshold", "pin",
                             str(value)], capture_output=True).returncode
        marks.append((t, value, time.time() - t, rc))
        time.sleep(1.0)
    load.terminate()
    time.sleep(1.5)
    lat, from_daemon = [], []
    for t, value, cmd_s, rc in marks:
        if rc != 0:
            continue
        row = db.execute("SELECT t FROM samples WHERE t > ? AND (steps > 0) = ? ORDER BY t LIMIT 1",
                         [t, value > 0]).fetchone()
        pinned = db.execute("SELECT t FROM decisions WHERE t >= ? AND reason = ? ORDER BY t LIMIT 1",
                            [t, f"pinned at {value}"]).fetchone()
        if row:
            lat.append(row[0] - t)
            if pinned and row[0] >= pinned[0]:
                from_daemon.append(row[0] - pinned[0])
    out = {"toggles": len(marks), "measured": len(lat), "command_s_median": statistics.median(m[2] for m in marks),
           "daemon_to_first_batch_ms_each": [round(1e3 * v, 1) for v in from_daemon]}
    for name, values in (("command", lat), ("daemon", from_daemon)):
        if values:
            out[f"{name}_to_first_batch_ms"] = {"median": round(1e3 * statistics.median(values), 1),
                                                "p90": round(1e3 * sorted(values)[int(0.9 * (len(values) - 1))], 1),
                                                "max": round(1e3 * max(values), 1), "n": len(values)}
    print("PINLAT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
