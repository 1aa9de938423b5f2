"""bench/gpu/offpath_status.py: issue 12's standing per shape and level, from the record's rows of the default off
path measured the current way, one ratio per call."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import offpath_status  # noqa: E402

NOW = {"mode": "off", "off_path": "kv", "prefill_graph": "breakable", "pinned_cpus": True, "sleep_on_idle": True}


def row(shape: str, level: float, ratio: float, call: str, **changes) -> dict:
    return {**NOW, "shape": shape, "level": level, "ratio": ratio, "call": f"{call}/call2-results.jsonl"} | changes


def test_one_ratio_per_call_in_call_order_against_the_bar():
    rows = [row("closed", 128, 0.98, "h200-2026-12-05b"), row("closed", 128, 0.94, "h200-2026-12-04e"),
            row("closed", 128, 0.95, "h200-2026-12-05"), row("steady", 1, 0.99, "h200-2026-12-04h")]
    got = offpath_status.status(rows, bar=0.97)
    assert [(s["shape"], s["level"]) for s in got] == [("steady", 1.0), ("closed", 128.0)]
    closed = got[1]
    assert (closed["calls"], closed["median"], closed["low"], closed["high"]) == (3, 0.95, 0.94, 0.98)
    assert (closed["at_bar"], closed["latest"], closed["latest_call"]) == (1, 0.98, "h200-2026-12-05b")


@pytest.mark.parametrize("changes", [{"mode": "fast"}, {"off_path": "synced"}, {"prefill_graph": "disabled"},
                                     {"pinned_cpus": False}, {"sleep_on_idle": None}, {"ratio": None},
                                     {"plain_off": True}])
def test_rows_of_another_mode_or_harness_are_left_out(changes):
    rows = [row("closed", 48, 0.99, "h200-2026-12-05"), row("closed", 48, 0.50, "h200-2026-12-05b") | changes]
    (only,) = offpath_status.status(rows)
    assert (only["calls"], only["latest"]) == (1, 0.99)


def test_the_table_says_how_many_calls_reach_the_bar(capsys, tmp_path):
    import json
    (tmp_path / "r.json").write_text(json.dumps({"rows": [row("open", 24, 0.967, "h200-2026-12-04g")]}))
    assert offpath_status.main(["--json", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "| open | 24 req/s | 1 | 0.967 | 0.967-0.967 | 0 of 1 | 0.967 (h200-2026-12-04g) |"
