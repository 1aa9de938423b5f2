"""Which mode the daemon's engine ran inside each measured run (run_pair.sh ROTATION=product): from the call's
results.jsonl and the daemon's database, per run of a daemon label (not nospec) the share of its decode batches that
speculated, their mean batch size and the threshold changes inside the window; then per label, shape and level.

    python3 bench/gpu/spec_share.py results.jsonl state.db --warmup 5 --seconds 10

The window is the closed loop's measured one ([start + warmup, + seconds]), else the whole run. Samples and the
rows both carry the wall clock (time.time(): the plugin's samples, loads.py's t_start / t_end)."""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict

from jsonl import rows


def window(row: dict, warmup: float, seconds: float) -> tuple[float, float]:
    if row["shape"].startswith("closed"):
        return row["t_start"] + warmup, row["t_start"] + warmup + seconds
    return row["t_start"], row["t_end"]


def share(conn: sqlite3.Connection, t0: float, t1: float) -> dict:
    """The decode batches between t0 and t1: how many, the share that speculated, their mean size; the changes."""
    batches, spec, mean_bs = conn.execute(
        "SELECT COUNT(*), SUM(steps > 0), AVG(batch_size) FROM samples WHERE t >= ? AND t < ? AND decode_only",
        (t0, t1)).fetchone()
    changes = conn.execute("SELECT COUNT(*) FROM decisions WHERE wall >= ? AND wall < ? AND old != new",
                           (t0, t1)).fetchone()[0]
    return {"batches": batches, "spec_share": round((spec or 0) / batches, 3) if batches else None,
            "mean_bs": round(mean_bs, 1) if mean_bs else None, "changes": changes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("db")
    ap.add_argument("--warmup", type=float, default=5.0, help="the closed loop's warm-up (s)")
    ap.add_argument("--seconds", type=float, default=10.0, help="the closed loop's window (s)")
    args = ap.parse_args()
    conn = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    by_level = defaultdict(list)
    for row in rows(args.results):
        if row["label"] == "nospec" or "t_start" not in row:
            continue
        got = share(conn, *window(row, args.warmup, args.seconds))
        print(f"SHARE {row['label']} {row['shape']} {row['level']} repeat {row['repeat']}: {json.dumps(got)}")
        if got["batches"]:
            by_level[(row["label"], row["shape"], row["level"])].append(got)
    for (label, shape, level), runs in sorted(by_level.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        shares = [r["spec_share"] for r in runs]
        print(f"SHARES {shape} {level} {label}: speculated {statistics.median(shares):.0%} of decode batches "
              f"(runs {min(shares):.0%}-{max(shares):.0%}), mean batch {statistics.median(r['mean_bs'] for r in runs):.1f}, "
              f"changes in the windows {sum(r['changes'] for r in runs)}")
    if not by_level:
        print("SHARES none: no run of a daemon label had decode batches in the database")


if __name__ == "__main__":
    main()
