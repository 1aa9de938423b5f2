"""The simulator's open loop: arrivals, queue, admission, prefill, latencies; rate traces."""
import json
import statistics

import numpy as np
import pytest

from controller.sim.evaluate import StaticRunner, policy_runner, run_segments
from controller.sim.openeval import BASELINES, evaluate_open, latency_figures, rate_segments
from controller.sim.openloop import OpenLoopCore, RateSchedule
from controller.sim.profile import ProfileError, Segment, load_profile, load_trace, parse_profile

GOOD = {"spec_steps": 2, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.03], "spec": [0.015, 0.08]},
        "acceptance": {"mean_accept_length": 2.2}}


def run_core(core: OpenLoopCore, until: float, threshold: int = 0) -> list:
    samples = []
    while core.t < until:
        samples.append(core.step(core.batch_size <= threshold))
    return samples


def test_poisson_arrivals_follow_a_piecewise_rate_schedule():
    sched = RateSchedule([(0.0, 2.0), (100.0, 20.0)])
    rng = np.random.default_rng(0)
    t, times = 0.0, []
    while t < 200:
        t = sched.after(t, rng.exponential())
        times.append(t)
    first = sum(x < 100 for x in times)
    second = sum(100 <= x < 200 for x in times)
    assert abs(first - 200) < 4 * 200 ** 0.5 and abs(second - 2000) < 4 * 2000 ** 0.5
    looped = RateSchedule([(0.0, 1.0), (5.0, 3.0)], period=10.0)
    assert looped.rate(12.0) == 1.0 and looped.rate(17.0) == 3.0 and looped.next_change(12.0) == 15.0


def test_batch_sizes_fluctuate_and_stay_under_max_batch_size():
    prof = parse_profile({**GOOD, "max_batch_size": 32}, "t")
    core = OpenLoopCore(prof, 1, RateSchedule([(0.0, 3.0)]))
    sizes = [s.batch_size for s in run_core(core, 120)]
    assert statistics.pstdev(sizes) > 1.0 and max(sizes) <= 32
    overloaded = OpenLoopCore(prof, 1, RateSchedule([(0.0, 200.0)]))
    sizes = [s.batch_size for s in run_core(overloaded, 20)]
    assert max(sizes) == 32 and overloaded.queue_len > 100          # a queue forms, the batch is capped


def test_prefill_lengthens_the_interval_of_the_batch_it_joins():
    prof = parse_profile({**GOOD, "noise": 0.0, "prefill_s": 0.004, "prefill_s_per_request": 0.001,
                          "prefill_s_per_token": 1e-5, "load": {"prompt_len_range": [100, 100]}}, "t")
    core = OpenLoopCore(prof, 2, RateSchedule([(0.0, 5.0)]))
    samples = run_core(core, 60)
    busy = [s for s in samples if not s.decode_only]
    clean = [s for s in samples if s.decode_only]
    assert busy and clean
    for s in busy[:50]:
        extra = s.step_s - prof.step_seconds(s.batch_size, False)
        assert extra >= 0.004 + 0.001 + 100 * 1e-5 - 1e-9                # at least one request prefilled
    for s in clean[:50]:
        assert s.step_s == pytest.approx(prof.step_seconds(s.batch_size, False))


def test_latencies_are_counted_as_bench_serving_does():
    prof = load_profile("crossover-a")
    core = OpenLoopCore(prof, 3, RateSchedule([(0.0, 1.0)]))
    run_core(core, 120, threshold=256)
    done = core.take_finished()
    assert len(done) > 50 and not core.finished
    for lat in done:
        assert 0 < lat.ttft_s <= lat.e2e_s
        assert lat.tpot_s == pytest.approx((lat.e2e_s - lat.ttft_s) / (lat.output_len - 1))
    # below saturation every request is served: throughput = rate x mean output length
    res = run_segments(prof, rate_segments([4.0], 300), lambda c: StaticRunner(0), seed=3)[0]
    assert res.throughput == pytest.approx(4.0 * prof.output_len_expected, rel=0.1)   # 1,200 arrivals: sd 3 %


def test_arrivals_do_not_depend_on_the_decisions():
    prof = load_profile("crossover-a")
    seen = []
    for threshold in (0, 256):
        core = OpenLoopCore(prof, 4, RateSchedule([(0.0, 4.0)]))
        run_core(core, 30, threshold)
        arrivals = [x.arrival_t for x in core.finished] + list(core._arrival) + [a for a, _, _ in core.waiting]
        seen.append(sorted(a for a in arrivals if a < 25))
    assert len(seen[0]) > 60 and seen[0] == seen[1]


def test_profile_and_trace_open_loop_keys_are_checked(tmp_path):
    prof = parse_profile({**GOOD, "load": {"output_len_range": [77, 384], "prompt_len_range": [102, 512],
                                           "arrival_rate": [2, 12, 24]}}, "t")
    assert prof.output_len_expected == 230.5 and prof.open_loop_rates() == (2, 12, 24)
    assert parse_profile(GOOD, "t").open_loop_rates()                 # derived from the capacity
    with pytest.raises(ProfileError, match="output_len_range must be \\[low, high\\]"):
        parse_profile({**GOOD, "load": {"output_len_range": [300, 100]}}, "t")
    bad = tmp_path / "mixed.toml"
    bad.write_text("[[segment]]\nseconds = 5\nrate = 2\n[[segment]]\nseconds = 5\nconcurrency = 4\n")
    with pytest.raises(ProfileError, match="not a mix"):
        load_trace(str(bad))
    both = tmp_path / "both.toml"
    both.write_text("[[segment]]\nseconds = 5\nrate = 2\nconcurrency = 4\n")
    with pytest.raises(ProfileError, match="not both"):
        load_trace(str(both))
    ok = tmp_path / "rates.toml"
    ok.write_text("[[segment]]\nseconds = 5\nrate = 2.5\n")
    assert load_trace(str(ok)).segments[0] == Segment(5.0, 0, None, "", 2.5)


def test_evaluate_open_reports_policy_next_to_never_always_and_oracle():
    prof = load_profile("crossover-a")
    out = evaluate_open(prof, rate_segments([1.0, 5.0], 40), "bandit")
    assert json.loads(json.dumps(out))["load"] == "open"
    light, heavy = out["rows"]
    for r in out["rows"]:
        for key in ("tok_s", "tpot_ms_mean", "tpot_ms_median", "e2e_ms_median", "mean_batch_size"):
            assert r[key] is not None and all(r[m][key] is not None for m in BASELINES)
    # light load: speculation wins TPOT; near saturation never wins throughput (always falls behind)
    assert light["always"]["tpot_ms_median"] < 0.8 * light["never"]["tpot_ms_median"]
    assert heavy["always"]["tok_s"] < 0.97 * heavy["never"]["tok_s"]
    assert heavy["oracle"]["tok_s"] >= 0.99 * heavy["never"]["tok_s"]


def test_closed_loop_results_did_not_move():
    """The closed loop's numbers at the commit before the open loop (729c766), to the token."""
    prof = load_profile("crossover-a")
    res = run_segments(prof, [Segment(20, 8), Segment(20, 64, 1.8)], lambda c: StaticRunner(12), seed=0)
    assert [(r.tokens, r.batches, r.spec_batches) for r in res] == CLOSED_LOOP_GOLDEN


CLOSED_LOOP_GOLDEN = [(12376, 675, 675), (39936, 624, 0)]


# --- specctl simulate --arrival-rate, and the daemon's sim engine -------------------------------
def simulate(*args):
    from click.testing import CliRunner

    from controller.cli.main import cli
    return CliRunner().invoke(cli, ["simulate", *args])


def test_simulate_arrival_rate_json_table_and_plot(tmp_path):
    res = simulate("--profile", "crossover-a", "--arrival-rate", "1,4", "--seconds", "20", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["rate"] for r in out["rows"]] == [1.0, 4.0]
    assert {"tok_s", "tpot_ms_median", "e2e_ms_median", "never", "always", "oracle"} <= set(out["rows"][0])
    png = tmp_path / "o.png"
    res = simulate("--profile", "crossover-a", "--arrival-rate", "default", "--seconds", "5", "--plot", str(png))
    assert res.exit_code == 0 and "TPOT median ms" in res.output and png.read_bytes()[:4] == b"\x89PNG"
    assert res.stderr.splitlines() == [f"wrote {png}"]
    assert res.output.count("rate ") >= 3                    # one ratio line per profile rate


def test_simulate_rate_trace(tmp_path):
    trace = tmp_path / "rates.toml"
    trace.write_text('profile = "crossover-a"\n[[segment]]\nseconds = 10\nrate = 1\n'
                     '[[segment]]\nseconds = 10\nrate = 4\nmean_accept_length = 1.8\n')
    res = simulate("--trace", str(trace), "--json")
    out = json.loads(res.output)
    assert res.exit_code == 0 and out["trace"] == "rates" and [r["rate"] for r in out["rows"]] == [1.0, 4.0]


@pytest.mark.parametrize("args,needle", [
    (["--arrival-rate", "1,x"], "--arrival-rate"),
    (["--arrival-rate", "0"], "--arrival-rate"),
    (["--arrival-rate", "2", "--concurrency", "4"], "replaces --concurrency"),
])
def test_simulate_arrival_rate_bad_input_exit_2(args, needle):
    res = simulate("--seconds", "5", *args)
    assert res.exit_code == 2 and needle in res.output, res.output


def test_daemon_sim_engine_runs_an_open_loop():
    import threading

    from controller.daemon.engines.sim import SimEngine
    got, enough = [], threading.Event()

    def sink(sample):
        got.append(sample)
        if len(got) >= 3000:
            enough.set()
    engine = SimEngine(load_profile("crossover-a"), speed=1000.0, seed=0, start_t=500.0, arrival_rate=3.0)
    engine.start(sink)
    try:
        assert enough.wait(60)
    finally:
        engine.stop()
    sizes = {s.batch_size for s in got}
    assert got[0].t > 500 and len(sizes) > 5 and any(not s.decode_only for s in got)
    assert engine.health()["load"] == "rate=3/s"


def test_db_to_profile_fits_the_prefill_cost_and_writes_the_load(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from state.db import open_store
    db = open_store(tmp_path / "s.db")
    rng = np.random.default_rng(0)
    rows, t, prev = [], 0.0, 8
    for i in range(600):
        prefill = i % 3 == 0
        bs = int(min(16, prev + rng.integers(1, 4))) if prefill else int(max(4, prev - rng.integers(0, 2)))
        spec = (i // 6) % 2 == 0
        step = (0.01 + 0.001 * bs) * (2.0 if spec else 1.0)
        if prefill:
            step += 0.004 + 0.001 * max(bs - prev, 1)
        t += step
        rows.append((t, bs, 3 if spec else 0, round(bs * 2.5) if spec else bs, step, int(not prefill)))
        prev = bs
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    db.conn.commit()
    out = tmp_path / "h.toml"
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, str(root / "bench/gpu/db_to_profile.py"), str(tmp_path / "s.db"), str(out),
                          "--name", "h-test", "--prompt-len-range", "102,512", "--output-len-range", "77,384",
                          "--arrival-rate", "2,12,24"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    prof = load_profile(str(out))
    assert prof.prefill_s == pytest.approx(0.004, abs=5e-4)
    assert prof.prefill_s_per_request == pytest.approx(0.001, abs=3e-4)
    assert prof.output_len_range == (77, 384) and prof.arrival_rate == (2, 12, 24)


def test_open_loop_reconvergence_judges_the_batch_sizes_of_the_last_seconds():
    from controller.sim.evaluate import LiveSizes, evaluate
    lately = LiveSizes(5.0)
    for t, bs in ((1.0, 8), (2.0, 8), (6.5, 30)):
        lately.add(t, bs)
    assert lately.at_tick(7.0) == {8: 1, 30: 1}            # the batch at 1.0 s is older than 5 s
    since_last = LiveSizes(None)
    since_last.add(1.0, 8)
    assert since_last.at_tick(1.5) == {8: 1} and since_last.at_tick(2.0) == {8: 1}   # nothing new: kept
    since_last.add(2.1, 16)
    assert since_last.at_tick(2.5) == {16: 1}
    out = evaluate_open(load_profile("crossover-b"), list(load_trace("rate-steps").segments), "bandit")
    assert all(r["reconverge_s"] is not None and r["reconverge_s"] <= 20 for r in out["rows"][2:])
    with pytest.raises(ValueError, match="closed loop"):
        evaluate(load_profile("crossover-b"), rate_segments([4.0], 10), "bandit")


def test_one_token_requests_finish_at_their_prefill_and_the_clock_moves_on():
    from controller.sim.finite import Request, run_finite
    prof = parse_profile({**GOOD, "noise": 0.0, "prefill_s": 0.004, "prefill_s_per_request": 0.001,
                          "load": {"prompt_len_range": [100, 100], "output_len_range": [1, 3]}}, "t")
    core = OpenLoopCore(prof, 5, RateSchedule([(0.0, 1.0)]))
    samples = run_core(core, 300)                 # used to raise "step() with nothing running"
    assert samples and all(s.batch_size >= 1 for s in samples)
    assert any(lat.output_len == 1 for lat in core.take_finished())
    # a run whose last request has one token: its prefill is part of the run's duration
    run = run_finite(prof, [Request(0.0, 100, 3), Request(5.0, 100, 1)], lambda c: StaticRunner(0))
    assert run.duration_s == pytest.approx(5.0 + 0.004 + 0.001)
    assert run.output_tokens == 4 and len(run.latencies) == 2



def test_a_quiet_server_speculates_as_always_on_would():
    """One request per 20 s (h200-2b6, where speculation pays at batch 1): the engine is idle between them and
    sends no samples, so every request starts after the guard's fallback_after_s of silence. The bandit must
    route them with what it learned: a fixed fallback of 0 ran the first batches of each without speculation
    (37 % of batches speculated, median TPOT 1.14x always-on's)."""
    prof = load_profile("h200-2b6")
    segs = rate_segments((0.05,), 600)
    bandit = run_segments(prof, segs, policy_runner("bandit", {}, prof, 0), 0)[0]
    always = run_segments(prof, segs, lambda core: StaticRunner(prof.max_batch_size), 0)[0]
    assert bandit.spec_batches / bandit.batches > 0.9
    tpot = [latency_figures(r.latencies)["tpot_ms_median"] for r in (bandit, always)]
    assert tpot[0] < 1.03 * tpot[1]


def test_a_rate_far_above_capacity_queues_at_most_max_waiting():
    """Every arrival was queued: at 1e6 requests/s (the top of --arrival-rate and of the daemon's [sim] arrival_rate)
    memory grew ~20 MB a second of simulated time, without bound in the daemon's looped schedule."""
    core = OpenLoopCore(parse_profile(GOOD, "t"), 0, RateSchedule([(0.0, 1e6)]))
    run_core(core, 1.0)
    assert core.queue_len == 100_000                     # full (MAX_WAITING), and no more than that
    served = core.output_tokens
    run_core(core, 2.0)
    assert core.queue_len == 100_000 and core.output_tokens > served      # still serving, from the full queue


def test_simulate_at_a_rate_far_above_capacity_answers_within_a_memory_limit(tmp_path):
    """The operator's view: `specctl simulate --arrival-rate 1e6` under a 1 GiB data limit prints its table and exits
    0 (it ran out of memory with a traceback, or ran on, queueing every arrival)."""
    import resource
    import subprocess
    import sys
    limit = 1 << 30

    def cap():
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    done = subprocess.run([sys.executable, "-m", "controller.cli", "simulate", "--arrival-rate", "1e6",
                           "--seconds", "30", "--json"], capture_output=True, text=True, timeout=120, preexec_fn=cap,
                          env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr[-2000:])
    rows = json.loads(done.stdout)["rows"]
    assert [r["rate"] for r in rows] == [1e6] and rows[0]["tok_s"] > 0
