"""The evaluation's reports on main's code, recomputed from their runs: never/always baselines and the
timeline, static throughputs, changes per minute, the best static threshold on a tie, and the open loop's
rows (openeval: its runs with the policy's params, guard, seed and tick, its ratios)."""
from __future__ import annotations

import pytest

import policies
from controller.control.guard_config import GuardConfig
from controller.sim.evaluate import (
    DEFAULT_TICK_S,
    OracleRunner,
    StaticRunner,
    best_static,
    changes_per_min,
    evaluate,
    policy_runner,
    run_segments,
    static_throughputs,
)
from controller.sim.openeval import _ratio, evaluate_open, rate_segments, runs, summary
from controller.sim.profile import Segment, load_profile, parse_profile
from policies import Decision, Policy

PROF = load_profile("crossover-a")
SEGMENTS = [Segment(3, 1, None, "one"), Segment(3.5, 2, 1.9, "two"), Segment(3, 64, None, "many")]


def test_baselines_are_never_and_always_per_segment_and_the_timeline_its_changes():
    out = evaluate(PROF, SEGMENTS, "fixed", {"threshold": 2}, seed=2, tick_s=0.25, baselines=True)
    never = run_segments(PROF, SEGMENTS, lambda core: StaticRunner(0), 2)
    always = run_segments(PROF, SEGMENTS, lambda core: StaticRunner(PROF.max_batch_size), 2)
    assert [r["never_tok_s"] for r in out["rows"]] == [round(r.throughput, 2) for r in never]
    assert [r["always_tok_s"] for r in out["rows"]] == [round(r.throughput, 2) for r in always]
    starts = [0.0, out["rows"][0]["seconds"], out["rows"][0]["seconds"] + out["rows"][1]["seconds"]]
    assert out["timeline"]["segment_starts"] == [round(s, 2) for s in starts] and starts[1] > 2.9
    assert out["timeline"]["ticks"] == [[0.25, 2, False]]                    # the first tick, and no change after
    assert "timeline" not in evaluate(PROF, SEGMENTS[:1], "never", seed=2)


def test_static_throughputs_are_seed_0_runs_by_default():
    want = [r.throughput for r in run_segments(PROF, SEGMENTS, lambda core: StaticRunner(2), 0)]
    assert static_throughputs(PROF, SEGMENTS, 2) == want
    assert static_throughputs(PROF, SEGMENTS, 2, seed=5) != want


def test_a_tie_between_static_thresholds_keeps_the_lowest():
    flat = parse_profile({"spec_steps": 1, "noise": 0.0, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.02],
                          "spec": [0.01, 0.02]}, "acceptance": {"mean_accept_length": 1.0, "spread": 0.0}}, "flat")
    segs = [Segment(3, 4), Segment(3, 8)]
    tput = {t: sum(r.tokens for r in run_segments(flat, segs, lambda core, t=t: StaticRunner(t))) for t in (0, 4, 8)}
    assert len(set(tput.values())) == 1                        # spec is plain decoding here: every threshold ties
    assert best_static(flat, segs)["threshold"] == 0


class Flipping(Policy):
    """Threshold 0 and 64 in turn, one every tick: every decision is a visible change at batch 8."""

    name = "flipping"

    def decide(self, snap):
        t = 64 if snap.exploit_threshold == 0 else 0
        return Decision(t, t, "flip")


def test_changes_per_minute_counts_the_applied_changes_after_the_warm_up(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "flipping", Flipping)
    free = GuardConfig(stabilisation_s=0, max_step_buckets=1000, changes_per_min=0, min_gain=0)
    segs = [Segment(20, 8)]
    made: list = []
    make = policy_runner("flipping", None, PROF, 0, free)
    run_segments(PROF, segs, lambda core: made.append(make(core)) or made[-1], 0)
    changes, seconds = made[0].changes, sum(r.seconds for r in run_segments(PROF, segs, make, 0))
    assert len(changes) > 30
    assert changes_per_min(PROF, segs, "flipping", guard=free) == pytest.approx(len(changes) / (seconds / 60))
    late = [t for t in changes if t >= 5.0]
    assert changes_per_min(PROF, segs, "flipping", guard=free, warm_s=5.0) == pytest.approx(
        len(late) / ((seconds - 5.0) / 60))
    assert changes_per_min(PROF, segs, "fixed", {"threshold": 0}, guard=free) == 0.0
    # its params: threshold 16 routes batch 8 differently from the initial 0 (the default 5 would not)
    assert changes_per_min(PROF, segs, "fixed", {"threshold": 16}, guard=free) * 20 / 60 == pytest.approx(1, rel=0.01)


def test_changes_per_minute_runs_the_simulator_with_its_seed(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "flipping", Flipping)
    free = GuardConfig(stabilisation_s=0, max_step_buckets=1000, changes_per_min=0, min_gain=0)
    segs = [Segment(20, 8)]
    for seed in (3, 7):
        made: list = []
        make = policy_runner("flipping", None, PROF, seed, free)
        res = run_segments(PROF, segs, lambda core: made.append(make(core)) or made[-1], seed)
        want = len(made[0].changes) / (sum(r.seconds for r in res) / 60)
        assert changes_per_min(PROF, segs, "flipping", seed=seed, guard=free) == pytest.approx(want, rel=1e-9)


def test_rate_segments_are_open_loop_segments_with_their_rate_as_label():
    assert rate_segments([2.5, 10], 7) == [Segment(7, 0, None, "rate=2.5", 2.5), Segment(7, 0, None, "rate=10", 10.0)]


def test_ratios_of_the_open_loop():
    assert _ratio(1, 3) == 0.3333 and _ratio(2.0, 1.0) == 2.0
    assert _ratio(None, 2) is None and _ratio(2, None) is None and _ratio(0, 2) is None and _ratio(3, 0) is None


def test_evaluate_open_runs_the_policy_with_its_params_guard_seed_and_tick():
    prof = load_profile("crossover-b")
    segs = rate_segments([3.0, 20.0], 8)
    guard = GuardConfig(max_threshold=4)
    out = evaluate_open(prof, segs, "fixed", {"threshold": 200}, seed=4, tick_s=1.0, guard=guard)
    mine = run_segments(prof, segs, policy_runner("fixed", {"threshold": 200}, prof, 4, guard), 4, 1.0)
    never = run_segments(prof, segs, lambda core: StaticRunner(0), 4, 1.0)
    for row, m, n in zip(out["rows"], mine, never):
        assert {k: row[k] for k in summary(m)} == summary(m) and row["never"] == summary(n)
        assert row["final_threshold"] == 4 and row["segment"] == m.segment
        assert row["accept_length"] == round(m.accept_length, 3) == prof.mean_accept_length
    assert [r["segment"] for r in out["rows"]] == ["rate=3", "rate=20"]
    other = evaluate_open(prof, segs, "fixed", {"threshold": 200}, seed=4, tick_s=0.25, guard=guard)
    assert other["rows"][0]["tok_s"] != out["rows"][0]["tok_s"] or other["rows"][1]["tok_s"] != out["rows"][1]["tok_s"]
    # the params reach the policy: threshold 2 stays 2 under the guard's 4 (the default 5 would be clipped to 4)
    assert [r["final_threshold"] for r in evaluate_open(prof, segs, "fixed", {"threshold": 2}, seed=4,
                                                         guard=guard)["rows"]] == [2, 2]


def test_open_loop_rows_give_the_segments_seconds_accept_length_and_throughputs_of_their_runs():
    prof = load_profile("crossover-b")
    segs = [Segment(6, 0, 2.34567, "a", 3.0), Segment(7, 0, 1.98765, "b", 12.0)]
    out = evaluate_open(prof, segs, "bandit", seed=1)
    mine = run_segments(prof, segs, policy_runner("bandit", None, prof, 1), 1)
    oracle = run_segments(prof, segs, lambda core: OracleRunner(prof, core), 1)
    for row, m, o, seg in zip(out["rows"], mine, oracle, segs):
        assert row["seconds"] == round(m.seconds, 2) and abs(row["seconds"] - seg.seconds) < 0.5
        assert row["accept_length"] == round(m.accept_length, 3)
        assert row["throughput_tok_s"] == row["tok_s"] == round(m.throughput, 2)
        assert row["oracle_tok_s"] == row["oracle"]["tok_s"] == round(o.throughput, 2)
    assert [r["accept_length"] for r in out["rows"]] == [2.346, 1.988]


def test_evaluate_open_report_is_recomputed_from_its_runs_with_seed_0_and_the_default_tick():
    prof = load_profile("crossover-b")
    segs = rate_segments([3.0, 20.0], 8)
    out = evaluate_open(prof, segs, "bandit")
    res = runs(prof, segs, "bandit", None, 0, DEFAULT_TICK_S, None)
    assert {k: out[k] for k in ("profile", "policy", "params", "seed", "tick_s", "load")} == {
        "profile": "crossover-b", "policy": "bandit", "params": {}, "seed": 0, "tick_s": DEFAULT_TICK_S, "load": "open"}
    assert evaluate_open(prof, segs, "fixed", {"threshold": 2})["params"] == {"threshold": 2}
    for i, row in enumerate(out["rows"]):
        assert {k: row[k] for k in summary(res["policy"][i])} == summary(res["policy"][i])
        never, always = summary(res["never"][i]), summary(res["always"][i])
        assert row["tok_s_vs_best_fixed"] == round(row["tok_s"] / max(never["tok_s"], always["tok_s"]), 4)
        assert None not in (row["tpot_ms_median"], never["tpot_ms_median"], always["tpot_ms_median"])
        assert row["tpot_vs_best_fixed"] == round(
            row["tpot_ms_median"] / min(never["tpot_ms_median"], always["tpot_ms_median"]), 4)
    total = {name: sum(r.tokens for r in rs) / sum(r.seconds for r in rs) for name, rs in res.items()}
    assert out["overall"] == {"throughput_tok_s": round(total["policy"], 2), "oracle_tok_s": round(total["oracle"], 2),
                              "ratio": round(total["policy"] / total["oracle"], 4),
                              "min_ratio": min(r["ratio"] for r in out["rows"])}


@pytest.mark.parametrize("segs", [[], [Segment(5, 8)], [Segment(5, 0, None, "r", 2.0), Segment(5, 8)]])
def test_evaluate_open_refuses_anything_but_rate_segments(segs):
    with pytest.raises(ValueError, match="^evaluate_open needs rate segments$"):
        evaluate_open(PROF, segs, "bandit")


def test_an_open_loop_segment_where_no_request_finishes_has_no_tpot_ratio():
    out = evaluate_open(PROF, rate_segments([0.5, 0.5], 0.3), "bandit")    # 0.6 s: every request still decoding
    for row in out["rows"]:
        assert row["requests"] == 0 and row["never"]["tpot_ms_median"] is None is row["always"]["tpot_ms_median"]
        assert row["tpot_vs_best_fixed"] is None and row["tok_s"] > 0
