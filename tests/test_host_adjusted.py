"""bench/gpu/host_adjusted.py: each label against the no-spec engine at equal host speed. Synthetic runs whose
tok/s follows a known engine effect and a host speed that moves both engines (as the lent H200's did): the fit
recovers the effect, and without the covariate it cannot say as much."""
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench/gpu"))
from host_adjusted import fit, interval, over_aa, runs_of, t975, table  # noqa: E402


def timeline(path: Path, effect: float, seed: int, level: int = 128, runs: int = 3, extends: bool = True,
             call_speed: float = 1.0, cpu_excess: float = 1.0) -> None:
    """A call's TIMELINE rows: per repeat a nospec and an off run, each on a host whose speed h moves its prefills'
    runner CPU (9 ms / h) and its tok/s (h ** 0.4, the elasticity seen on the H200), off times `effect`."""
    rnd, rows = random.Random(seed), []
    for repeat in range(runs):
        for label in ("nospec", "off"):
            h = rnd.choice([1.0, 1.0, 0.9, 0.6])                  # now and then a slow spell
            tok = 12000 * call_speed * (effect if label == "off" else 1.0) * h ** 0.4 * rnd.gauss(1, 0.003)
            kinds = {"decode": {"n": 900, "runner_cpu_ms": 0.5 / h}}     # the host moves it too
            if extends:
                own = cpu_excess if label == "off" else 1.0          # the engine's own share of that CPU
                kinds["extend"] = {"n": 300, "runner_cpu_ms": 9.0 / h * own * rnd.gauss(1, 0.01)}
            rows.append({"label": label, "shape": "closed", "level": level, "repeat": repeat, "tok_s": tok,
                         "kinds": kinds})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("effect", [0.965, 1.0])
def test_the_fit_recovers_the_engines_effect_through_the_hosts_noise(tmp_path, effect):
    paths = []
    for call, speed in enumerate([1.0, 0.92, 1.05, 0.97, 1.02, 0.95]):      # calls on hosts of different speed
        p = tmp_path / f"call{call}.jsonl"
        timeline(p, effect, seed=call, call_speed=speed)
        paths.append(str(p))
    runs = [r for r in runs_of(paths) if r["level"] == 128]
    adjusted, plain = fit(runs, "off", "prefill"), fit(runs, "off", None)
    assert adjusted["runs"] == adjusted["base_runs"] == 18 and adjusted["calls"] == 6
    assert adjusted["ratio"] == pytest.approx(effect, abs=0.005)
    assert adjusted["low"] < effect < adjusted["high"] and adjusted["high"] - adjusted["low"] < 0.02
    assert adjusted["elasticity"] == pytest.approx(-0.4, abs=0.05)
    # the pairs alone: the slow spells widen the interval several times over
    assert (plain["high"] - plain["low"]) > 3 * (adjusted["high"] - adjusted["low"])


def test_without_extends_only_the_plain_fit_and_too_few_runs_say_nothing(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    timeline(a, 0.97, seed=1, level=48, extends=False)
    timeline(b, 0.97, seed=2, level=16, runs=1)
    runs = runs_of([str(a), str(b)])
    steady = [r for r in runs if r["level"] == 48]
    assert fit(steady, "off", "prefill") is None and fit(steady, "off", None) is not None
    assert fit([r for r in runs if r["level"] == 16], "off", None) is None      # 2 runs: no degrees of freedom
    rows = table(runs)
    assert len(rows) == 3 and rows[2].startswith("| closed | 48 | off | 3 / 3, 1 | - | - | - | 0.9")


def test_a_missing_file_is_one_line_and_a_non_zero_exit(tmp_path):
    got = subprocess.run([sys.executable, str(ROOT / "bench/gpu/host_adjusted.py"), str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True)
    assert got.returncode == 1 and got.stderr.strip() == f"host_adjusted.py: no such file: {tmp_path / 'none.jsonl'}"


def test_against_another_label_and_rows_from_before_the_shape_field(tmp_path):
    """--base fast: off against the same engine without its writes (the no-spec runs become a label); a row without
    a shape (timelines before 12-04c) is an open-loop run when it has a TPOT."""
    rnd, rows = random.Random(3), []
    for call in range(2):
        for repeat in range(3):
            for label, effect in (("nospec", 1.0), ("off", 0.96), ("fast", 0.98)):
                h = rnd.choice([1.0, 0.7])
                rows.append({"label": label, "level": 24.0, "repeat": repeat, "tpot_ms": 8.0,
                             "tok_s": 5000 * effect * h ** 0.4 * rnd.gauss(1, 0.002),
                             "kinds": {"extend": {"n": 100, "runner_cpu_ms": 9 / h}}})
        (tmp_path / f"c{call}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[-9:]))
    runs = runs_of([str(tmp_path / "c0.jsonl"), str(tmp_path / "c1.jsonl")])
    assert {r["shape"] for r in runs} == {"open"}
    assert fit(runs, "off", "prefill", base="fast")["ratio"] == pytest.approx(0.96 / 0.98, abs=0.004)
    lines = table(runs, base="fast")
    assert lines[0].startswith("| shape | level | label / fast |")
    assert [line.split(" | ")[2] for line in lines[2:]] == ["nospec", "off"]      # fast itself is the base


@pytest.mark.parametrize("excess", [1.0, 1.15])
def test_the_labels_own_prefill_cpu_is_reported_beside_the_effect(tmp_path, excess):
    """Where the label's prefill CPU is its own doing (not the host's), the covariate is partly the engine's: the fit
    says by how much (cpu_ratio), so the reader knows the adjusted ratio is optimistic by elasticity x log of it."""
    paths = []
    for call in range(3):
        p = tmp_path / f"call{call}.jsonl"
        timeline(p, 0.97, seed=10 + call, runs=4, cpu_excess=excess)
        paths.append(str(p))
    got = fit(runs_of(paths), "off", "prefill")
    assert got["cpu_low"] < excess < got["cpu_high"]
    assert got["cpu_ratio"] == pytest.approx(excess, rel=0.06)


def test_the_t_table_used_without_scipy_is_scipys(monkeypatch):
    from scipy import stats
    import host_adjusted
    for free in range(1, 61):
        exact = stats.t.ppf(0.975, free)
        assert host_adjusted.t975(free) == pytest.approx(exact, abs=1e-9)
        monkeypatch.setitem(sys.modules, "scipy", None)       # an image without scipy: the table
        assert host_adjusted.t975(free) == pytest.approx(exact, abs=0.002 if free <= 30 else 0.01)
        monkeypatch.delitem(sys.modules, "scipy")


def test_runs_of_one_call_are_not_counted_as_independent(tmp_path):
    """From MIN_CLUSTERS calls on, the interval is clustered by call: where the engine's effect itself moves from call
    to call (each call's host), the classical interval of the same fit is too narrow and the clustered one is not."""
    import host_adjusted
    paths = []
    for call in range(6):
        p = tmp_path / f"call{call}.jsonl"
        timeline(p, 0.97 * (1.03 if call % 2 else 0.97), seed=20 + call, runs=4)   # +-3 % call to call
        paths.append(str(p))
    runs = runs_of(paths)
    clustered = fit(runs, "off", "prefill")
    monkey = host_adjusted.MIN_CLUSTERS
    try:
        host_adjusted.MIN_CLUSTERS = 99                        # the same fit with the runs taken as independent
        classical = fit(runs, "off", "prefill")
    finally:
        host_adjusted.MIN_CLUSTERS = monkey
    assert clustered["ratio"] == pytest.approx(classical["ratio"])
    width = lambda f: f["high"] - f["low"]
    assert width(clustered) > 1.5 * width(classical)
    assert clustered["low"] < 0.97 < clustered["high"]


def test_the_decodes_cpu_may_stand_for_the_hosts_speed_instead(tmp_path):
    """--host decode: the decodes' runner CPU as the host's measure (12-04g's review: the prefills' and the decodes'
    bracket the estimate); here both follow the same host, so both recover the effect."""
    paths = []
    for call in range(4):
        p = tmp_path / f"call{call}.jsonl"
        timeline(p, 0.96, seed=40 + call, runs=4)
        paths.append(str(p))
    runs = runs_of(paths)
    assert fit(runs, "off", "decode")["ratio"] == pytest.approx(0.96, abs=0.006)
    assert fit(runs, "off", "prefill")["ratio"] == pytest.approx(0.96, abs=0.006)
    assert "| tok_s vs the decodes' runner CPU (elasticity) | its decode CPU / the base's" in table(runs, host="decode")[0]
    got = subprocess.run([sys.executable, str(ROOT / "bench/gpu/host_adjusted.py"), "--host", "decode", *paths],
                         capture_output=True, text=True)
    assert got.returncode == 0 and "| closed | 128 | off | 16 / 16, 4 | 0.96" in got.stdout


def test_the_open_loops_tpot_is_fitted_the_same_way(tmp_path):
    """--metric tpot_ms: the median TPOT of open-loop runs against the host's speed (a ratio above 1: slower)."""
    rnd, paths = random.Random(5), []
    for call in range(3):
        rows = []
        for repeat in range(3):
            for label, slower in (("nospec", 1.0), ("off", 1.05)):
                h = rnd.choice([1.0, 0.7])
                rows.append({"label": label, "shape": "open", "level": 24.0, "repeat": repeat, "tok_s": 5000.0,
                             "tpot_ms": 8.0 * slower * h ** -0.3 * rnd.gauss(1, 0.002),
                             "kinds": {"extend": {"n": 100, "runner_cpu_ms": 9 / h}}})
        p = tmp_path / f"c{call}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(p))
    runs = runs_of(paths)
    assert fit(runs, "off", "prefill", metric="tpot_ms")["ratio"] == pytest.approx(1.05, abs=0.006)
    assert fit(runs, "off", "prefill")["ratio"] == pytest.approx(1.0, abs=1e-9)         # tok/s did not move
    assert table(runs, metric="tpot_ms")[0].startswith("| shape | level | label / nospec | runs (label / nospec, calls) | tpot_ms at")


def test_an_exact_fits_variance_rounded_below_zero_is_no_math_domain_error(tmp_path, monkeypatch):
    """tok/s that did not move fits exactly: the covariate's variance is 0 but for rounding, which numpy 2.5 (what pip
    installs on Python 3.12 and up) left at -4e-40 in the test above: math.sqrt raised ValueError there."""
    import host_adjusted
    real = host_adjusted._ols

    def rounded_below_zero(x, y, groups=None):
        beta, cov, free = real(x, y, groups)
        cov = cov.copy()
        cov[-1, -1] = -1e-40
        return beta, cov, free

    monkeypatch.setattr(host_adjusted, "_ols", rounded_below_zero)
    paths = []
    for call in range(3):
        rows = [{"label": label, "shape": "open", "level": 24.0, "repeat": repeat, "tok_s": 5000.0,
                 "kinds": {"extend": {"n": 100, "runner_cpu_ms": 9 / h}}}
                for repeat, h in enumerate((1.0, 0.7, 1.0)) for label in ("nospec", "off")]
        p = tmp_path / f"c{call}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(p))
    got = fit(runs_of(paths), "off", "prefill")
    assert got["elasticity_se"] == 0.0 and got["ratio"] == pytest.approx(1.0, abs=1e-9)


def crossover_call(path: Path, b_first: bool, seed: int, effect: float = 0.97, slot: float = 0.90,
                   hosts: tuple[float, ...] = (1.0,), call_noise: float = 0.0) -> None:
    """A call whose second-started engine runs every CPU op `slot` times as fast (its prefills' runner CPU 1/slot,
    its tok/s slot ** 0.4 lower through the CPU-bound prefills), whichever code it runs: 12-04i's reading. The off
    engine's own effect `effect` comes on top. b_first: off started first (run_pair's B_FIRST=1). hosts: each run's
    host speed drawn from these (moves CPU and tok/s alike, as the slot does); call_noise: the off-minus-nospec gap
    of the whole call drawn with this spread (each call's host and build, 12-04g)."""
    rnd, rows = random.Random(seed), []
    gap = math.exp(rnd.gauss(0, call_noise)) if call_noise else 1.0
    for repeat in range(4):
        for label in ("nospec", "off"):
            second = (label == "nospec") == b_first
            speed = (slot if second else 1.0) * rnd.choice(hosts)
            tok = 12000 * (effect * gap if label == "off" else 1.0) * speed ** 0.4 * rnd.gauss(1, 0.002)
            rows.append({"label": label, "shape": "closed", "level": 128, "repeat": repeat, "tok_s": tok,
                         **({"b_first": True} if b_first else {}),
                         "kinds": {"extend": {"n": 300, "runner_cpu_ms": 9.0 / speed * rnd.gauss(1, 0.005)},
                                   "decode": {"n": 900, "runner_cpu_ms": 0.5 / speed}}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_calls_started_both_ways_round_separate_the_start_order_from_the_engine(tmp_path):
    """12-04i: the engine started second is slower whichever code it runs (the A/A's twin too). From calls of one order
    the pairs alone read the engine and the start order together; with B_FIRST calls beside them the fit has a term
    for the start order and reads the engine's effect alone, with or without the host's CPU as covariate."""
    default = [tmp_path / f"d{i}.jsonl" for i in range(2)]
    flipped = [tmp_path / f"f{i}.jsonl" for i in range(2)]
    for i, p in enumerate(default):
        crossover_call(p, b_first=False, seed=i)
    for i, p in enumerate(flipped):
        crossover_call(p, b_first=True, seed=10 + i)
    one_order = fit(runs_of([str(p) for p in default]), "off", None)
    assert one_order["second_start"] is None
    assert one_order["ratio"] == pytest.approx(0.97 * 0.90 ** 0.4, abs=0.004)      # the start order inside it
    both = runs_of([str(p) for p in default + flipped])
    plain, adjusted = fit(both, "off", None), fit(both, "off", "prefill")
    assert plain["ratio"] == pytest.approx(0.97, abs=0.004) and plain["low"] < 0.97 < plain["high"]
    assert plain["second_start"] == pytest.approx(0.90 ** 0.4, abs=0.004)
    assert adjusted["ratio"] == pytest.approx(0.97, abs=0.004)
    # net of the start order the off engine's prefill CPU is no-spec's: the covariate is the host's alone
    assert adjusted["cpu_ratio"] == pytest.approx(1.0, abs=0.01)
    row = next(line for line in table(both) if "| off |" in line)
    assert row.endswith(f"| {plain['second_start']:.3f} [{plain['second_low']:.3f}-{plain['second_high']:.3f}] |")


def test_each_label_over_the_aa_reads_the_engine_without_the_second_starts_cost(tmp_path):
    """TWIN=1 calls (an engine without speculation where the daemon's stands, label twin) measure the second start
    alone; the off calls measure it with the engine's effect: off over twin is the engine's, and the interval holds
    both calls' spread (independent calls: variances add)."""
    runs = aa_runs(tmp_path)
    both = over_aa(runs, "off", None)
    assert both["ratio"] == pytest.approx(0.97, abs=0.004) and both["low"] < 0.97 < both["high"]
    lines = table(runs)
    at = lines.index(next(line for line in lines if "label / twin" in line))
    assert lines[at + 2].startswith("| closed | 128 | off | ") and f"| {both['ratio']:.3f} [" in lines[at + 2]
    one_call = [r for r in runs if r["call"].endswith("off0.jsonl")]
    assert over_aa(one_call, "off", None) is None and not any("label / twin" in line for line in table(one_call))


def test_a_run_pair_summary_stands_in_for_a_timeline_that_did_not_come_back(tmp_path):
    """A device call returns 8 files at most (12-04i call 2 lost its timeline.jsonl): its summary's TIMELINE lines,
    among the others, are the same rows."""
    jsonl = tmp_path / "call-timeline.jsonl"
    crossover_call(jsonl, b_first=False, seed=5)
    summary = tmp_path / "call-summary.txt"
    summary.write_text("[t+1s] start nospec\n" + "".join(f"TIMELINE {line}\n" for line in jsonl.read_text().splitlines())
                       + "| shape | level | TIMELINE |\nsamples: 1/s\n")
    assert runs_of([str(summary)]) == [{**r, "call": str(summary)} for r in runs_of([str(jsonl)])]


def test_a_summary_whose_timeline_lines_were_cut_short_is_one_line_and_a_non_zero_exit(tmp_path):
    summary = tmp_path / "old-summary.txt"
    summary.write_text('TIMELINE {"label": "off", "shape": "closed", "level": 128, "kinds": {"decode": {"n": 7\n')
    res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/host_adjusted.py"), str(summary)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (f"host_adjusted.py: {summary}:1: the TIMELINE line is cut short (summaries before 12-04i "
                          "cut them at 800 characters): use the call's timeline.jsonl\n")


def test_with_both_start_orders_the_elasticity_is_still_the_covariates(tmp_path):
    paths = []
    for call in range(4):
        p = tmp_path / f"call{call}.jsonl"
        timeline(p, 0.965, seed=50 + call, runs=4)
        if call % 2:   # B_FIRST calls
            p.write_text(
                "".join(json.dumps({**json.loads(line), "b_first": True}) + "\n" for line in p.read_text().splitlines()))
        paths.append(str(p))
    got = fit(runs_of(paths), "off", "prefill")
    assert got["second_start"] is not None and got["elasticity"] == pytest.approx(-0.4, abs=0.05)
    assert got["ratio"] == pytest.approx(0.965, abs=0.006) and got["second_start"] == pytest.approx(1.0, abs=0.01)


def aa_runs(tmp_path: Path) -> list[dict]:
    """Three calls of off against no-spec and one A/A call (twin: no engine effect, the same start-order cost)."""
    paths = []
    for i in range(3):
        p = tmp_path / f"off{i}.jsonl"
        crossover_call(p, b_first=False, seed=20 + i)
        paths.append(p)
    twin = tmp_path / "twin.jsonl"
    crossover_call(twin, b_first=False, seed=30, effect=1.0)
    twin.write_text(twin.read_text().replace('"label": "off"', '"label": "twin"'))
    return runs_of([str(p) for p in paths + [twin]])


def test_an_effect_reports_the_standard_error_and_freedom_its_interval_used(tmp_path):
    off = fit(aa_runs(tmp_path), "off", None)
    assert off["free"] == 2                                   # 3 calls, clustered: G - 1
    assert math.log(off["high"] / off["ratio"]) == pytest.approx(t975(off["free"]) * off["se"], rel=1e-6)


def test_the_aa_table_has_a_row_per_other_label_with_both_fits_over_the_aas(tmp_path):
    runs = aa_runs(tmp_path)
    lines = table(runs)
    at = lines.index(next(line for line in lines if "label / twin" in line))
    assert len(lines) == at + 3                               # off only: no twin over twin
    cells = lines[at + 2].strip("| ").split(" | ")
    assert cells[3] == interval(over_aa(runs, "off", "prefill")) and cells[3] != interval(over_aa(runs, "off", None))
    assert cells[4] == interval(over_aa(runs, "off", None))


def test_both_orders_and_a_moving_host_the_covariate_and_the_start_order_each_get_their_own(tmp_path):
    paths = []
    for i in range(4):
        p = tmp_path / f"c{i}.jsonl"
        crossover_call(p, b_first=bool(i % 2), seed=40 + i, hosts=(1.0, 1.0, 0.9, 0.6))
        paths.append(str(p))
    got = fit(runs_of(paths), "off", "prefill")
    assert got["elasticity"] == pytest.approx(-0.4, abs=0.03)
    assert got["ratio"] == pytest.approx(0.97, abs=0.006) and got["low"] < 0.97 < got["high"]
    # the second start is slower through its CPU alone here: at equal host speed it costs nothing
    assert got["second_start"] == pytest.approx(1.0, abs=0.006)


def test_one_call_of_the_other_order_does_not_make_the_interval_narrower_than_the_calls_spread(tmp_path):
    """12-04i's review: 9 calls of one order and 1 of the other (pooling a first B_FIRST call with 12-04e-i), each
    call's gap drawn with 3 % of its own: clustering the run-level fit by call covered the engine's effect in about
    half of such draws (the lone call's cluster has no residual); the calls' own gaps, one row a call, cover it."""
    covered = 0
    for draw in range(30):
        paths = []
        for i in range(10):
            p = tmp_path / f"d{draw}-{i}.jsonl"
            crossover_call(p, b_first=i == 9, seed=1000 * draw + i, call_noise=0.03)
            paths.append(str(p))
        got = fit(runs_of(paths), "off", None)
        assert got["second_start"] is not None
        covered += got["low"] < 0.97 < got["high"]
    assert covered >= 26          # 95 % intervals: 28.5 of 30 expected; the clustered run-level fit gave ~16


def test_an_aa_of_one_order_reads_against_a_label_fitted_over_both(tmp_path):
    """The start-order term is shared: off's calls started both ways round, the A/A's only the default way; dividing
    off's engine-only effect by twin's (which holds the second start's cost) would read 0.97 / 0.96 = 1.01."""
    paths = []
    for i in range(4):
        p = tmp_path / f"off{i}.jsonl"
        crossover_call(p, b_first=bool(i % 2), seed=60 + i)
        paths.append(p)
    twin = tmp_path / "twin.jsonl"
    crossover_call(twin, b_first=False, seed=70, effect=1.0)
    twin.write_text(twin.read_text().replace('"label": "off"', '"label": "twin"'))
    runs = runs_of([str(p) for p in paths + [twin]])
    assert fit(runs, "off", None)["second_start"] is not None and fit(runs, "twin", None)["second_start"] is None
    got = over_aa(runs, "off", None)
    assert got["ratio"] == pytest.approx(0.97, abs=0.006) and got["low"] < got["ratio"] < got["high"]


def test_calls_of_different_kv_pools_are_said_apart_and_rows_carry_the_pool(tmp_path):
    """Before 12-06 the engine started second had the larger KV pool: a fit over both kinds of call says so first."""
    from host_adjusted import pools_note
    from loads import pool_tokens
    assert pool_tokens({"POOL_TOKENS": "40000"}) == {"pool_tokens": 40000}
    assert pool_tokens({"POOL_TOKENS": "0"}) == pool_tokens({}) == pool_tokens({"POOL_TOKENS": "x"}) == {}
    sized, capped, capped2 = (tmp_path / f"{n}.jsonl" for n in ("sized", "capped", "capped2"))
    for path, seed in ((sized, 1), (capped, 2), (capped2, 3)):
        timeline(path, 0.98, seed=seed)
    for path in (capped, capped2):
        path.write_text("".join(json.dumps({**json.loads(line), "pool_tokens": 40000}) + "\n"
                                for line in path.read_text().splitlines()))
    assert pools_note(runs_of([str(capped), str(capped2)])) == []
    assert pools_note(runs_of([str(sized), str(capped), str(capped2)]))[0] == \
        "note: the calls' KV pools differ: as sized (1 calls), 40,000 tokens (2 calls); pass one kind of call to " \
        "read them apart"


def test_the_elasticitys_own_error_widens_the_calls_interval_where_the_engines_cpu_differs(tmp_path):
    """helper-87: from three calls on, each call's gap was taken at the fitted elasticity as if it were known; an error
    in it moves every gap the same way (by the call's log CPU gap), which the gaps' spread never shows. Where the
    label's own prefill CPU is 30 % above no-spec's the interval now holds that error (delta method): its half-width in
    log is t x sqrt(se_gaps^2 + (log CPU gap x se_elasticity)^2), with equal CPU as with 30 % more."""
    from host_adjusted import _effect, _gap_design, call_gaps, paired_rows
    for excess in (1.3, 1.0):
        paths = []
        for call in range(5):
            p = tmp_path / f"e{excess}-call{call}.jsonl"
            timeline(p, 0.97, seed=20 + call, runs=4, cpu_excess=excess)
            paths.append(str(p))
        runs = runs_of(paths)
        got = fit(runs, "off", "prefill")
        rows, _ = paired_rows(runs, "off", "nospec", "tok_s", "prefill")
        gaps_only = _effect(*_gap_design({"off": call_gaps(rows, "off", "nospec", "tok_s", "prefill",
                                                           got["elasticity"])}, False), 0)
        shift = math.log(got["cpu_ratio"])
        want = t975(gaps_only["free"]) * math.sqrt(gaps_only["se"] ** 2 + (shift * got["elasticity_se"]) ** 2)
        assert math.log(got["high"] / got["ratio"]) == pytest.approx(want, rel=1e-6)
        if excess > 1:
            assert got["high"] - got["low"] > gaps_only["high"] - gaps_only["low"]
