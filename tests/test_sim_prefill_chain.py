"""The simulator's prefill as SGLang runs it: chained extends (requests arriving during an extend get their
own before the decode) and the draft's pass over the prompt at any threshold but 0 (profile keys
chained_extends, prefill_s_draft; bench/results/calibration-h200-chained.md)."""
import pytest

from controller.sim.evaluate import StaticRunner, run_segments
from controller.sim.finite import evaluate_finite, run_finite
from controller.sim.openeval import rate_segments
from controller.sim.openloop import OpenLoopCore, Request
from controller.sim.profile import parse_profile

BASE = {"spec_steps": 3, "noise": 0.0, "max_batch_size": 8, "prefill_s": 0.02, "prefill_s_per_request": 0.0,
        "prefill_s_per_token": 0.0, "step_time": {"batch_size": [1, 8], "off": [0.005, 0.005], "spec": [0.01, 0.01]},
        "acceptance": {"mean_accept_length": 2.0, "spread": 0.0}}


def profile(**keys):
    return parse_profile({**BASE, **keys}, "t")


def first_sample(prof, requests, speculate=False, threshold=None):
    """The core and its first decode sample; core.before: the extend batches run before that decode."""
    core = OpenLoopCore(prof, 0, requests=requests, threshold=threshold)
    core.before = core.extend_batches
    return core, core.step(speculate)


def test_an_arrival_during_an_extend_gets_its_own_extend_before_the_decode():
    reqs = [Request(0.0, 100, 50), Request(0.01, 100, 50)]          # the second arrives 10 ms into the first extend
    core, s = first_sample(profile(chained_extends=True), reqs)
    assert (s.batch_size, core.before, s.decode_only) == (2, 2, False)
    assert s.step_s == pytest.approx(0.02 + 0.02 + 0.005)           # two extends, then the decode
    core, s = first_sample(profile(), reqs)                          # one extend per interval (the old model)
    assert (s.batch_size, core.before) == (1, 1)
    assert s.step_s == pytest.approx(0.02 + 0.005)
    assert core.step(False).batch_size == 2                          # admitted after the decode


def test_a_chained_request_gets_its_first_token_when_its_own_extend_ends():
    reqs = [Request(0.0, 100, 2), Request(0.01, 100, 2)]
    core, _ = first_sample(profile(chained_extends=True), reqs)
    while not core.drained:
        core.step(False)
    ttft = sorted((round(x.arrival_t, 6), x.ttft_s) for x in core.take_finished())
    assert ttft[0][1] == pytest.approx(0.02) and ttft[1][1] == pytest.approx(0.04 - 0.01)


def test_an_arrival_after_the_extend_waits_for_the_decode():
    reqs = [Request(0.0, 100, 50), Request(0.021, 100, 50)]         # arrives during the decode, not the extend
    core, s = first_sample(profile(chained_extends=True), reqs)
    assert (s.batch_size, core.before) == (1, 1)
    assert core.step(False).batch_size == 2


def test_chains_stop_at_max_batch_size():
    reqs = [Request(0.0, 100, 50)] + [Request(0.001 * i, 100, 50) for i in range(1, 12)]
    core, s = first_sample(profile(chained_extends=True), reqs)
    assert s.batch_size == 8 and core.queue_len == 4


def test_the_draft_prefill_costs_where_the_plugin_would_run_it():
    prof = profile(prefill_s_draft=0.003)
    reqs = [Request(0.0, 100, 50)]
    assert first_sample(prof, reqs)[1].step_s == pytest.approx(0.02 + 0.003 + 0.005)
    assert first_sample(prof, reqs, threshold=0)[1].step_s == pytest.approx(0.02 + 0.005)
    assert prof.prefill_seconds(1, 100) == pytest.approx(0.02) and prof.prefill_seconds(1, 100, draft=True) == 0.023


def test_runs_follow_the_runners_threshold():
    prof = profile(prefill_s_draft=0.003)
    reqs = [Request(0.1 * i, 100, 3) for i in range(20)]            # each done before the next arrives
    never = run_finite(prof, reqs, lambda core: StaticRunner(0), threshold=0)
    static = run_finite(prof, reqs, lambda core: StaticRunner(0))   # threshold not known at first: draft
    five = run_finite(prof, reqs, lambda core: StaticRunner(5))
    assert [x.ttft_s for x in never.latencies][1:] == pytest.approx([x.ttft_s for x in static.latencies][1:])
    assert static.latencies[0].ttft_s == pytest.approx(never.latencies[0].ttft_s + 0.003)
    assert [x.ttft_s for x in never.latencies] == pytest.approx([0.02] * 20)
    # every request's prefill at threshold 5 runs the draft: each waits 3 ms more for its first token
    assert all(f.ttft_s == pytest.approx(n.ttft_s + 0.003) for f, n in zip(sorted(five.latencies, key=lambda x: x.arrival_t),
                                                                         sorted(never.latencies, key=lambda x: x.arrival_t)))
    short = profile(prefill_s_draft=0.003, load={"output_len_range": [3, 3]})
    one = evaluate_finite(short, [0.25], 4, thresholds={"never": 0, "static5": 5})["rows"][0]   # a single request
    assert one["requests"] == 1
    assert (one["modes"]["never"]["ttft_ms_median"], one["modes"]["static5"]["ttft_ms_median"]) == pytest.approx((20, 23))
    seg = rate_segments([0.5], 60)                                   # Poisson arrivals, almost every one alone
    ttft = lambda t: sorted(x.ttft_s for x in run_segments(short, seg, lambda c: StaticRunner(t), seed=1)[0].latencies)  # noqa: E731
    assert ttft(0)[len(ttft(0)) // 2] == pytest.approx(0.02) and ttft(5)[len(ttft(5)) // 2] == pytest.approx(0.023)


def test_profiles_without_the_keys_keep_the_old_model():
    prof = parse_profile(BASE, "t")
    assert (prof.chained_extends, prof.prefill_s_draft) == (False, 0.0)


def test_the_closed_loop_prices_the_draft_prefill_too():
    from controller.sim.core import SimCore
    prof = profile(prefill_s_draft=0.003)
    for threshold, extra in ((None, 0.003), (5, 0.003), (0, 0.0)):
        core = SimCore(prof, 0)
        core.threshold = threshold
        core.set_load(1)
        assert core.step(False).step_s == pytest.approx(0.005 + 0.02 + extra)


def test_a_prefill_into_a_busy_batch_skips_the_draft_at_a_threshold_above_0():
    """The plugin's rule with the kv writer (contract.prefill_skips_draft): the last decode batch plus the newcomers
    above the threshold -> no draft pass, so a busy server at a small threshold pays none per prefill."""
    prof = profile(prefill_s_draft=0.003, max_batch_size=64,
                   step_time={"batch_size": [1, 64], "off": [0.005, 0.005], "spec": [0.01, 0.01]})
    busy = [Request(0.0, 100, 500) for _ in range(20)] + [Request(0.2, 100, 500)]   # 20 running, then one arrives
    core = OpenLoopCore(prof, 0, requests=busy, threshold=5)
    core.step(False)          # the 20 prefilled before the first decode: 0 + 20 > 5, lean already
    while core.t < 0.2:
        s = core.step(False)
    s = core.step(False)      # the decode after the newcomer's prefill: 20 + 1 > 5, no draft pass
    assert not s.decode_only and s.step_s == pytest.approx(0.02 + 0.005)
    quiet = [Request(0.0, 100, 500), Request(0.2, 100, 500)]                          # 1 running + 1 <= 5
    core = OpenLoopCore(prof, 0, requests=quiet, threshold=5)
    while core.t < 0.2:
        s = core.step(True)
    s = core.step(True)
    assert not s.decode_only and s.step_s == pytest.approx(0.02 + 0.003 + 0.01)


def test_the_oracle_prefills_as_its_threshold_would():
    """The oracle speculates per batch size; the lean-prefill rule reads its threshold, the largest batch size at
    which it speculates. Before, it had none and every prefill ran the draft's pass (on draft_kv profiles such as
    h200-7b-open-tl2-kv the open-loop oracle then trailed never by 5 % in median TPOT at 12 req/s)."""
    from controller.sim.evaluate import OracleRunner
    prof = profile(prefill_s_draft=0.003, max_batch_size=64,       # accept 2: speculation pays up to batch 14
                   step_time={"batch_size": [1, 64], "off": [0.005, 0.008], "spec": [0.006, 0.030]})
    busy = [Request(0.0, 100, 500) for _ in range(20)] + [Request(0.2, 100, 500)]
    core = OpenLoopCore(prof, 0, requests=busy)
    oracle = OracleRunner(prof, core)
    assert oracle.threshold == 14 and oracle.speculate(14) and not oracle.speculate(15)
    while True:
        core.threshold = oracle.threshold
        s = core.step(oracle.speculate(core.batch_size))
        if not s.decode_only and core.t > 0.2:
            break
    assert s.batch_size == 21 and s.step_s == pytest.approx(0.02 + prof.step_seconds(21, False))   # no draft pass
    core.set_accept(1.0)                                             # speculation pays nowhere: threshold 0
    assert oracle.threshold == 0
