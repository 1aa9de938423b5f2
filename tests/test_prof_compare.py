"""bench/gpu/prof_compare.py: two engines' cProfile dumps, read as pstats writes them, split into a uniform slowdown,
functions only one engine runs and a concentrated residual."""
import marshal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import prof_compare  # noqa: E402

LAYERS = 32


def keyed(functions: dict[str, tuple[int, float]]) -> dict[tuple, tuple[int, float]]:
    """pstats' keys (file, line, name), a line per name in order."""
    return {("model.py", 10 + i, name): value for i, (name, value) in enumerate(functions.items())}


def dump(path: Path, functions: dict[str, tuple[int, float]]) -> Path:
    """A cProfile dump as Profile.dump_stats writes it: {(file, line, name): (cc, nc, tt, ct, callers)}; every
    function recursing once per call (primitive calls cc half of all calls nc), so that cc is not taken for nc."""
    stats = {key: (calls // 2, calls, own_s, own_s, {}) for key, (calls, own_s) in keyed(functions).items()}
    with open(path, "wb") as f:
        marshal.dump(stats, f)
    return path


def engine(batches: int, slow: float = 1.0, **extra: float) -> dict[str, tuple[int, float]]:
    """A prefill's functions per batch (calls, own seconds each), `slow` times slower; extra: name=factor for one
    function's own slowdown on top."""
    per_batch = {"attention": (LAYERS, 40e-6), "store_cache": (LAYERS, 15e-6), "view": (8 * LAYERS, 2e-6),
                 "specialize": (40 * LAYERS, 9e-6), "sample": (1, 300e-6), "schedule": (3, 100e-6)}
    return {name: (n * batches, n * batches * each * slow * extra.get(name, 1.0))
            for name, (n, each) in per_batch.items()}


def run(tmp_path, a: dict, b: dict, *args: str, capsys) -> str:
    pa, pb = dump(tmp_path / "a.prof", a), dump(tmp_path / "b.prof", b)
    assert prof_compare.main([str(pa), str(pb), *args]) == 0
    return capsys.readouterr().out


def line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def test_every_function_slower_by_one_factor_reads_uniform(tmp_path, capsys):
    b = engine(141, slow=1.45)
    b["stage_prefill"] = (141, 141 * 700e-6)           # the off engine's own step
    text = run(tmp_path, engine(199), b, "--batches", "199,141", capsys=capsys)
    assert "median 1.450" in line(text, "per-call ratio")
    assert line(text, "verdict:").startswith("verdict: uniform: the same calls take ~1.45x as long in B (slower:")
    assert text.split("only in B (ms per batch):\n")[1].splitlines()[0].split() == ["+0.700", "stage_prefill",
                                                                                    "(model.py:16)"]


def test_one_function_slower_reads_concentrated_and_heads_the_residuals(tmp_path, capsys):
    text = run(tmp_path, engine(199), engine(141, store_cache=4.0), "--batches", "199,141", capsys=capsys)
    assert "median 1.000" in line(text, "per-call ratio")
    assert line(text, "verdict:").startswith("verdict: concentrated")
    first = text.split("largest residuals")[1].splitlines()[1].split()
    assert first[1:] == ["store_cache", "(model.py:11)"]
    assert float(first[0]) == pytest.approx(3 * LAYERS * 15e-6 * 1e3, abs=1e-3)     # +1.44 ms a batch


def test_without_batch_counts_the_most_called_function_scales_b_to_a(tmp_path, capsys):
    """Same speed, B profiled over twice the batches: no excess once scaled by the reference's calls."""
    text = run(tmp_path, engine(100), engine(200), capsys=capsys)
    assert line(text, "B scaled").endswith("specialize (model.py:13): 128000 in A, 256000 in B")
    assert "excess +0.000 ms" in line(text, "own time")
    assert line(text, "verdict:") == "verdict: none: B's own time is within 2 % of A's"


def test_a_slowdown_that_explains_little_of_the_excess_is_not_called_uniform():
    """Every function 10 % slower, but a function of B's own carries most of the excess."""
    r = prof_compare.compare(keyed(engine(100)), keyed({**engine(100, slow=1.1), "draft_write": (100, 100 * 5e-3)}),
                             100.0, 100.0)
    assert r["factor"] == pytest.approx(1.1)
    excess = r["own_b"] - r["own_a"]
    assert prof_compare.verdict(r["factor"], r["quartiles"][0], r["quartiles"][2], excess / r["own_a"],
                                r["uniform"] / excess).startswith("concentrated")


def test_profiles_with_nothing_in_common_are_one_line_and_exit_2(tmp_path, capsys):
    pa = dump(tmp_path / "a.prof", {"x": (100, 1.0)})
    pb = dump(tmp_path / "b.prof", {"y": (100, 1.0)})
    assert prof_compare.main([str(pa), str(pb)]) == 2
    assert capsys.readouterr().err == "prof_compare: the two profiles share no function: nothing to compare\n"


def test_a_function_slower_beyond_the_common_factor_is_its_residual(tmp_path, capsys):
    text = run(tmp_path, engine(100), engine(100, slow=1.45, sample=2.0), "--batches", "100,100", capsys=capsys)
    residuals = [x.split() for x in text.split("largest residuals")[1].split("only in B")[0].splitlines()[1:]]
    assert residuals[0][1] == "sample" and float(residuals[0][0]) == pytest.approx(1.45 * 0.300, abs=1e-3)
    assert all(abs(float(r[0])) < 1e-3 for r in residuals[1:])


def test_functions_called_more_often_in_b_do_not_set_the_factor():
    """Other work (twice the calls, each 3x as long) is not the same call slowed down."""
    b = engine(100)
    for name in ("view", "specialize", "attention"):
        calls, own = b[name]
        b[name] = (2 * calls, 6 * own)
    r = prof_compare.compare(keyed(engine(100)), keyed(b), 100.0, 100.0)
    assert r["functions"] == 3 and r["factor"] == pytest.approx(1.0)


def test_half_the_functions_slower_is_no_common_factor():
    """Three of six functions 1.6x slower: the median says 1.3 but the lower quartile 1.0: not uniform."""
    r = prof_compare.compare(keyed(engine(100)), keyed(engine(100, attention=1.6, specialize=1.6, sample=1.6)),
                             100.0, 100.0)
    excess = r["own_b"] - r["own_a"]
    assert r["factor"] == pytest.approx(1.3) and r["quartiles"][0] == pytest.approx(1.0)
    assert prof_compare.verdict(r["factor"], r["quartiles"][0], r["quartiles"][2], excess / r["own_a"],
                                r["uniform"] / excess).startswith("concentrated")


def test_b_faster_throughout_reads_uniform_the_other_way(tmp_path, capsys):
    """12-03g: the no-spec engine was the slower one; a speed-up of every function is the host's too."""
    text = run(tmp_path, engine(100), engine(100, slow=0.75), "--batches", "100,100", capsys=capsys)
    assert line(text, "verdict:").startswith("verdict: uniform: the same calls take ~0.75x as long in B (faster:")


def test_a_builtins_address_does_not_split_it_in_two(tmp_path, capsys):
    """'<function Event.record at 0x7fd0...>' has another address in the other process: the same function."""
    a = {"<function Event.record at 0x7fd055234540>": (100, 0.01), **engine(1)}
    b = {"<function Event.record at 0x7f00aa000000>": (100, 0.01), **engine(1)}
    text = run(tmp_path, a, b, "--batches", "1,1", "--min-calls", "1", capsys=capsys)
    assert "only in B (ms per batch):\n" in text and text.rstrip().endswith("only in B (ms per batch):")


def test_a_file_that_is_no_profile_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "x.prof").write_text("not marshal")
    good = dump(tmp_path / "a.prof", engine(1))
    assert prof_compare.main([str(good), str(tmp_path / "x.prof")]) == 2
    assert capsys.readouterr().err.startswith(f"prof_compare: {tmp_path / 'x.prof'}: not a cProfile dump (")


@pytest.mark.parametrize("engine_f, cores_f, says", [
    (1.30, 1.0, "the process"),       # B 1.3x on either core set: its own process
    (1.0, 1.30, "the cores"),         # B's first set 1.3x slower than A's: B fast again once swapped
    (1.10, 1.25, "the cores"),
    (1.25, 1.10, "the process"),
])
def test_swapped_core_sets_split_the_engines_factor_from_the_cores(tmp_path, capsys, engine_f, cores_f, says):
    """Profiles of both engines on their first core sets, then swapped (run_pair's cprofile phase): f1 = e x c and
    f2 = e / c give back e (follows the engine) and c (stays with the set)."""
    set_x, set_y = 1.0, cores_f            # A on x and B on y, then A on y and B on x
    paths = [dump(tmp_path / f"{n}.prof", prof) for n, prof in (
        ("a1", engine(200, slow=set_x)), ("b1", engine(200, slow=engine_f * set_y)),
        ("a2", engine(200, slow=set_y)), ("b2", engine(200, slow=engine_f * set_x)))]
    assert prof_compare.main([str(paths[0]), str(paths[1]), "--swapped", str(paths[2]), str(paths[3])]) == 0
    out = capsys.readouterr().out
    assert f"the engine's own {engine_f:.3f}, the cores' {cores_f:.3f}: mostly {says}" in out
    assert prof_compare.split_swapped(engine_f * cores_f, engine_f / cores_f)[:2] == pytest.approx((engine_f, cores_f))


def test_an_engine_faster_on_either_set_is_its_process_too():
    """The verdict weighs each factor's distance from 1 either way (12-03g's no-spec engine was the slower one)."""
    assert "the process" in prof_compare.split_swapped(0.8, 0.8)[2]          # e 0.8, c 1
    assert "the cores" in prof_compare.split_swapped(1 / 0.8, 0.8)[2]        # e 1, c 1.25
    assert "the process" in prof_compare.split_swapped(1.0, 1.0)[2]          # nothing either way: the engine's (1.0)


@pytest.mark.parametrize("engine_f, cores_f, says", [
    (1.3, 1.0, "B the slower"), (0.8, 1.0, "B the faster"),
    (1.0, 1.3, "B's first set the slower"), (1.0, 0.8, "B's first set the faster"),
])
def test_the_verdict_says_which_way(engine_f, cores_f, says):
    """12-05d call 2's "mostly the process" was the off engine being the FASTER on its own: the line says which way."""
    assert prof_compare.split_swapped(engine_f * cores_f, engine_f / cores_f)[2].endswith(f": {says})")
