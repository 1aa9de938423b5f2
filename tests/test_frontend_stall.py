"""bench/gpu/frontend.py: a steady run whose client wall ran past its engine's window (the HTTP front end stalled,
12-06d / 12-06e) is named, and a run whose engine was slow is not (that is the off path's to answer for)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench/gpu"))
from frontend import flag, outside, table  # noqa: E402


def runs(stall: tuple | None = None, slow_engine: tuple | None = None) -> tuple[list[dict], list[dict]]:
    """Three pairs at 16 and 128: ~45 ms outside every engine; `stall` = (label, level, repeat) adds 400 ms outside,
    `slow_engine` 400 ms inside (window and wall both)."""
    results, timeline, t = [], [], 1_796_557_000.0
    for level in (16, 128):
        for repeat in range(3):
            for label in ("nospec", "off"):
                window = 1540.0 + (400 if (label, level, repeat) == slow_engine else 0)
                wall = window + 45 + repeat + (400 if (label, level, repeat) == stall else 0)
                key = {"label": label, "shape": "steady", "level": level, "repeat": repeat, "t_start": t}
                results.append({**key, "wall_ms": wall, "tok_s": 128 * 192 / wall * 1e3})
                timeline.append({**key, "window_ms": window, "kinds": {}})
                t += 2.0
    results.append({"label": "off", "shape": "closed", "level": 128, "repeat": 0, "t_start": t, "wall_ms": 9e4})
    return results, timeline


def test_a_stall_outside_the_engine_is_named_with_its_run():
    flagged = flag(outside(*runs(stall=("off", 128, 1))), 100.0)
    assert len(flagged) == 12                              # the closed run is not a steady one
    assert [(r["label"], r["level"], r["repeat"]) for r in flagged if r["stall"]] == [("off", 128, 1)]
    stalled = next(r for r in flagged if r["stall"])
    assert stalled["outside_ms"] == 446.0 and stalled["window_ms"] == 1540.0


def test_a_slow_engine_is_not_called_a_front_end_stall():
    flagged = flag(outside(*runs(slow_engine=("off", 128, 1))), 100.0)
    assert not any(r["stall"] for r in flagged)
    assert table(flagged) == ["front end: no steady run lost time outside its engine (12 runs)"]


def test_a_run_without_its_timeline_row_is_left_out_not_guessed():
    results, timeline = runs(stall=("nospec", 16, 0))
    timeline = [r for r in timeline if not (r["label"] == "nospec" and r["level"] == 16 and r["repeat"] == 0)]
    flagged = flag(outside(results, timeline), 100.0)
    assert len(flagged) == 11 and not any(r["stall"] for r in flagged)


def test_the_script_prints_the_stalled_run(tmp_path):
    results, timeline = runs(stall=("nospec", 128, 2))
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timeline))
    out = subprocess.run([sys.executable, str(ROOT / "bench/gpu/frontend.py"), str(tmp_path / "r.jsonl"),
                          str(tmp_path / "t.jsonl")], capture_output=True, text=True, check=True).stdout
    assert "| 128 | nospec | 2 | 1,987 | 1,540 | 447 |" in out
    assert "1 of 12 steady runs" in out
