"""Turn a daemon database's decode samples into a simulator profile (measured step-time curves).

    python3 bench/gpu/db_to_profile.py STATE_DB OUT.toml --name h200-2b6 [--source "..."]
Per batch size and mode, the median step seconds of decode-only samples; batch sizes seen in
both modes become the table's points (at least two needed). The accept length is the measured
mean over speculative batches; K is the largest step count seen.
"""
from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controller.sim.profile import load_profile  # noqa: E402


def measure(db_path: str, min_samples: int = 5) -> dict:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = db.execute("SELECT batch_size, steps > 0, step_s FROM samples WHERE decode_only = 1 AND step_s > 0").fetchall()
    by: dict[tuple[int, bool], list[float]] = {}
    for bs, spec, step in rows:
        by.setdefault((bs, bool(spec)), []).append(step)
    both = sorted(bs for (bs, spec), v in by.items()
                  if spec and len(v) >= min_samples and len(by.get((bs, False), [])) >= min_samples)
    k, accept = db.execute("SELECT max(steps), sum(tokens) * 1.0 / sum(batch_size) FROM samples "
                           "WHERE steps > 0 AND decode_only = 1").fetchone()
    return {"batch_size": both,
            "off": [statistics.median(by[(b, False)]) for b in both],
            "spec": [statistics.median(by[(b, True)]) for b in both],
            "spec_steps": k, "accept": accept, "samples": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("out")
    ap.add_argument("--name", required=True)
    ap.add_argument("--source", default="measured by spec-controller's telemetry")
    ap.add_argument("--min-samples", type=int, default=5)
    args = ap.parse_args()
    m = measure(args.db, args.min_samples)
    if len(m["batch_size"]) < 2 or not m["spec_steps"]:
        raise SystemExit(f"db_to_profile: need >= 2 batch sizes seen in both modes, got {m['batch_size']}")
    fmt = lambda xs: ", ".join(f"{x:.6g}" for x in xs)
    text = f'''# Measured: {m["samples"]} decode samples; median step seconds per batch size and mode.
name = "{args.name}"
description = "measured step-time curves ({args.source})"
source = "{args.source}"
max_batch_size = {max(m["batch_size"])}
spec_steps = {m["spec_steps"]}

[step_time]
batch_size = [{", ".join(map(str, m["batch_size"]))}]
off  = [{fmt(m["off"])}]
spec = [{fmt(m["spec"])}]

[acceptance]
mean_accept_length = {min(m["accept"], m["spec_steps"] + 1):.4f}
spread = 0.1
'''
    Path(args.out).write_text(text)
    load_profile(args.out)            # the result must pass the profile schema
    print(f"wrote {args.out}: {len(m['batch_size'])} batch sizes, K={m['spec_steps']}, accept {m['accept']:.3f}")


if __name__ == "__main__":
    main()
