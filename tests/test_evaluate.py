"""controller/sim/evaluate.py: the report's numbers recomputed from run_segments, re-convergence
times from a scripted policy, the best static threshold against every threshold, the tick clock."""
from __future__ import annotations

import pytest

import policies
from controller.control.guard_config import GuardConfig
from controller.sim.evaluate import (
    OracleRunner,
    Runner,
    SegmentResult,
    StaticRunner,
    best_static,
    evaluate,
    policy_runner,
    run_segments,
    sweep_segments,
)
from controller.sim.profile import Segment, load_profile
from policies import Decision, Policy

PROF = load_profile("crossover-a")          # spec wins at C=2, loses at C=64
SEGMENTS = [Segment(4, 2, None, "light"), Segment(4, 64, 1.9, "")]


def test_report_rows_are_the_runs_numbers():
    out = evaluate(PROF, SEGMENTS, "fixed", {"threshold": 2}, seed=3, tick_s=0.25, with_static=True)
    mine = run_segments(PROF, SEGMENTS, policy_runner("fixed", {"threshold": 2}, PROF, 3), 3, 0.25)
    oracle = run_segments(PROF, SEGMENTS, lambda core: OracleRunner(PROF, core), 3, 0.25)
    assert {k: out[k] for k in ("profile", "policy", "params", "seed", "tick_s")} == \
        {"profile": "crossover-a", "policy": "fixed", "params": {"threshold": 2}, "seed": 3, "tick_s": 0.25}
    for row, m, o, name in zip(out["rows"], mine, oracle, ["light", "1"]):
        assert row == {
            "segment": name, "concurrency": m.concurrency, "accept_length": round(m.accept_length, 3),
            "seconds": round(m.seconds, 2), "throughput_tok_s": round(m.tokens / m.seconds, 2),
            "oracle_tok_s": round(o.tokens / o.seconds, 2), "ratio": round(m.throughput / o.throughput, 4),
            "spec_share": round(m.spec_batches / m.batches, 4), "oracle_spec": o.spec_batches > o.batches / 2,
            "final_threshold": 2, "reconverge_s": m.reconverge_s}
    assert [r["oracle_spec"] for r in out["rows"]] == [True, False]
    assert [r["accept_length"] for r in out["rows"]] == [2.3, 1.9]
    total = sum(m.tokens for m in mine) / sum(m.seconds for m in mine)
    total_oracle = sum(o.tokens for o in oracle) / sum(o.seconds for o in oracle)
    assert out["overall"] == {"throughput_tok_s": round(total, 2), "oracle_tok_s": round(total_oracle, 2),
                              "ratio": round(total / total_oracle, 4),
                              "min_ratio": min(r["ratio"] for r in out["rows"])}
    assert out["best_static"]["ratio"] == round(out["best_static"]["throughput_tok_s"] / total_oracle, 4)
    assert "best_static" not in evaluate(PROF, SEGMENTS[:1], "never", seed=3)


def test_best_static_is_the_best_of_every_threshold():
    tput = {}
    for t in range(0, 66):
        res = run_segments(PROF, SEGMENTS, lambda core, t=t: StaticRunner(t), seed=1)
        tput[t] = sum(r.tokens for r in res) / sum(r.seconds for r in res)
    best = max(tput.values())
    want = min(t for t, v in tput.items() if v == best)
    assert best_static(PROF, SEGMENTS, seed=1) == {"threshold": want, "throughput_tok_s": round(best, 2)}
    assert want == 2


class Scripted(Policy):
    """Exploit threshold 0 before switch_at, then 64: wrong at C=2 until then."""

    name = "scripted"
    switch_at = 2.2

    def decide(self, snap):
        t = 0 if snap.now < self.switch_at else 64
        return Decision(t, t, "scripted")


FREE = GuardConfig(stabilisation_s=0, max_step_buckets=1000)      # the guard follows at once


def test_reconvergence_is_the_end_of_the_last_wrong_tick(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "scripted", Scripted)
    rows = evaluate(PROF, [Segment(4, 2), Segment(3, 2)], "scripted", seed=0, guard=FREE)["rows"]
    assert [r["reconverge_s"] for r in rows] == [2.5, 0.0]      # last wrong tick at 2.0, ticks every 0.5 s
    rows = evaluate(PROF, [Segment(2, 2)], "scripted", seed=0, guard=FREE)["rows"]
    assert rows[0]["reconverge_s"] is None                       # still wrong when the segment ends
    static = run_segments(PROF, [Segment(2, 2)], lambda core: StaticRunner(2))
    assert static[0].reconverge_s is None and static[0].final_threshold == 2


class Ticks(Runner):
    def __init__(self):
        self.ticks = []

    def speculate(self, batch_size):
        return False

    def tick(self, now):
        self.ticks.append(now)


def test_ticks_come_every_tick_s_of_virtual_time_across_segments():
    runners = []
    res = run_segments(PROF, [Segment(1.0, 2), Segment(1.0, 4)], lambda core: runners.append(Ticks()) or runners[-1],
                       seed=0, tick_s=0.25)
    ticks = runners[0].ticks
    assert ticks == [0.25 * i for i in range(1, len(ticks) + 1)]
    end = res[0].seconds + res[1].seconds
    assert end - 0.25 < ticks[-1] <= end
    assert res[0].final_threshold is None and res[0].reconverge_s is None


def test_segment_results():
    assert SegmentResult("a", 2, 2.0, 0.0).throughput == 0.0
    assert SegmentResult("a", 2, 2.0, 2.0, tokens=10).throughput == 5.0
    assert [s.label for s in sweep_segments([1, 8], 3.0)] == ["C=1", "C=8"]
    assert [(s.seconds, s.concurrency, s.mean_accept_length) for s in sweep_segments([8], 3.0)] == [(3.0, 8, None)]


def test_policy_runner_validates_at_once_and_starts_at_the_initial_threshold():
    with pytest.raises(policies.PolicyError):
        policy_runner("ucb", {"c": -1}, PROF, 0)
    make = policy_runner("fixed", {"threshold": 9}, PROF, 0, GuardConfig(min_threshold=1), initial_threshold=4)
    runner = make(None)
    assert runner.threshold == 4 and runner.loop.guard_config.min_threshold == 1
    assert runner.loop.policy.max_batch_size == PROF.max_batch_size


def test_defaults_are_seed_0_and_the_default_tick():
    segs = [Segment(2, 4)]
    assert evaluate(PROF, segs, "never") == evaluate(PROF, segs, "never", seed=0, tick_s=0.5)
    seed = load_profile("seed")                                  # speculation loses everywhere: threshold 0
    two = [Segment(2, 2), Segment(2, 8)]
    assert best_static(seed, two) == best_static(seed, two, seed=0, tick_s=0.5)
    assert best_static(seed, two)["threshold"] == 0
    capped = [Segment(2, 2), Segment(2, 500)]                    # a level past max_batch_size runs at 256
    assert best_static(PROF, capped)["threshold"] == 2


def test_the_seed_picks_the_random_streams_and_defaults_to_0():
    one = [r.tokens for r in run_segments(PROF, [Segment(2, 8)], lambda core: StaticRunner(8), seed=1)]
    two = [r.tokens for r in run_segments(PROF, [Segment(2, 8)], lambda core: StaticRunner(8), seed=2)]
    zero = [r.tokens for r in run_segments(PROF, [Segment(2, 8)], lambda core: StaticRunner(8), seed=0)]
    assert one != two and zero == [r.tokens for r in run_segments(PROF, [Segment(2, 8)],
                                                                  lambda core: StaticRunner(8))]


def test_reconvergence_judges_by_the_live_accept_length():
    """At C=8 speculation wins at accept 2.6 and loses at 1.7: never is right only in the second segment."""
    rows = evaluate(PROF, [Segment(2, 8, 2.6), Segment(2, 8, 1.7)], "never")["rows"]
    assert [r["reconverge_s"] for r in rows] == [None, 0.0]


class Late(Scripted):
    switch_at = 3.2


def test_reconvergence_counts_from_the_segments_start(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "scripted", Late)
    res = run_segments(PROF, [Segment(2, 2), Segment(4, 2)], policy_runner("scripted", None, PROF, 0, FREE))
    start = res[0].seconds                                        # the second segment starts here
    assert res[1].reconverge_s == pytest.approx(3.5 - start)     # last wrong tick at 3.0


def test_one_draft_step_counts_as_speculation():
    from controller.sim.profile import parse_profile
    k1 = parse_profile({"spec_steps": 1, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.03],
                                                       "spec": [0.012, 0.05]},
                        "acceptance": {"mean_accept_length": 1.8}}, "k1")
    res = run_segments(k1, [Segment(1, 4)], lambda core: StaticRunner(64))[0]
    assert res.spec_batches == res.batches > 0


def test_policy_runner_passes_seed_and_max_batch_size():
    h200 = load_profile("h200-2b6")                                # max batch size 128
    runner = policy_runner("thompson", None, h200, 5)(None)
    assert (runner.loop.policy.seed, runner.loop.policy.max_batch_size, runner.threshold) == (5, 128, 0)


def test_a_trace_no_static_threshold_serves_reports_its_best_static_below_1():
    segs = [Segment(3, 8, 2.6), Segment(3, 8, 1.7), Segment(2, 8, 2.123456)]
    out = evaluate(PROF, segs, "never", seed=2, tick_s=0.25, with_static=True)
    assert out["best_static"] == {**best_static(PROF, segs, seed=2), "ratio": out["best_static"]["ratio"]}
    assert 0.5 < out["best_static"]["ratio"] < 0.999
    ratio = out["best_static"]["ratio"]
    assert ratio == pytest.approx(out["best_static"]["throughput_tok_s"] / out["overall"]["oracle_tok_s"], abs=2e-4)
    assert round(ratio, 4) == ratio != round(ratio, 3)                # four decimals
    assert out["rows"][2]["accept_length"] == 2.123
