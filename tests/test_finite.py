"""Finite open-loop runs as sglang.bench_serving makes them (controller.sim.finite), their CLI
option, and db_to_profile's prefill fit on a synthetic database with known prefill costs."""
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.sim.evaluate import StaticRunner
from controller.sim.finite import bench_serving_requests, evaluate_finite, run_finite
from controller.sim.openloop import Request
from controller.sim.profile import parse_profile
from state.db import open_store

ROOT = Path(__file__).resolve().parent.parent
FLAT = {"spec_steps": 2, "noise": 0.0, "prefill_s": 0.05, "prefill_s_per_request": 0.0,
        "step_time": {"batch_size": [1, 64], "off": [0.01, 0.01], "spec": [0.02, 0.02]},
        "acceptance": {"mean_accept_length": 2.0, "spread": 0.0},
        "load": {"prompt_len_range": [100, 100], "output_len_range": [11, 11]}}


def test_throughput_counts_the_drain_and_tpot_is_bench_servings():
    prof = parse_profile(FLAT, "flat")
    # one request: prefill 50 ms gives its first token, then 10 decode steps of 10 ms
    run = run_finite(prof, [Request(0.0, 100, 11)], lambda core: StaticRunner(0))
    (lat,) = run.latencies
    assert lat.ttft_s == pytest.approx(0.05) and lat.e2e_s == pytest.approx(0.15)
    assert run.duration_s == pytest.approx(0.15) and run.tok_s == pytest.approx(11 / 0.15)
    assert run.summary()["tpot_ms_median"] == pytest.approx(10.0)        # (E2E - TTFT) / (11 - 1)
    # a second request at 1 s: the idle gap and its drain are in the duration
    two = run_finite(prof, [Request(0.0, 100, 11), Request(1.0, 100, 11)], lambda core: StaticRunner(0))
    assert two.duration_s == pytest.approx(1.15) and two.tok_s == pytest.approx(22 / 1.15)
    assert [x.e2e_s for x in two.latencies] == pytest.approx([0.15, 0.15])
    # bench_serving sleeps one more gap after the last request: a later loop end is the duration
    late = run_finite(prof, [Request(0.0, 100, 11)], lambda core: StaticRunner(0), loop_end_s=2.0)
    assert late.duration_s == pytest.approx(2.0) and late.tok_s == pytest.approx(11 / 2.0)


def test_bench_serving_requests_are_the_measured_ones():
    """loads.py's rate-2 repeat-0 run (seed 2): 12 requests, 2810 output tokens; measured 807.2
    tok/s means 3.48 s, which starts after the last arrival (2.32 s) and ends one E2E (~1.2 s) later."""
    reqs, loop_end = bench_serving_requests(2.0, 12, 2, (102, 512), (76, 384))
    assert len(reqs) == 12 and reqs[0].arrival == 0.0
    assert sum(r.output for r in reqs) == 2810 and sum(r.prompt for r in reqs) == 3043
    assert reqs[-1].arrival == pytest.approx(2.32, abs=0.01) and loop_end > reqs[-1].arrival
    assert all(102 <= r.prompt <= 512 and 76 <= r.output <= 384 for r in reqs)
    assert bench_serving_requests(2.0, 12, 2, (102, 512), (76, 384)) == (reqs, loop_end)


def test_evaluate_finite_runs_rate_x_seconds_requests_per_seed():
    prof = parse_profile(FLAT, "flat")
    out = evaluate_finite(prof, [2.0, 5.0], 4.0, seeds=[0, 1], thresholds={"never": 0})
    assert [r["requests"] for r in out["rows"]] == [8, 20]
    for row in out["rows"]:
        runs = row["modes"]["never"]["runs"]
        assert [r["seed"] for r in runs] == [0, 1] and all(r["requests"] == row["requests"] for r in runs)
        assert all(r["tpot_ms_median"] >= 10.0 for r in runs)            # a decode step, plus others' prefills


def cli_run(*args):
    return CliRunner().invoke(cli, ["simulate", *args])


@pytest.mark.parametrize("args, message", [
    (["--finite"], "--finite needs --arrival-rate"),
    (["--finite", "--concurrency", "4"], "--finite needs --arrival-rate"),
    (["--finite", "--arrival-rate", "0.1", "--seconds", "5"], "at least one request"),
    (["--repeats", "2", "--arrival-rate", "2"], "--repeats needs --finite"),
    (["--finite", "--arrival-rate", "2", "--repeats", "0"], "--repeats 0 out of range"),
    (["--finite", "--arrival-rate", "x"], "not a comma-separated list"),
    (["--finite", "--arrival-rate", "1000000", "--seconds", "1000"], "at most 100,000"),
    (["--finite", "--arrival-rate", "2", "--seed", "4294967295", "--repeats", "3"], "pass 2**32 - 1"),
])
def test_finite_option_is_validated(args, message):
    res = cli_run(*args)
    assert res.exit_code == 2 and message in res.output


def test_finite_option_reports_each_rate_and_mode():
    res = cli_run("--profile", "crossover-a", "--policy", "never", "--arrival-rate", "2,4", "--seconds", "3",
                  "--finite", "--repeats", "2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["load"] == "finite" and out["seeds"] == [0, 1]
    assert [(r["rate"], r["requests"]) for r in out["rows"]] == [(2.0, 6), (4.0, 12)]
    assert set(out["rows"][0]["modes"]) == {"never", "always", "oracle", "policy"}
    assert all(len(m["runs"]) == 2 for m in out["rows"][0]["modes"].values())


# --- db_to_profile's prefill fit ------------------------------------------------------------
def synthetic_db(path: Path, a: float, b: float) -> None:
    """Decode steps at 10 ms (off) and 20 ms (spec) + 0.1 ms x batch size; every 8th step admits n
    requests whose extend batch costs a + b x n and, as under the overlap scheduler, lands in the
    interval before the flagged one (which holds only a little of it); some idle gaps too."""
    import random
    rng = random.Random(1)
    db = open_store(path)
    rows, t, bs = [], 0.0, 4
    step = lambda bs, spec: (0.02 if spec else 0.01) + 0.0001 * bs      # noqa: E731
    for i in range(4000):
        spec = (i // 500) % 2 == 1
        s = step(bs, spec) * (1 + 0.01 * rng.random())
        decode_only = True
        if i % 8 == 7:                          # the interval before the flag holds most of the extend batch
            n = rng.randint(1, 5)
            cost = a + b * n
            rows.append((t, bs, 3 if spec else 0, bs, s + 0.9 * cost, 1))
            bs = min(bs + n, 60)
            s = step(bs, spec) + 0.1 * cost
            decode_only = False
            if i % 200 == 7:
                s += 0.3 + rng.random()        # an idle gap before the request came
        elif i % 8 == 3 and bs > 8:
            bs -= rng.randint(1, 5)            # requests finishing (outside the prefill events)
        t += s
        rows.append((t, bs, 3 if spec else 0, bs, s, int(decode_only)))
    db.conn.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", rows)
    db.conn.commit()


def test_prefill_fit_recovers_known_costs(tmp_path):
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    import db_to_profile
    synthetic_db(tmp_path / "s.db", a=0.004, b=0.018)
    m = db_to_profile.measure(str(tmp_path / "s.db"))
    medians = {(bs, spec): v for spec, key in ((False, "off"), (True, "spec")) for bs, v in zip(m["batch_size"], m[key])}
    fit = db_to_profile.fit_prefill(str(tmp_path / "s.db"), medians)
    assert fit["prefill_s_per_request"] == pytest.approx(0.018, abs=0.002)
    assert fit["prefill_s"] == pytest.approx(0.004, abs=0.003)
    assert fit["left_out"] >= 10                               # the idle gaps


class Told(StaticRunner):
    """A static runner keeping what it is told after each batch: (batch size, interval, measured)."""

    def __init__(self):
        super().__init__(0)
        self.told = []

    def after_batch(self, sample, measured=True):
        self.told.append((sample.batch_size, sample.step_s, measured))


def test_a_step_after_the_engine_idled_is_not_measured_as_the_plugin_sends_none():
    # the plugin's telemetry restarts its clock at an idle pass (telemetry.flush): the first step after
    # the 0.85 s idle gap before the second request must not reach a control loop as a 0.9 s step
    prof = parse_profile(FLAT, "flat")
    runners = []
    run_finite(prof, [Request(0.0, 100, 11), Request(1.0, 100, 11)], lambda core: runners.append(Told()) or runners[-1])
    told = runners[0].told
    assert len(told) == 20                                    # every batch is told (the evaluation counts them)
    unmeasured = [i for i, (_, _, measured) in enumerate(told) if not measured]
    # the first step after the start (the plugin's clock starts unset) and the second request's first step
    assert unmeasured == [0, 10]
    assert told[10][1] == pytest.approx(0.85 + 0.05 + 0.01)   # (its interval held the gap, its prefill, the step)
    assert max(step for _, step, measured in told if measured) == pytest.approx(0.01)   # decode steps only


def test_the_control_loop_observes_only_measured_steps():
    from controller.sim.evaluate import policy_runner
    prof = parse_profile(FLAT, "flat")
    make, observed = policy_runner("bandit", {}, prof, 0), []

    def maker(core):
        runner = make(core)
        observe = runner.loop.observe
        runner.loop.observe = lambda sample: (observed.append(sample.step_s), observe(sample))
        return runner
    run = run_finite(prof, [Request(0.0, 100, 11), Request(1.0, 100, 11)], maker)
    assert len(observed) == run.batches - 2 and max(observed) < 0.05  # all but the first and the one after the idle pass
