import random
import subprocess
import sys
from pathlib import Path

import pytest

from controller.sim.profile import load_profile
from state.db import open_store

ROOT = Path(__file__).resolve().parent.parent


def test_measured_samples_become_a_valid_profile(tmp_path):
    db = open_store(tmp_path / "s.db")
    rng = random.Random(0)
    rows = []
    for bs in (1, 8, 32):
        for spec in (False, True):
            for i in range(20):
                step = (0.01 + 0.001 * bs) * (2.0 if spec else 1.0) * (1 + 0.01 * rng.random())
                rows.append((i * 0.1, bs, 3 if spec else 0, round(bs * 2.5) if spec else bs, step, 1))
    rows.append((9.0, 64, 0, 64, 0.5, 1))                 # seen in one mode only: left out
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    out = tmp_path / "h.toml"
    res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/db_to_profile.py"), str(tmp_path / "s.db"),
                          str(out), "--name", "h-test"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    prof = load_profile(str(out))
    assert prof.batch_sizes == (1, 8, 32) and prof.spec_steps == 3
    assert abs(prof.step_seconds(8, False) - 0.018) < 0.0005
    assert abs(prof.step_seconds(8, True) - 0.036) < 0.001
    assert abs(prof.mean_accept_length - 2.5) < 0.05


def test_tokens_check_matches_one_reporting_rank_and_catches_two(tmp_path):
    import json
    db = open_store(tmp_path / "s.db")
    # 4 requests x 10 output tokens: 1 from prefill + 9 from decode, accept 2 per spec step
    rows = [(100.0 + 0.01 * i, 4, 3, 8, 0.01, 1) for i in range(4)] + [(100.2, 4, 0, 4, 0.01, 1)]
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)   # 36 decode tokens
    db.conn.commit()
    row = {"label": "switching", "prompts": 4, "concurrency": 4, "output_tokens": 40, "t_start": 99.9, "t_end": 100.5}
    res = tmp_path / "r.jsonl"
    res.write_text(json.dumps(row) + "\n")
    run = lambda: subprocess.run([sys.executable, str(ROOT / "bench/gpu/tokens_check.py"), str(tmp_path / "s.db"),
                                  str(res), "switching"], capture_output=True, text=True)
    first = run()
    assert first.returncode == 0 and '"match": true' in first.stdout and '"largest_batch": 4' in first.stdout
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)   # a second rank reporting too
    db.conn.commit()
    second = run()
    assert second.returncode == 1 and '"daemon_tokens": 72' in second.stdout


def test_sweep_reports_what_the_daemon_measured_in_each_level(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    import sweep
    monkeypatch.setattr(sweep.time, "sleep", lambda s: None)
    db = open_store(tmp_path / "s.db")
    rows = [(10.0 + 0.1 * i, 16, 0, 16, 0.01, 1) for i in range(5)]            # never: off batches only
    rows += [(20.0 + 0.1 * i, 16, 3, 40 if i % 2 else 24, 0.02, 1) for i in range(4)]   # always: accept 2.5 / 1.5
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    db.conn.commit()
    levels = [{"label": "never", "repeat": 0, "concurrency": 16, "t_start": 9.9, "t_end": 11.0},
              {"label": "always", "repeat": 0, "concurrency": 16, "t_start": 19.9, "t_end": 21.0},
              {"label": "bandit", "repeat": 0, "concurrency": 16, "t_start": 30.0, "t_end": 31.0}]
    got = sweep.measured(str(tmp_path / "s.db"), levels)
    assert [(g["label"], g["batches"], g["spec_share"], g["accept_measured"]) for g in got] == [
        ("never", 5, 0.0, None), ("always", 4, 1.0, 2.0), ("bandit", 0, None, None)]
    assert all("output_tok_s" not in g for g in got)          # never shown as a throughput level


def test_prefill_events_are_split_by_the_threshold_in_force(tmp_path):
    """Prefills cost 10 ms while the threshold is 0 (the draft's pass skipped) and 30 ms after a pin to 8."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    import db_to_profile
    db = open_store(tmp_path / "s.db")
    rows, t = [], 0.0
    for i in range(400):
        extra = (0.010 if t < 6.0 else 0.030) if i % 10 == 5 else 0.0
        for spec in (False, True):             # the prefill lands in the first of the two intervals
            step, add = (0.02, 0.0) if spec else (0.01, extra)
            rows.append((t, 4, 3 if spec else 0, 4, step + add, 0 if add else 1))
            t += step + add
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    db.conn.executemany("INSERT INTO decisions (t, wall, old, new, policy, reason, exploratory) VALUES (?,?,?,?,?,?,?)",
                        [(0.0, 0.0, 0, 0, "bandit", "restored at start", 0),
                         (6.0, 6.0, 0, 8, "fixed", "pinned at 8 by an operator", 0)])
    db.conn.commit()
    medians = {(4, False): 0.01, (4, True): 0.02}
    got = db_to_profile.prefill_by_threshold(str(tmp_path / "s.db"), medians)
    assert got["threshold 0"]["median_extra_ms"] == pytest.approx(10.0, abs=0.01)
    assert got["threshold > 0"]["median_extra_ms"] == pytest.approx(30.0, abs=0.01)
    assert got["threshold 0"]["events"] > 10 and got["threshold > 0"]["events"] > 10
