"""bench/gpu/traffic_table.py: off / no-spec ratios paired within a call."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import traffic_table  # noqa: E402


def run(label: str, repeat: int, t: float, tok_s: float) -> dict:
    return {"shape": "closed", "level": 16, "label": label, "repeat": repeat, "t_start": t, "tok_s": tok_s,
            "engines_resident": True}


def test_a_phase_run_twice_pairs_each_run_with_the_no_spec_run_of_its_own_block():
    # two blocks (closed, then closed again later): the no-spec engine drifted from 1000 to 800 between them
    rows = [run("nospec", 0, 0, 1000), run("off", 0, 10, 900), run("off", 1, 20, 950), run("nospec", 1, 30, 1000),
            run("nospec", 0, 100, 800), run("off", 0, 110, 720), run("off", 1, 120, 760), run("nospec", 1, 130, 800)]
    (row,) = traffic_table.offpath_rows(traffic_table.grouped(rows), "call")
    assert row["paired"] == 4
    assert row["pair_ratios_tok_s"] == [0.9, 0.95, 0.9, 0.95]


def test_the_headline_ratio_takes_the_no_spec_runs_of_the_variants_own_blocks():
    # one call, two variants against the same no-spec engine, which drifted between their blocks
    rows = [run("nospec", 0, 0, 1000), run("off", 0, 10, 900), run("off", 1, 20, 900), run("nospec", 1, 30, 1000),
            run("nospec", 0, 100, 800), run("fast", 0, 110, 800), run("fast", 1, 120, 800), run("nospec", 1, 130, 800)]
    rows_by_mode = {r["mode"]: r for r in traffic_table.offpath_rows(traffic_table.grouped(rows), "call")}
    assert (rows_by_mode["off"]["nospec_tok_s"], rows_by_mode["off"]["ratio"]) == (1000, 0.9)
    assert (rows_by_mode["fast"]["nospec_tok_s"], rows_by_mode["fast"]["ratio"]) == (800, 1.0)
    assert rows_by_mode["off"]["nospec_repeats"] == 2


def test_a_steady_run_whose_requests_ended_apart_is_flagged_not_steady():
    def steady(label, repeat, t, tok_s, spread):
        return {**run(label, repeat, t, tok_s), "shape": "steady", "end_spread_ms": spread, "wall_ms": 1000.0}
    rows = [steady("nospec", 0, 0, 1000, 0.4), steady("off", 0, 10, 990, 2.0), steady("off", 1, 20, 840, 380.0),
            steady("nospec", 1, 30, 1000, 51.0)]
    (row,) = traffic_table.offpath_rows(traffic_table.grouped(rows), "call")
    assert row["not_steady"] == [1, "nospec 1"]          # 380 and 51 ms of a 1,000 ms run; 2 ms is one step
    closed = [run("nospec", 0, 0, 1000), run("off", 0, 10, 900)]
    assert "not_steady" not in traffic_table.offpath_rows(traffic_table.grouped(closed), "call")[0]


def test_after_a_phase_that_changes_both_engines_each_label_pairs_with_the_no_spec_runs_of_that_phase():
    """run_pair's gcfreeze and spin phases suffix every later label: off-spin against nospec-spin (the no-spec engine
    spinning too), never against the plain nospec runs of the block before."""
    rows = [run("nospec", 0, 0, 1000.0), run("off", 0, 1, 950.0),
            run("nospec-spin", 0, 10, 900.0), run("off-spin", 0, 11, 945.0),
            run("nospec-gcf", 0, 20, 1100.0), run("off-gcf", 0, 21, 1000.0)]
    groups = traffic_table.grouped(rows)
    for label, base in (("off", 1000.0), ("off-spin", 900.0), ("off-gcf", 1100.0), ("nospec-spin", 1000.0)):
        pairs, _ = traffic_table.beside(groups, ("closed", 16, label))     # nospec-spin: what the dose did to it
        assert [b["tok_s"] for _, b in pairs] == [base], label
    recorded = traffic_table.offpath_rows(groups, "call", paired=True)       # the record: off against no-spec only
    assert [(r["mode"], r["ratio"]) for r in recorded] == [("off", 0.95)]
    leanall = traffic_table.grouped([run("nospec", 0, 0, 1000.0), run("leanall", 0, 1, 980.0)])
    assert [r["mode"] for r in traffic_table.offpath_rows(leanall, "call", paired=True)] == ["leanall"]
