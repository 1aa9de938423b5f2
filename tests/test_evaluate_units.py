"""controller/sim/evaluate.py and openeval.py, piece by piece on short runs: the live batch sizes a tick
judges re-convergence on (closed and open loop), exploit_loss, the runners, the closed loop's refusal of
rate segments, openeval's summaries and rows on hand-made results. Fast on purpose: the mutation run
(bench/mutation.py, group oracle-eval) runs these first."""
from __future__ import annotations

import pytest

import controller.sim.evaluate as ev
import policies
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from controller.sim.evaluate import (
    LiveSizes,
    LoopRunner,
    OracleRunner,
    Runner,
    SegmentResult,
    StaticRunner,
    best_static,
    evaluate,
    exploit_loss,
    make_core,
    policy_runner,
    run_segments,
)
from controller.sim.openeval import BASELINES, latency_figures, mode_makers, rate_segments, row, summary
from controller.sim.openloop import Latency
from controller.sim.profile import Segment, load_profile, parse_profile
from policies import Decision, Policy, make_policy

PROF = load_profile("crossover-a")          # spec wins at C=2, loses at C=64


def test_open_loop_live_sizes_are_those_of_the_last_span():
    lately = LiveSizes(5.0)
    for t, bs in ((1.0, 8), (2.0, 8), (6.5, 30)):
        lately.add(t, bs)
    assert lately.at_tick(7.0) == {8: 1, 30: 1}            # the batch at 1.0 s is older than 5 s
    assert lately.at_tick(7.0) == {8: 1, 30: 1}            # and a second tick at the same time keeps the rest
    assert lately.at_tick(8.0) == {30: 1}                  # the batch at 2.0 s leaves, its count with it
    lately.add(8.1, 30)
    assert lately.at_tick(9.0) == {30: 2}
    assert lately.at_tick(11.5) == {30: 2}                 # exactly 5 s old: still counted
    assert lately.at_tick(11.6) == {30: 1}
    assert lately.at_tick(20.0) == {}


def test_closed_loop_live_sizes_are_those_since_the_tick_before():
    since_last = LiveSizes(None)
    assert since_last.at_tick(0.5) == {}
    since_last.add(1.0, 8)
    since_last.add(1.2, 8)
    assert since_last.at_tick(1.5) == {8: 2} and since_last.at_tick(2.0) == {8: 2}   # nothing new: kept
    since_last.add(2.1, 16)
    assert since_last.at_tick(2.5) == {16: 1}
    since_last.add(2.6, 16)
    since_last.add(2.7, 4)
    assert since_last.at_tick(3.0) == {16: 1, 4: 1}
    assert since_last.at_tick(100.0) == {16: 1, 4: 1}     # no span: age never drops a batch


class Recording(LoopRunner):
    """The never policy's loop runner, keeping (end time, batch size) of every batch it is told of."""

    def __init__(self):
        super().__init__(ControlLoop(make_policy("never", None, max_batch_size=PROF.max_batch_size), None, 0))
        self.batches = []

    def after_batch(self, sample, measured=True):
        self.batches.append((sample.t, sample.batch_size))
        super().after_batch(sample, measured)


def judged(monkeypatch, segments, tick_s, loss_at):
    """run_segments with exploit_loss replaced: loss_at(tick) is the loss each tick reports; returns the
    results, the runner and, per tick, (batches run before it, the live batch sizes it was given)."""
    runners, ticks = [], []

    def fake_loss(profile, accept, seen, runner):
        ticks.append((len(runner.batches), dict(seen)))
        return loss_at(len(ticks) * tick_s)
    monkeypatch.setattr(ev, "exploit_loss", fake_loss)
    res = run_segments(PROF, segments, lambda core: runners.append(Recording()) or runners[-1], 1, tick_s)
    return res, runners[0], ticks


def test_open_loop_ticks_judge_the_batches_of_the_last_5_s_and_losses_over_1_percent(monkeypatch):
    segs = rate_segments([4.0, 4.0], 6)
    loss_at = lambda t: 0.02 if t <= 2.0 else 0.009 if t <= 6.0 else 0.0101 if t <= 8.0 else 0.01   # noqa: E731
    res, runner, ticks = judged(monkeypatch, segs, 0.5, loss_at)
    batches = runner.batches
    assert len(ticks) >= 22 and len(batches) > 100
    for k, (n, seen) in enumerate(ticks, 1):
        tick = k * 0.5
        assert batches[n - 1][0] >= tick and (n == 1 or batches[n - 2][0] < tick)   # right after the batch past it
        first = 0 if n <= res[0].batches else res[0].batches        # a segment judges its own batches
        want = {}
        for t, bs in batches[first:n]:
            if t >= tick - 5.0:
                want[bs] = want.get(bs, 0) + 1
        assert seen == want, tick
    assert [r.concurrency for r in res] == [0, 0]                # no clients in the open loop: rows carry 0
    n0 = res[0].batches
    assert res[0].batch_size_sum == sum(bs for _, bs in batches[:n0]) and len(batches) == n0 + res[1].batches
    assert res[1].batch_size_sum == sum(bs for _, bs in batches[n0:])
    assert res[1].mean_batch_size == res[1].batch_size_sum / res[1].batches > 1
    start = make_core(PROF, segs, 1).t                           # the open loop starts at its first arrival
    assert 0 < start < 0.5
    assert res[0].reconverge_s == pytest.approx(2.5 - start)      # the last tick over 1 %: 2.0
    assert res[1].reconverge_s == pytest.approx(8.5 - start - res[0].seconds)   # 0.0101 > 1 %, 0.01 is not


def test_closed_loop_ticks_judge_the_batches_since_the_tick_before_and_any_loss(monkeypatch):
    segs = [Segment(2, 4), Segment(1.5, 8)]
    res, runner, ticks = judged(monkeypatch, segs, 0.25, lambda t: 1e-9 if t <= 1.0 or t > 2.5 else 0.0)
    batches = runner.batches
    prev_n, want = 0, {}
    for k, (n, seen) in enumerate(ticks, 1):
        assert batches[n - 1][0] >= k * 0.25 and (n == 1 or batches[n - 2][0] < k * 0.25)
        if n > prev_n:
            want = {}
            for _, bs in batches[max(prev_n, 0 if n <= res[0].batches else res[0].batches):n]:
                want[bs] = want.get(bs, 0) + 1
        assert seen == want, k
        prev_n = n
    assert {bs for _, bs in batches} == {4, 8} and len(ticks) == int((res[0].seconds + res[1].seconds) / 0.25)
    assert res[0].reconverge_s == 1.25 and res[1].reconverge_s is None      # still wrong at the end


class Fixed(Runner):
    def __init__(self, spec):
        self.spec = spec

    def speculate(self, batch_size):
        return self.spec

    def exploit_speculates(self, batch_size):
        return self.spec


def test_exploit_loss_is_the_traffic_weighted_share_lost_against_the_better_mode():
    accept = 2.6                                   # not the profile's 2.3: the live accept length is the one read
    seen = {2: 3, 64: 1}
    spec, off = ({bs: PROF.tok_per_s(bs, m, accept) for bs in seen} for m in (True, False))
    assert spec[2] > off[2] and off[64] > spec[64]
    want_always = (1 * (off[64] - spec[64]) / off[64]) / 4
    want_never = (3 * (spec[2] - off[2]) / spec[2]) / 4
    assert exploit_loss(PROF, accept, seen, Fixed(True)) == pytest.approx(want_always, rel=1e-12)
    assert exploit_loss(PROF, accept, seen, Fixed(False)) == pytest.approx(want_never, rel=1e-12)
    assert exploit_loss(PROF, accept, {}, Fixed(True)) == 0.0
    assert exploit_loss(PROF, accept, seen, StaticRunner(4)) is None      # no learned threshold
    assert exploit_loss(PROF, accept, {}, StaticRunner(4)) == 0.0


def test_the_runner_base_class():
    r = Runner()
    with pytest.raises(NotImplementedError):
        r.speculate(1)
    assert r.threshold is None and r.exploit_speculates(3) is None
    assert r.after_batch(None) is None and r.tick(1.0) is None


def test_evaluate_refuses_rate_segments():
    with pytest.raises(ValueError, match=r"^evaluate\(\) is the closed loop: give rate segments to "
                                         r"openeval.evaluate_open\(\)$"):
        evaluate(PROF, rate_segments([4.0], 10), "bandit")


def exact_profile():
    """Every step takes 1/64 s (exact in binary), one token per request and step, no noise, no prefill:
    virtual time lands exactly on segment ends and ticks."""
    return parse_profile({"spec_steps": 1, "noise": 0.0, "prefill_s": 0.0, "prefill_s_per_request": 0.0,
                          "prefill_s_per_token": 0.0,
                          "step_time": {"batch_size": [1, 64], "off": [1 / 64, 1 / 64], "spec": [1 / 64, 1 / 64]},
                          "acceptance": {"mean_accept_length": 1.0, "spread": 0.0}}, "exact64")


def test_an_exact_tie_between_static_thresholds_keeps_the_lowest():
    """Every threshold delivers exactly 384 tok/s (a tie to the last bit, equal to its rounded figure)."""
    flat = exact_profile()
    segs = [Segment(3, 4), Segment(3, 8)]
    for t in (0, 4, 8):
        res = run_segments(flat, segs, lambda core, t=t: StaticRunner(t))
        assert sum(r.tokens for r in res) / sum(r.seconds for r in res) == 384.0
    assert best_static(flat, segs) == {"threshold": 0, "throughput_tok_s": 384.0}


# --- openeval: one mode's summary, one row, the runner makers, on hand-made results -------------------------
def lat(ttft, e2e, n):
    return Latency(ttft, e2e, n)


def result(tokens=100, seconds=3.0, batches=3, spec=1, bs_sum=10, latencies=(), **kw):
    return SegmentResult("s", 0, 2.0, seconds, tokens=tokens, batches=batches, spec_batches=spec,
                         batch_size_sum=bs_sum, latencies=list(latencies), **kw)


def test_latency_figures_are_bench_servings_means_and_medians_in_ms():
    got = latency_figures([lat(0.1, 1.1, 11), lat(0.2, 0.5, 4), lat(0.3, 3.3, 7), lat(0.05, 0.2, 1)])
    # TPOT: 0.1, 0.1, 0.5 (a one-token request has none); E2E 0.2 0.5 1.1 3.3; TTFT 0.05 0.1 0.2 0.3
    assert got == {"tpot_ms_mean": round(1000 * 0.7 / 3, 3), "tpot_ms_median": 100.0, "e2e_ms_median": 800.0,
                   "ttft_ms_median": 150.0, "requests": 4}
    assert got["tpot_ms_mean"] == 233.333                      # three decimals
    assert latency_figures([lat(0.0011234, 0.0021234, 2)])["ttft_ms_median"] == 1.123
    assert latency_figures([]) == {"tpot_ms_mean": None, "tpot_ms_median": None, "e2e_ms_median": None,
                                   "ttft_ms_median": None, "requests": 0}
    assert latency_figures([lat(0.1, 0.4, 1)]) == {"tpot_ms_mean": None, "tpot_ms_median": None,
                                                   "e2e_ms_median": 400.0, "ttft_ms_median": 100.0, "requests": 1}


def test_summary_is_tok_s_latencies_mean_batch_size_and_spec_share():
    got = summary(result(tokens=100, seconds=3.0, batches=3, spec=1, bs_sum=10, latencies=[lat(0.1, 1.1, 11)]))
    assert got == {"tok_s": 33.33, "tpot_ms_mean": 100.0, "tpot_ms_median": 100.0, "e2e_ms_median": 1100.0,
                   "ttft_ms_median": 100.0, "requests": 1, "mean_batch_size": 3.33, "spec_share": 0.3333}
    got = summary(result(tokens=7, seconds=2.0, batches=7, spec=6, bs_sum=47))
    assert (got["tok_s"], got["mean_batch_size"], got["spec_share"]) == (3.5, 6.71, 0.8571)
    empty = summary(result(tokens=0, seconds=0.0, batches=0, spec=0, bs_sum=0))
    assert (empty["tok_s"], empty["mean_batch_size"], empty["spec_share"], empty["requests"]) == (0.0, 0.0, 0.0, 0)


def test_a_row_sets_the_policy_next_to_each_baseline():
    mine = result(tokens=300, seconds=3.0, final_threshold=7, reconverge_s=1.5, rate=2.0,
                  latencies=[lat(0.1, 1.1, 11)])
    mine.accept_length = 2.34567
    base = {"never": result(tokens=330, latencies=[lat(0.1, 2.1, 11)]),
            "always": result(tokens=270, latencies=[lat(0.1, 0.6, 11)]),
            "oracle": result(tokens=360, latencies=[lat(0.1, 0.9, 11)])}
    out = row(mine, base)
    assert {k: out[k] for k in ("segment", "rate", "accept_length", "seconds", "final_threshold", "reconverge_s")} == \
        {"segment": "s", "rate": 2.0, "accept_length": 2.346, "seconds": 3.0, "final_threshold": 7, "reconverge_s": 1.5}
    assert out["tok_s"] == out["throughput_tok_s"] == 100.0 and out["oracle_tok_s"] == 120.0
    assert {name: out[name]["tok_s"] for name in BASELINES} == {"never": 110.0, "always": 90.0, "oracle": 120.0}
    assert out["ratio"] == round(100 / 120, 4)
    assert out["tok_s_vs_best_fixed"] == round(100 / 110, 4)                   # never is the better fixed tok/s
    assert out["tpot_vs_best_fixed"] == 2.0                                    # 100 ms over always' 50 ms
    assert out["tpot_ms_median"] == 100.0 and out["requests"] == 1
    # a baseline with no finished request leaves the TPOT ratio to the other one
    base["always"] = result(tokens=270)
    assert row(mine, base)["tpot_vs_best_fixed"] == 0.5                        # over never's 200 ms


def test_mode_makers_are_the_policy_the_fixed_thresholds_and_the_oracle():
    makers = mode_makers(PROF, "fixed", {"threshold": 9}, 3, GuardConfig(min_threshold=1))
    assert list(makers) == ["policy", "never", "always", "oracle"]
    runners = {name: make(None) for name, make in makers.items() if name != "oracle"}
    policy = runners["policy"].loop.policy
    assert runners["policy"].threshold == 1 == runners["policy"].loop.guard_config.min_threshold   # the floor
    assert (policy.name, policy.params["threshold"], policy.seed, policy.max_batch_size) == \
        ("fixed", 9, 3, PROF.max_batch_size)
    assert (runners["never"].threshold, runners["always"].threshold) == (0, PROF.max_batch_size)
    core = object()
    oracle = makers["oracle"](core)
    assert isinstance(oracle, OracleRunner) and oracle.profile is PROF and oracle.core is core
    only = mode_makers(PROF, None, None, 0, thresholds={"t4": 4, "t9": 9})
    assert list(only) == ["t4", "t9", "oracle"] and [only[n](None).threshold for n in ("t4", "t9")] == [4, 9]
    assert list(mode_makers(PROF, None, None, 0, thresholds={})) == ["oracle"]


class Turning(Policy):
    """Threshold 0 until 1.2 s, then 64."""

    name = "turning"

    def decide(self, snap):
        t = 0 if snap.now < 1.2 else 64
        return Decision(t, t, "turning")


def test_loop_runner_records_the_first_tick_and_every_change(monkeypatch):
    monkeypatch.setitem(policies.POLICIES, "turning", Turning)
    free = GuardConfig(stabilisation_s=0, max_step_buckets=1000, changes_per_min=0, min_gain=0)
    kept = []
    run_segments(PROF, [Segment(3, 8)], policy_runner("turning", None, PROF, 0, free), 0, 0.5, kept)
    assert kept[0].ticks == [(0.5, 0, False), (1.5, 64, False)]       # the first tick though nothing changed
    assert kept[0].changes == [1.5] and kept[0].threshold == 64


def test_a_segment_ends_at_the_first_step_that_reaches_its_end_and_a_tick_at_the_step_that_reaches_it(monkeypatch):
    prof = exact_profile()
    at_tick = []
    monkeypatch.setattr(ev, "exploit_loss", lambda profile, accept, seen, runner:
                        at_tick.append(len(runner.batches)) or (1e-9 if len(at_tick) <= 5 else 0.0))
    runners = []
    res = run_segments(prof, [Segment(3, 4), Segment(1, 8)], lambda core: runners.append(Recording()) or runners[-1],
                       0, 0.5)
    assert [(r.batches, r.seconds, r.tokens) for r in res] == [(192, 3.0, 768), (64, 1.0, 512)]
    assert at_tick == [32 * k for k in range(1, 9)]             # the tick at 0.5 s right after the 32nd batch
    # the last wrong tick (2.5 s) lasts to the segment's end (3.0 s): still wrong at the end
    assert res[0].reconverge_s is None and res[1].reconverge_s == 0.0


def test_best_static_compares_unrounded_throughputs(monkeypatch):
    """0 gives 100.004 tok/s, 5 gives 100.003: 0 is the better threshold although 100.003 exceeds the
    reported (rounded) 100.0."""
    from types import SimpleNamespace
    tput = {0: 100.004, 5: 100.003}

    def fake_run_segments(profile, segments, make, seed, tick_s):
        return [SimpleNamespace(tokens=tput[make(None).threshold], seconds=1.0)]
    monkeypatch.setattr(ev, "run_segments", fake_run_segments)
    prof = load_profile("seed")
    assert ev.best_static(prof, [Segment(10.0, 5)]) == {"threshold": 0, "throughput_tok_s": 100.0}


@pytest.mark.parametrize("kwargs, words", [({"seconds": 0, "concurrency": 8}, "more than 0 s"),
                                           ({"seconds": 5, "concurrency": 0}, "concurrency >= 1"),
                                           ({"seconds": 5, "concurrency": 0, "rate": 0.0}, "rate > 0")])
def test_a_segment_built_in_code_is_checked_where_it_is_made(kwargs, words):
    # before: evaluate() died of ZeroDivisionError / TypeError deep in the loop on a zero-length segment
    with pytest.raises(ValueError, match=words):
        Segment(**kwargs)
