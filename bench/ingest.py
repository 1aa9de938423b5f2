"""Ingest throughput of the SQLite writer thread (a benchmark, not a test).

    python bench/ingest.py [--samples 500000] [--batch 256]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from state.db import open_store  # noqa: E402
from state.writer import Writer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    rows = [(i * 0.001, 1 + i % 64, 3 if i % 2 else 0, 2 * (1 + i % 64), 0.01, 1) for i in range(args.samples)]
    with tempfile.TemporaryDirectory() as d:
        db = open_store(Path(d) / "bench.db")
        w = Writer(db).start()
        t0 = time.perf_counter()
        for i in range(0, len(rows), args.batch):
            while not w.samples(rows[i:i + args.batch]):
                w.dropped -= 1          # the benchmark measures the writer, so it waits instead of dropping
                time.sleep(0.001)
        w.flush(600)
        elapsed = time.perf_counter() - t0
        n = db.execute("SELECT count(*) FROM samples").fetchone()[0]
        w.stop()
    print(f"command: python bench/ingest.py --samples {args.samples} --batch {args.batch}")
    print(f"| samples | batch | seconds | samples/s |\n|---|---|---|---|\n| {n} | {args.batch} | {elapsed:.2f} | "
          f"{n / elapsed:,.0f} |")


if __name__ == "__main__":
    main()
