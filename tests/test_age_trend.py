"""bench/gpu/age_trend.py: over one KEEP_ENGINES chain, each label's tok/s and each pair's ratio against the engines'
age. Synthetic calls whose off engine speeds up by a known amount while no-spec stays: the fit finds it, and a flat
chain reads no trend."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench/gpu"))
from age_trend import lines, one_clock, slope_per_10min  # noqa: E402

BOOT = 1_796_000_000.0      # the wall clock at the machine's monotonic zero


def chain(tmp_path: Path, off_gain_per_min: float, calls: int = 3, seed: int = 0, boots: list[float] | None = None) -> list[str]:
    """calls results files of closed 128, 4 repeats each, 10 minutes apart; off's tok/s grows by off_gain_per_min."""
    rnd, paths = random.Random(seed), []
    for c in range(calls):
        rows, boot = [], (boots or [BOOT] * calls)[c]
        for rep in range(4):
            for i, label in enumerate(("nospec", "off")):
                mono = 600.0 * c + 40.0 * rep + 18.0 * i
                base = 10_500 * (1 + rnd.gauss(0, 0.003))
                tok = base if label == "nospec" else base * 0.93 + off_gain_per_min * mono / 60
                rows.append({"shape": "closed", "level": 128, "label": label, "repeat": rep, "tok_s": tok,
                             "mono_start": mono, "t_start": boot + mono})
        path = tmp_path / f"call{c}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(path))
    return paths


def table_of(paths: list[str]) -> dict[str, list[str]]:
    rows = [json.loads(line) for p in paths for line in open(p)]
    return {cells[2]: cells for cells in (line.strip().strip("|").strip().split(" | ") for line in lines(rows)[2:])}


def test_an_off_engine_that_speeds_up_with_age_reads_a_rising_ratio_and_no_spec_flat(tmp_path):
    got = table_of(chain(tmp_path, off_gain_per_min=30))        # +300 tok/s per 10 min: the ratio +0.029
    slope = got["off / nospec"][6]
    value, interval = slope.split(" [")
    assert 0.02 < float(value) < 0.04 and float(interval.split(",")[0]) > 0, slope    # above zero, 95 %
    lo, hi = got["nospec tok/s"][6].split("[")[1].rstrip("]").split(",")
    assert float(lo) < 0 < float(hi.replace("%", ""))                                 # no-spec: no trend
    assert got["off / nospec"][3] == "12"                                              # 3 calls x 4 pairs


def test_a_flat_chain_reads_no_trend(tmp_path):
    slope = table_of(chain(tmp_path, off_gain_per_min=0))["off / nospec"][6]
    lo, hi = (float(x) for x in slope.split("[")[1].rstrip("]").split(","))
    assert lo < 0 < hi


def test_slope_needs_three_points_spread_in_time():
    assert slope_per_10min([0, 1], [1, 2]) is None and slope_per_10min([5, 5, 5], [1, 2, 3]) is None
    assert slope_per_10min([0, 10, 20], [1.0, 1.1, 1.2]) == pytest.approx((0.1, 0.1, 0.1))


def test_calls_of_different_machines_are_refused(tmp_path):
    paths = chain(tmp_path, 0, calls=2, boots=[BOOT, BOOT + 3600])   # a fresh machine: its clock started again
    rows = [json.loads(line) for p in paths for line in open(p)]
    with pytest.raises(ValueError, match="not one machine's calls"):
        one_clock(rows)
    got = subprocess.run([sys.executable, str(ROOT / "bench/gpu/age_trend.py"), *paths], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.count("\n") == 1 and got.stderr.startswith("age_trend: the rows'")
    assert got.stdout == ""


def test_a_file_without_runs_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text('{"note": "no runs"}\n')
    got = subprocess.run([sys.executable, str(ROOT / "bench/gpu/age_trend.py"), str(empty)], capture_output=True, text=True)
    assert got.returncode == 2 and got.stderr.startswith("age_trend: no runs") and got.stdout == ""


def test_within_calls_pools_each_calls_own_trend_whatever_its_level_or_machine(tmp_path):
    """--within: each file a call with fresh engines (any machine: the clocks need not agree); a ratio rising inside
    every call reads a positive pooled slope even where the calls' levels differ, a flat one reads none."""
    from age_trend import main, within_calls
    rising = chain(tmp_path, off_gain_per_min=60, calls=3, boots=[BOOT, BOOT + 3600, BOOT + 7200])
    calls = [[json.loads(line) for line in open(p)] for p in rising]
    for i, call in enumerate(calls):                  # each call on its own mono clock and its own level of ratio
        for r in call:
            r["mono_start"] -= 600.0 * i
            if r["label"] == "off":
                r["tok_s"] *= 1 + 0.05 * i
    n, k, fit = within_calls(calls, "closed")["off"]
    assert (n, k) == (12, 3) and fit[1] > 0 and 0.03 < fit[0] < 0.12     # (+0.058 set; runs of 2.3 min, 0.3 % noise)
    flat = [[dict(r, tok_s=r["tok_s"] if r["label"] == "nospec" else 9_800.0 + 10 * r["repeat"] % 20) for r in call]
            for call in calls]
    lo, hi = within_calls(flat, "closed")["off"][2][1:]
    assert lo < 0 < hi
    assert main(["--within", *rising]) == 0               # no one-clock refusal across machines


def test_within_calls_counts_each_calls_minutes_from_its_own_first_run(tmp_path):
    """Calls 10 minutes apart on one clock, given out of order: each call's time still starts at its own first run."""
    from age_trend import within_calls
    calls = [[json.loads(line) for line in open(p)] for p in chain(tmp_path, off_gain_per_min=60, calls=3)]
    calls[0], calls[2] = calls[2], calls[0]
    n, k, fit = within_calls(calls, "closed")["off"]
    assert (n, k) == (12, 3) and fit[1] > 0 and 0.03 < fit[0] < 0.12


@pytest.mark.parametrize("drift_s, same", [(1.0, True), (30.0, False), (-30.0, False)])
def test_one_clock_allows_seconds_of_drift_either_way_and_no_more(drift_s, same):
    rows = [{"t_start": BOOT + 10, "mono_start": 10}, {"t_start": BOOT + 20 + drift_s, "mono_start": 20}]
    if same:
        one_clock(rows)
    else:
        with pytest.raises(ValueError):
            one_clock(rows)


def test_within_calls_reads_the_slope_inside_each_level_not_between_the_levels_times():
    """helper-87's hand check: one call, closed 48 at minutes 0 / 1 / 2 and closed 128 at 10 / 11 / 12, each level's
    ratio rising 0.01 a minute (0.97, 0.98, 0.99): +0.100 per 10 min. Minutes counted from the call's first run and
    not centred per level read +0.0026 (the spread between the levels' times in the denominator)."""
    from age_trend import within_calls
    rows = []
    for level, start in ((48, 0.0), (128, 600.0)):
        for rep, ratio in enumerate((0.97, 0.98, 0.99)):
            mono = start + 60.0 * rep
            rows += [{"shape": "closed", "level": level, "label": "nospec", "repeat": rep, "tok_s": 10_000.0,
                      "mono_start": mono, "t_start": BOOT + mono},
                     {"shape": "closed", "level": level, "label": "off", "repeat": rep, "tok_s": 10_000.0 * ratio,
                      "mono_start": mono, "t_start": BOOT + mono}]
    n, k, fit = within_calls([rows], "closed")["off"]
    assert (n, k) == (6, 2) and fit[0] == pytest.approx(0.100, abs=1e-9) and fit[1] == pytest.approx(0.100, abs=1e-9)
