"""bench/gpu/spec_share.py: which mode each measured run's decode batches took, read from a real database of the
daemon's schema (state.migrations) and a results file as loads.py writes it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import sqlite_utils

from state.migrations import migrate

ROOT = Path(__file__).resolve().parents[1]


def test_each_runs_window_counts_only_its_own_decode_batches(tmp_path):
    db = sqlite_utils.Database(tmp_path / "state.db")
    migrate(db)
    t0 = 1000.0
    samples = []
    for k in range(100):       # closed run 1000-1020: off during the warm-up (0-5 s), speculating in the window
        t = t0 + k * 0.2
        samples.append({"t": t, "batch_size": 8, "steps": 3 if 5 <= t - t0 < 15 else 0, "tokens": 16,
                        "step_s": 0.01, "decode_only": 1})
    for k in range(10):        # mixed (prefill) batches inside the window: not decode batches
        samples.append({"t": t0 + 6 + k * 0.1, "batch_size": 8, "steps": 0, "tokens": 8, "step_s": 0.02,
                        "decode_only": 0})
    for k in range(40):        # steady run 1030-1034: a quarter speculated, batch 48
        samples.append({"t": t0 + 30 + k * 0.1, "batch_size": 48, "steps": 3 if k % 4 == 0 else 0, "tokens": 60,
                        "step_s": 0.01, "decode_only": 1})
    db["samples"].insert_all(samples)
    db["decisions"].insert_all([
        {"t": 1.0, "wall": t0 + 2, "old": 0, "new": 9, "policy": "bandit", "reason": "r", "exploratory": 0},
        {"t": 2.0, "wall": t0 + 7, "old": 9, "new": 12, "policy": "bandit", "reason": "r", "exploratory": 0}])
    db.conn.close()
    rows = [{"label": "nospec", "shape": "closed", "level": 8, "repeat": 0, "t_start": t0, "t_end": t0 + 20},
            {"label": "bandit", "shape": "closed", "level": 8, "repeat": 0, "t_start": t0, "t_end": t0 + 20},
            {"label": "always", "shape": "steady", "level": 48, "repeat": 0, "t_start": t0 + 30, "t_end": t0 + 34}]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(ROOT / "bench/gpu/spec_share.py"), str(tmp_path / "r.jsonl"),
                          str(tmp_path / "state.db"), "--warmup", "5", "--seconds", "10"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    got = {line.split(":")[0]: json.loads(line.split(": ", 1)[1]) for line in out.splitlines()
           if line.startswith("SHARE ")}
    assert set(got) == {"SHARE bandit closed 8 repeat 0", "SHARE always steady 48 repeat 0"}   # not nospec's
    assert got["SHARE bandit closed 8 repeat 0"] == {"batches": 50, "spec_share": 1.0, "mean_bs": 8.0, "changes": 1}
    assert got["SHARE always steady 48 repeat 0"] == {"batches": 40, "spec_share": 0.25, "mean_bs": 48.0,
                                                      "changes": 0}
    assert "SHARES closed 8 bandit: speculated 100% of decode batches (runs 100%-100%), mean batch 8.0" in out
