"""The product against the better of its two alternatives (run_pair.sh ROTATION=product): per shape and level, the
no-spec engine, always-on and the bandit (tok/s median of the runs, their spread), the bandit / the better of the two
(ratio of medians) and the bandit / no-spec per pair (the runs of one repeat: same seed, nearest in time).

    python3 bench/gpu/product_table.py call1-results.jsonl call3-results.jsonl ...

Open-loop rows add median TPOT and E2E (ms) of each label. Several files (calls of one chain) pool their runs; a
pair is the same file's same repeat."""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from jsonl import rows

LABELS = ("nospec", "always", "bandit")


def load(paths: list[str]) -> dict:
    """(shape, level) -> label -> [(file index, repeat, row)]."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for i, path in enumerate(paths):
        for row in rows(path):
            if row.get("label") in LABELS and row.get("tok_s"):
                out[(row["shape"], float(row["level"]))][row["label"]].append((i, row["repeat"], row))
    return out


def cell(runs: list) -> str:
    vals = [r["tok_s"] for _, _, r in runs]
    return f"{statistics.median(vals):,.0f} ({min(vals):,.0f}-{max(vals):,.0f}, n={len(vals)})"


def table(paths: list[str]) -> list[str]:
    data = load(paths)
    lines = ["| shape | level | no-spec | always | bandit | bandit / better | bandit / no-spec, per pair | "
             "TPOT ms n / a / b | E2E ms n / a / b |", "|---|---|---|---|---|---|---|---|---|"]
    for (shape, level), by in sorted(data.items()):
        if not all(by.get(k) for k in LABELS):
            continue
        med = {k: statistics.median(r["tok_s"] for _, _, r in by[k]) for k in LABELS}
        nospec = {(i, rep): r["tok_s"] for i, rep, r in by["nospec"]}
        pairs = sorted(r["tok_s"] / nospec[(i, rep)] for i, rep, r in by["bandit"] if (i, rep) in nospec)
        lat = {k: [statistics.median(r[f] for _, _, r in by[k]) if all(f in r for _, _, r in by[k]) else None
                   for f in ("tpot_ms", "e2e_ms")] for k in LABELS}
        tpot, e2e = (" / ".join("-" if lat[k][j] is None else f"{lat[k][j]:.1f}" for k in LABELS) for j in (0, 1))
        pair_text = (f"{statistics.median(pairs):.3f} ({pairs[0]:.3f}-{pairs[-1]:.3f})" if pairs else "-")
        lines.append(f"| {shape} | {level:g} | {cell(by['nospec'])} | {cell(by['always'])} | {cell(by['bandit'])} | "
                     f"**{med['bandit'] / max(med['nospec'], med['always']):.3f}** | {pair_text} | {tpot} | {e2e} |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: product_table.py results.jsonl [results.jsonl ...]")
    print("\n".join(table(sys.argv[1:])))
