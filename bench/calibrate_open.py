"""Open-loop calibration: bench_serving runs measured on a GPU next to the simulator replaying them.

    python bench/calibrate_open.py [--results bench/results/h200-2026-12-01b/call2-results.jsonl]
        [--profile bench/results/h200-2026-12-01b/h200-7b-open.toml] [--seconds 6] [--out FILE.md]
The measured rows are bench/gpu/loads.py's open-loop lines (sglang.bench_serving --request-rate R,
rate x seconds requests, seed 100 x repeat + R). The simulator replays the same requests (same
seeds: the same arrivals, prompt and output lengths, controller.sim.finite) through the profile,
with the same number of repeats, and reports what bench_serving reports: output tok/s over the
whole run (drain included), median TPOT, median E2E. Modes: fixed thresholds (never 0, always =
the profile's cap, static5 5); the learners (ema, bandit) carried state across the measured runs
and are not replayed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.finite import evaluate_finite  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402

DIR = "bench/results/h200-2026-12-01b"
METRICS = (("tok/s", "tok_s", "tok_s"), ("TPOT ms", "tpot_ms", "tpot_ms_median"), ("E2E ms", "e2e_ms", "e2e_ms_median"))
TOLERANCE = 0.10


def measured_rows(path: str) -> dict[tuple[float, str], list[dict]]:
    out: dict[tuple[float, str], list[dict]] = {}
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("shape") == "open" and "tok_s" in r:
                out.setdefault((float(r["level"]), r["label"]), []).append(r)
    return out


def table(measured: dict, result: dict, modes: list[str]) -> tuple[list[str], dict[str, int]]:
    """Markdown lines per rate and mode, and how many cells land within 10 %."""
    head = ["rate", "mode", "runs"] + [f"{name} {w}" for name, _, _ in METRICS for w in ("meas.", "spread", "sim", "ratio")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    within = {"yes": 0, "no": 0}
    for row in result["rows"]:
        for mode in modes:
            runs = measured.get((float(row["rate"]), mode))
            if not runs:
                continue
            sim = row["modes"][mode]
            cells = [f"{row['rate']:g}", mode, str(len(runs))]
            for _, mkey, skey in METRICS:
                vals = [r[mkey] for r in runs if r.get(mkey) is not None]
                m, s = statistics.median(vals), sim[skey]
                ratio = s / m if m and s is not None else None
                if ratio is not None:
                    within["yes" if abs(ratio - 1) <= TOLERANCE else "no"] += 1
                mark = "" if ratio is None or abs(ratio - 1) <= TOLERANCE else " *"
                cells += [f"{m:,.4g}", f"{min(vals):,.4g}-{max(vals):,.4g}", f"{s:,.4g}",
                          f"{ratio:.3f}{mark}" if ratio is not None else "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines, within


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=f"{DIR}/call2-results.jsonl")
    ap.add_argument("--profile", default=f"{DIR}/h200-7b-open.toml")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of arrivals per run (run_modes.sh: 6)")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()
    measured = measured_rows(args.results)
    profile = load_profile(args.profile)
    rates = sorted({rate for rate, _ in measured})
    repeats = max(len(v) for v in measured.values())
    thresholds = {"never": 0, "always": profile.max_batch_size, "static5": 5}
    result = evaluate_finite(profile, rates, args.seconds, seeds=range(repeats), thresholds=thresholds,
                             seed_of=lambda rate, rep: 100 * rep + int(rate),     # bench/gpu/loads.py's seeds
                             at_least=8)                                          # and its --num-prompts floor
    lines, within = table(measured, result, list(thresholds))
    text = "\n".join([
        f"# Open-loop calibration: {Path(args.results).name} vs the simulator on profile {profile.name}", "",
        f"Command: `python bench/calibrate_open.py --results {args.results} --profile {args.profile} "
        f"--seconds {args.seconds:g}`", "",
        f"Each rate: {repeats} bench_serving runs per mode (seeds 100 x repeat + rate), the simulator replaying "
        "the same requests (arrivals, prompt and output lengths) once per seed; medians over the runs. "
        "spread: the measured runs' range. ratio: simulated / measured; * marks a ratio off by more than 10 %.", "",
        *lines, "",
        f"{within['yes']} of {within['yes'] + within['no']} cells within 10 %.", ""])
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
