"""bench/reconverge.py: the seed ranges it takes and the slowest re-convergence per pass it tables."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reconverge  # noqa: E402


def test_seed_ranges_and_lists():
    assert reconverge.seeds_of("0-4") == [0, 1, 2, 3, 4] and reconverge.seeds_of("3,7") == [3, 7]


def test_a_pass_is_tabled_per_seed_with_its_slowest_segment(capsys, monkeypatch):
    rows = [{"reconverge_s": x} for x in (1.0, 4.0, 2.0, None)]     # two passes of a two-segment trace
    monkeypatch.setattr(reconverge, "evaluate", lambda prof, segs, pol, seed: {"rows": rows[:len(segs)]})
    monkeypatch.setattr(reconverge, "load_profile", lambda name: None)
    monkeypatch.setattr(reconverge, "load_trace", lambda name: type("T", (), {"profile": "p", "segments": [1, 2]}))
    assert reconverge.slowest_per_pass("mixed-shift", "bandit", 0, 2) == [4.0, None]
    assert reconverge.main(["--trace", "mixed-shift", "--passes", "2", "--seeds", "1"]) == 0
    assert "| mixed-shift | bandit | 1 | 4.0 | never |" in capsys.readouterr().out
