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


def test_an_operators_pins_and_unpins_are_not_decisions(tmp_path):
    rows = [{"wall": 10.0, "old": 23, "new": 0, "exploratory": 0, "reason": "pinned at 0 by an operator"},
            {"wall": 12.0, "old": 0, "new": 23, "exploratory": 0, "reason": "unpinned by an operator; best threshold 23"},
            {"wall": 14.0, "old": 23, "new": 14, "exploratory": 1, "reason": "trial: plain decode at batch 15"}]
    (tmp_path / "h.json").write_text(json.dumps(rows))
    out = subprocess.run([sys.executable, str(ROOT / "bench/gpu/changes_count.py"), str(tmp_path / "h.json"), "8", "60"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("CONST threshold changes in 60 s at constant load: 1 (1.0/min, 1 trials); "
                           "second half: 0 (0.0/min): 23->14* (2 operator pins / unpins not counted)")


def test_it_knows_the_loops_own_words_for_a_pin_and_an_unpin():
    # changes_count reads the reasons the control loop writes: a rewording there must fail here
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from changes_count import OPERATOR

    from controller.control.guard_config import GuardConfig
    from controller.control.loop import ControlLoop
    from policies import make_policy
    loop = ControlLoop(make_policy("fixed", {"threshold": 6}), GuardConfig(stabilisation_s=0), 0)
    loop.last_sample_t = 0.0
    loop.pin(3)
    pinned = loop.tick(0.5).reason
    loop.pin(None)
    unpinned = loop.tick(1.0).reason
    assert pinned.startswith(OPERATOR) and unpinned.startswith(OPERATOR)
    assert not loop.tick(1.5).reason.startswith(OPERATOR)
