"""Soak (a benchmark, not a test): the daemon on the simulator at a fast clock, the database's size and
each table's rows sampled as it runs, to show that every table and the file stay bounded.

    python bench/soak.py [--minutes 6] [--speed 80] [--every 20]

Writes bench/results/soak.md. The default retention applies: raw samples for 3600 engine-seconds
(45 s of wall time at 80x), policy state the newest 48 checkpoints plus one per hour, decisions
and events by age and a row cap each.
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.daemon_proc import DaemonProc  # noqa: E402

TABLES = ("samples", "aggregates", "decisions", "policy_state", "events", "settings")


def measure(d: DaemonProc) -> dict:
    size = sum(p.stat().st_size for p in d.dir.glob("state.db*") if p.name != "state.db.lock")
    conn = sqlite3.connect(f"file:{d.db}?mode=ro", uri=True, timeout=10)
    try:
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        windows = conn.execute("SELECT count(DISTINCT window_start), max(window_start) - min(window_start) "
                               "FROM aggregates").fetchone()
        engine_t = conn.execute("SELECT max(t) FROM samples").fetchone()[0] or 0.0
    finally:
        conn.close()
    return {"size": size, "rows": rows, "windows": windows, "t": engine_t}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--speed", type=float, default=80.0)
    ap.add_argument("--every", type=float, default=20.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    d = DaemonProc(work, "--trace", "load-steps", "--profile", "crossover-b", speed=args.speed)
    points = []
    try:
        d.wait_socket(90)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.every)
            points.append((time.monotonic() - t0, measure(d)))
        code = d.stop()
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
    lines = [f"command: python bench/soak.py --minutes {args.minutes:g} --speed {args.speed:g} --every {args.every:g}"
             f"  (simulator, trace load-steps, default retention; {time.strftime('%Y-%m-%d')}; daemon exit {code})", "",
             "| wall s | engine s | db + wal MB | " + " | ".join(TABLES) + " | rollup windows (span s) |",
             "|---" * (4 + len(TABLES)) + "|"]
    for wall, m in points:
        span = m["windows"][1] or 0
        lines.append(f"| {wall:.0f} | {m['t']:.0f} | {m['size'] / 1e6:.2f} | "
                     + " | ".join(str(m["rows"][t]) for t in TABLES) + f" | {m['windows'][0]} ({span:.0f}) |")
    half = len(points) // 2
    first, second = max(m["size"] for _, m in points[:half]), max(m["size"] for _, m in points[half:])
    span = points[-1][1]["windows"]
    lines += ["", f"largest database in the first half {first / 1e6:.2f} MB, in the second half {second / 1e6:.2f} MB; "
              f"rollup windows: {span[0]} distinct over a span of {span[1] or 0:.0f} engine-seconds "
              f"({(span[1] or 0) / 10 + 1:.0f} possible windows of 10 s)."]
    last = points[-1][1]
    per_s = {t: last["rows"][t] / max(last["t"] - points[0][1]["t"] + args.every * args.speed, 1.0)
             for t in ("aggregates", "decisions")}
    lines.append(f"Aggregates and decisions are still younger than their retention (7 and 30 days of engine time): "
                 f"at this rate they level off at ~{per_s['aggregates'] * 7 * 86400:,.0f} and "
                 f"~{min(per_s['decisions'] * 30 * 86400, 200_000):,.0f} rows (the decisions' cap is 200,000).")
    out = ROOT / "bench" / "results" / "soak.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
