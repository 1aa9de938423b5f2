"""bench/gpu/changes_count.py: what counts as a threshold change in the daemon's history (the GPU figure of
decisions per minute at constant load, issue 13 item 4)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_rows_that_change_nothing_are_not_counted(tmp_path):
    # a trial (0 -> 8), a trial kept as the decision (8 -> 8) and a start re-applying 8 are one change ...
    rows = [{"wall": 10.5, "old": 0, "new": 8, "exploratory": 1}, {"wall": 11.0, "old": 8, "new": 8, "exploratory": 0},
            {"wall": 20.0, "old": 8, "new": 8, "exploratory": 0}, {"wall": 40.0, "old": 8, "new": 23, "exploratory": 0},
            {"wall": 90.0, "old": 23, "new": 0, "exploratory": 0}]     # ... and one after the window
    (tmp_path / "h.json").write_text(json.dumps(rows))
    out = subprocess.run([sys.executable, str(ROOT / "bench/gpu/changes_count.py"), str(tmp_path / "h.json"), "8", "60"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("CONST threshold changes in 60 s at constant load: 2 (2.0/min, 1 trials); "
                           "second half: 1 (2.0/min): 0->8* 8->23")
