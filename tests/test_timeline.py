"""The GPU timeline's arithmetic (bench/gpu/timeline_summary.py), on synthetic batch rows: the prefill cost it
hands the simulator's profile and the per-kind table of issue 12's "where the time goes"."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
from timeline_summary import prefill_cost, runs_of, summarise  # noqa: E402


def batches(n_cycles: int, *, decode_ms=5.0, extend_ms_per_token=0.07, tokens=400, idle_before_extend=3.0,
            idle_after=2.0, extra_after=1.0, decodes_per_cycle=6, t0=0.0) -> list[list]:
    """Rows ["B", kind, bs, tokens, cpu0, cpu1, gpu0, gpu1]: cycles of one extend and some decodes."""
    rows, t = [], t0
    for _ in range(n_cycles):
        t += idle_before_extend
        g = tokens * extend_ms_per_token
        rows.append(["B", "extend", 1, tokens, 0, 0, t, t + g])
        t += g + idle_after
        rows.append(["B", "decode", 30, 0, 0, 0, t, t + decode_ms + extra_after])
        t += decode_ms + extra_after
        for _ in range(decodes_per_cycle - 1):
            rows.append(["B", "decode", 30, 0, 0, 0, t, t + decode_ms])
            t += decode_ms
    return rows


def test_prefill_cost_is_the_idle_around_an_extend_plus_the_next_decodes_extra_and_its_gpu_per_token():
    got = prefill_cost(batches(150))
    assert got["extends"] == 149                   # the run's first batch has no idle time before it to read
    assert got["prefill_s"] == pytest.approx((3.0 + 2.0 + 1.0) / 1e3, rel=1e-3)
    assert got["prefill_s_per_token"] == pytest.approx(0.07 / 1e3, rel=1e-3)


def test_prefill_cost_needs_enough_extends():
    assert prefill_cost(batches(20)) is None


def test_runs_are_cut_where_the_gpu_idled_between_two_loads():
    rows = batches(10) + batches(10, t0=10_000_000.0)
    runs = runs_of(rows)
    assert [len(r) for r in runs] == [70, 70]


def test_summary_per_kind_gpu_time_idle_and_decode_interval():
    rows = batches(150, decodes_per_cycle=4)
    cpu = 0
    for r in rows:                                 # CPU times inside the window
        r[4], r[5] = cpu, cpu + 1_000_000
        cpu += 2_000_000
    out = summarise(rows, 0, cpu)
    ext, dec = out["kinds"]["extend"], out["kinds"]["decode"]
    assert ext["n"] == 150 and dec["n"] == 600
    assert ext["gpu_ms"] == pytest.approx(28.0) and dec["gpu_ms"] == pytest.approx(5.25)
    assert ext["idle_before_ms"] == pytest.approx(3.0, rel=0.01) and dec["idle_before_ms"] == pytest.approx(0.5)
    assert dec["launch_cpu_ms"] == pytest.approx(1.0)
    # a running request waits 5 ms between its decodes, but 28 + 3 + 2 + 6 ms across an extend
    assert out["decode_interval_ms_median"] == pytest.approx(5.0)
    assert out["decode_interval_ms_mean"] > 10.0
