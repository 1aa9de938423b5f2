"""bench/gpu/product_table.py: the bandit against the better of no-spec and always-on, per shape and level, and its
per-pair ratio to no-spec (same file, same repeat), from results files as loads.py writes them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rows(tok: dict, shape: str = "closed", level: int = 48, repeat: int = 0, **extra) -> list[dict]:
    return [{"label": k, "shape": shape, "level": level, "repeat": repeat, "tok_s": v, **extra} for k, v in tok.items()]


def test_the_bandit_is_read_against_the_better_mode_and_paired_within_its_own_call(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # busy level: no-spec is the better; quiet level: always is; call b's repeat 0 is a different pair than call a's
    a.write_text("".join(json.dumps(r) + "\n" for r in
                         rows({"nospec": 1000, "always": 500, "bandit": 990})
                         + rows({"nospec": 100, "always": 150, "bandit": 147}, level=1)
                         + [{"label": "nospec", "shape": "closed", "level": 48, "repeat": 1, "error": "x"}]))
    b.write_text("".join(json.dumps(r) + "\n" for r in rows({"nospec": 800, "always": 520, "bandit": 792})))
    out = subprocess.run([sys.executable, str(ROOT / "bench/gpu/product_table.py"), str(a), str(b)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| closed")}
    busy, quiet = lines["48"], lines["1"]
    # medians: no-spec 900, always 510, bandit 891 -> 0.990 of the better; pairs 0.990 and 0.990
    assert "| **0.990** | 0.990 (0.990-0.990) |" in busy and "900 (800-1,000, n=2)" in busy
    assert "| **0.980** | 1.470 (1.470-1.470) |" in quiet         # 147 / 150 against always; 147 / 100 per pair


def test_no_file_is_refused_in_one_line():
    res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/product_table.py")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and res.stderr.strip().startswith("usage:")
