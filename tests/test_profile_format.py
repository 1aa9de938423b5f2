"""The profile and trace format (docs/profiles.md): defaults, inclusive bounds of every number, and
the one-line error of every refusal, exactly."""
from __future__ import annotations

import copy
import json

import pytest

from controller.numtext import plain
from controller.sim.profile import BUILTIN_DIR, TRACE_DIR, ProfileError, builtin_names, load_profile, load_trace, \
    parse_profile

GOOD = {"spec_steps": 2, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.03], "spec": [0.015, 0.08]},
        "acceptance": {"mean_accept_length": 2.2}}


def parse(data, source=""):
    return parse_profile(data, "profile t.json", source)


def refused(data) -> str:
    with pytest.raises(ProfileError) as err:
        parse(data)
    return str(err.value)


def test_defaults():
    p = parse(copy.deepcopy(GOOD), "/x/mine.toml")
    assert (p.name, p.description, p.source, p.max_batch_size) == ("mine", "", "", 256)
    assert (p.accept_spread, p.noise, p.prefill_s, p.prefill_s_per_request) == (0.1, 0.03, 0.005, 0.001)
    assert (p.output_len_mean, p.output_len_sd) == (256, 64)
    assert p.concurrency == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert (p.batch_sizes, p.step_off, p.step_spec) == ((1, 64), (0.01, 0.03), (0.015, 0.08))
    assert (p.spec_steps, p.mean_accept_length) == (2, 2.2)
    assert parse(copy.deepcopy(GOOD)).name == "profile"
    named = parse({**copy.deepcopy(GOOD), "name": "n", "description": "d", "source": "s"})
    assert (named.name, named.description, named.source) == ("n", "d", "s")


# (where in the data, key, lowest, highest, integer?)
BOUNDS = [
    (None, "spec_steps", 1, 16, True),
    (None, "max_batch_size", 1, 65536, True),
    (None, "noise", 0.0, 1.0, False),
    (None, "prefill_s", 0.0, 10.0, False),
    (None, "prefill_s_per_request", 0.0, 10.0, False),
    ("acceptance", "spread", 0.0, 1.0, False),
    ("acceptance", "mean_accept_length", 1.0, 17.0, False),
    ("load", "output_len_mean", 1, 1e6, False),
    ("load", "output_len_sd", 0, 1e6, False),
]


def with_value(section, key, value):
    data = copy.deepcopy(GOOD)
    if key == "mean_accept_length":
        data["spec_steps"] = 16                 # its bound is K + 1
    if key == "spec_steps":
        data["acceptance"]["mean_accept_length"] = 1.5
    (data.setdefault(section, {}) if section else data)[key] = value
    return data


@pytest.mark.parametrize("section,key,lo,hi,integer", BOUNDS)
def test_numbers_accept_both_bounds_and_refuse_just_outside(section, key, lo, hi, integer):
    where = f"profile t.json [{section}]" if section else "profile t.json"
    for ok in (lo, hi):
        parse(with_value(section, key, ok))
    step = 1 if integer else 0.5
    kind = "an integer" if integer else "a number"
    for bad in (lo - step, hi + step):
        assert refused(with_value(section, key, bad)) == f"{where}: {key}={bad!r} must be {kind} in {plain(lo)} .. {plain(hi)}"


def test_accept_length_is_bounded_by_k_plus_one():
    assert parse(with_value("acceptance", "mean_accept_length", 3.0) | {"spec_steps": 2}).mean_accept_length == 3.0
    data = copy.deepcopy(GOOD)
    data["acceptance"]["mean_accept_length"] = 3.5
    assert refused(data) == "profile t.json [acceptance]: mean_accept_length=3.5 must be a number in 1 .. 3"


@pytest.mark.parametrize("key,lo,hi,integer", [("batch_size", 1, 65536, True), ("off", 1e-4, 60.0, False),
                                               ("spec", 1e-4, 60.0, False)])
def test_step_table_bounds(key, lo, hi, integer):
    for ok in (lo, hi):
        data = copy.deepcopy(GOOD)
        data["step_time"] = {"batch_size": [1], "off": [0.01], "spec": [0.02], key: [ok]}
        parse(data)
    kind = "an integer" if integer else "a number"
    for bad in (lo - (1 if integer else lo / 2), hi + 0.5):
        data = copy.deepcopy(GOOD)
        data["step_time"] = {"batch_size": [1], "off": [0.01], "spec": [0.02], key: [bad]}
        assert refused(data) == f"profile t.json [step_time]: {key}[0]={bad!r} must be {kind} in {plain(lo)} .. {plain(hi)}"


def test_load_concurrency_levels_are_read_and_bounded():
    assert parse(with_value("load", "concurrency", [1, 65536])).concurrency == (1, 65536)
    assert refused(with_value("load", "concurrency", [0])) == \
        "profile t.json [load]: concurrency[0]=0 must be an integer in 1 .. 65536"


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("spec_steps"), "profile t.json: missing spec_steps"),
    (lambda d: d.update(spec_steps=2.5), "profile t.json: spec_steps=2.5 must be an integer in 1 .. 16"),
    (lambda d: d.update(spec_steps=True), "profile t.json: spec_steps=True must be an integer in 1 .. 16"),
    (lambda d: d.update(noise=float("nan")), "profile t.json: noise=nan must be a number in 0 .. 1"),
    (lambda d: d.update(noise="x"), "profile t.json: noise='x' must be a number in 0 .. 1"),
    (lambda d: d["step_time"].update(off=[0.01]), "profile t.json [step_time]: off must be a list of 2 numbers"),
    (lambda d: d["step_time"].update(batch_size=[]), "profile t.json [step_time]: batch_size must be a list of numbers"),
    (lambda d: d["step_time"].update(batch_size=5), "profile t.json [step_time]: batch_size must be a list of numbers"),
    (lambda d: d["step_time"].update(batch_size=[64, 64]),
     "profile t.json [step_time]: batch_size must be strictly increasing"),
    (lambda d: d["step_time"].update(colour=1),
     "profile t.json [step_time]: unknown key 'colour' (allowed: batch_size, off, spec)"),
    (lambda d: d.update(colour="red"), "profile t.json: unknown key 'colour' (allowed: acceptance, chained_extends, "
     "description, draft_kv, load, max_batch_size, max_prefill_tokens, name, noise, prefill_s, prefill_s_draft, "
     "prefill_s_per_request, prefill_s_per_token, source, spec_steps, step_time)"),
    (lambda d: d.update(chained_extends="yes"), "profile t.json: chained_extends='yes' must be true or false"),
    (lambda d: d.update(chained_extends=1), "profile t.json: chained_extends=1 must be true or false"),
    (lambda d: d.update(draft_kv="no"), "profile t.json: draft_kv='no' must be true or false"),
    (lambda d: d.update(prefill_s_draft=-0.001), "profile t.json: prefill_s_draft=-0.001 must be a number in 0 .. 10"),
    (lambda d: d["acceptance"].update(x=1), "profile t.json [acceptance]: unknown key 'x' (allowed: "
     "first_step_stub, mean_accept_length, spread)"),
    (lambda d: d.update(load={"x": 1}), "profile t.json [load]: unknown key 'x' (allowed: arrival_rate, concurrency, "
     "output_len_mean, output_len_range, output_len_sd, prompt_len_range)"),
    (lambda d: d.pop("acceptance"), "profile t.json: [acceptance] must be a table"),
    (lambda d: d.update(step_time=[1]), "profile t.json: [step_time] must be a table"),
    (lambda d: d.update(load=3), "profile t.json: [load] must be a table"),
    (lambda d: d.update(name=3), "profile t.json: name must be a string"),
])
def test_refusals_are_one_exact_line(mutate, message):
    data = copy.deepcopy(GOOD)
    mutate(data)
    assert refused(data) == message


def test_files_by_name_or_path(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(GOOD))
    assert load_profile(str(path)).name == "mine"            # the file's stem; `source` stays the file's own key
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ProfileError, match=r"^profile .*bad.json: not valid JSON \("):
        load_profile(str(tmp_path / "bad.json"))
    (tmp_path / "top.json").write_text("[1]")
    with pytest.raises(ProfileError) as err:
        load_profile(str(tmp_path / "top.json"))
    assert str(err.value) == f"profile {tmp_path / 'top.json'}: top level must be a table"
    with pytest.raises(ProfileError) as err:
        load_profile(str(tmp_path / "none.toml"))
    assert str(err.value) == f"profile file {tmp_path / 'none.toml'} does not exist"
    with pytest.raises(ProfileError) as err:
        load_profile("nope")
    assert str(err.value) == ("unknown profile 'nope' (built-in: " + ", ".join(builtin_names())
                              + "; or give a .toml/.json path)")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ProfileError, match=r"dir.toml: cannot read \("):
        load_profile(str(tmp_path / "dir.toml"))


def test_builtin_names_are_the_shipped_files():
    assert builtin_names() == sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))
    assert builtin_names(TRACE_DIR) == ["coding-to-chat", "load-steps", "mixed-shift", "rate-steps"]


def trace_file(tmp_path, text: str) -> str:
    path = tmp_path / "t.toml"
    path.write_text(text)
    return str(path)


def test_trace_is_read_with_its_defaults(tmp_path):
    tr = load_trace(trace_file(tmp_path, "[[segment]]\nseconds = 0.1\nconcurrency = 1\n"
                                          "[[segment]]\nseconds = 1e6\nconcurrency = 65536\nmean_accept_length = 17\n"
                                          "label = 'b'\n"))
    assert (tr.name, tr.description, tr.profile) == ("t", "", None)
    assert [(s.seconds, s.concurrency, s.mean_accept_length, s.label) for s in tr.segments] == \
        [(0.1, 1, None, ""), (1e6, 65536, 17.0, "b")]
    tr = load_trace(trace_file(tmp_path, "name = 'n'\ndescription = 'd'\nprofile = 'seed'\n"
                                          "[[segment]]\nseconds = 1\nconcurrency = 1\n"))
    assert (tr.name, tr.description, tr.profile) == ("n", "d", "seed")
    tr = load_trace(trace_file(tmp_path, "[[segment]]\nseconds = 0.1\nrate = 0.001\n"
                                          "[[segment]]\nseconds = 1e6\nrate = 1e6\nmean_accept_length = 2.5\nlabel = 'r'\n"))
    assert [(s.seconds, s.concurrency, s.mean_accept_length, s.label, s.rate) for s in tr.segments] == \
        [(0.1, 0, None, "", 0.001), (1e6, 0, 2.5, "r", 1e6)]


@pytest.mark.parametrize("text,message", [
    ("name = 'x'\n", "trace t.toml: needs at least one [[segment]]"),
    ("segment = [1]\n", "trace t.toml segment 0 must be a table"),
    ("profile = 3\n[[segment]]\nseconds = 1\nconcurrency = 1\n", "trace t.toml: profile must be a string"),
    ("x = 1\n", "trace t.toml: unknown key 'x' (allowed: description, name, profile, segment)"),
    ("[[segment]]\nseconds = 1\nconcurrency = 1\nx = 1\n",
     "trace t.toml segment 0: unknown key 'x' (allowed: concurrency, label, mean_accept_length, rate, seconds)"),
    ("[[segment]]\nseconds = 0.05\nconcurrency = 1\n", "trace t.toml segment 0: seconds=0.05 must be a number in 0.1 .. 1000000"),
    ("[[segment]]\nseconds = 1000000.5\nconcurrency = 1\n",
     "trace t.toml segment 0: seconds=1000000.5 must be a number in 0.1 .. 1000000"),
    ("[[segment]]\nseconds = 1\nconcurrency = 0\n", "trace t.toml segment 0: concurrency=0 must be an integer in 1 .. 65536"),
    ("[[segment]]\nseconds = 1\nconcurrency = 65537\n",
     "trace t.toml segment 0: concurrency=65537 must be an integer in 1 .. 65536"),
    ("[[segment]]\nseconds = 1\nconcurrency = 1\nmean_accept_length = 17.5\n",
     "trace t.toml segment 0: mean_accept_length=17.5 must be a number in 1 .. 17"),
    ("[[segment]]\nseconds = 1\nconcurrency = 1\nmean_accept_length = 0.5\n",
     "trace t.toml segment 0: mean_accept_length=0.5 must be a number in 1 .. 17"),
    ("[[segment]]\nseconds = 1\n", "trace t.toml segment 0: missing concurrency (clients) or rate (requests/s)"),
    ("[[segment]]\nseconds = 1\nrate = 1\nconcurrency = 1\n", "trace t.toml segment 0: give concurrency or rate, not both"),
    ("[[segment]]\nseconds = 1\nrate = 0.0009\n", "trace t.toml segment 0: rate=0.0009 must be a number in 0.001 .. 1000000"),
    ("[[segment]]\nseconds = 1\nrate = 1000000.5\n",
     "trace t.toml segment 0: rate=1000000.5 must be a number in 0.001 .. 1000000"),
    ("[[segment]]\nseconds = 0.05\nrate = 1\n", "trace t.toml segment 0: seconds=0.05 must be a number in 0.1 .. 1000000"),
    ("[[segment]]\nseconds = 1000000.5\nrate = 1\n",
     "trace t.toml segment 0: seconds=1000000.5 must be a number in 0.1 .. 1000000"),
    ("[[segment]]\nseconds = 1\nrate = 1\nmean_accept_length = 0.5\n",
     "trace t.toml segment 0: mean_accept_length=0.5 must be a number in 1 .. 17"),
    ("[[segment]]\nseconds = 1\nrate = 1\n[[segment]]\nseconds = 1\nconcurrency = 1\n",
     "trace t.toml: segments must all give concurrency or all give rate, not a mix"),
])
def test_trace_refusals_are_one_exact_line(tmp_path, text, message):
    with pytest.raises(ProfileError) as err:
        load_trace(trace_file(tmp_path, text))
    assert str(err.value) == message


def test_builtin_names_read_toml_and_json(tmp_path):
    for name in ("a.toml", "b.json", "c.txt"):
        (tmp_path / name).write_text("")
    assert builtin_names(tmp_path) == ["a", "b"]


def test_an_unreadable_trace_says_trace(tmp_path):
    with pytest.raises(ProfileError, match=r"^trace .*t.toml: not valid TOML \("):
        load_trace(trace_file(tmp_path, "segment = ["))


def test_a_name_with_a_suffix_or_a_slash_is_a_path(tmp_path):
    from controller.sim.profile import _locate
    for name in ("nope.toml", "nope.json", "dir/nope"):
        with pytest.raises(ProfileError) as err:
            load_profile(name)
        assert str(err.value) == f"profile file {name} does not exist"
    (tmp_path / "mine.json").write_text(json.dumps(GOOD))
    assert _locate("mine", tmp_path, "profile") == tmp_path / "mine.json"
    with pytest.raises(ProfileError) as err:
        _locate("x", tmp_path / "empty", "profile")
    assert str(err.value) == "unknown profile 'x' (built-in: none; or give a .toml/.json path)"


def test_parse_errors_of_a_file_name_the_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**GOOD, "colour": 1}))
    with pytest.raises(ProfileError, match=r"^profile p.json: unknown key 'colour'"):
        load_profile(str(path))
    assert parse_profile(copy.deepcopy(GOOD), "w").name == "profile"          # no source: a generic name


def test_the_spec_row_must_match_the_batch_sizes():
    data = copy.deepcopy(GOOD)
    data["step_time"]["spec"] = [0.01, 0.02, 0.03]
    assert refused(data) == "profile t.json [step_time]: spec must be a list of 2 numbers"


def test_an_empty_segment_list_is_refused(tmp_path):
    with pytest.raises(ProfileError) as err:
        load_trace(trace_file(tmp_path, "segment = []\n"))
    assert str(err.value) == "trace t.toml: needs at least one [[segment]]"


def test_a_tie_between_the_modes_keeps_speculation_off():
    tie = parse_profile({"spec_steps": 2, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.01],
                                                        "spec": [0.02, 0.02]},
                         "acceptance": {"mean_accept_length": 2.0}}, "tie")
    assert tie.tok_per_s(4, True) == tie.tok_per_s(4, False) and tie.better_mode(4) is False
    assert tie.better_mode(4, 2.01) is True


@pytest.mark.parametrize("load", ["simulate", "config"])
def test_a_trace_whose_acceptance_the_profile_cannot_reach_says_whose_bound_it_is(load):
    """helper-128: "mean_accept_length=3.2 must be a number in 1 .. 3" did not say that 3 is profile seed's chain."""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from controller.daemon.main import main
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--trace", "mixed-shift"]) if load == "simulate" \
        else CliRunner().invoke(main, ["config", "check", "--set", "sim.profile=seed", "--set", "sim.trace=mixed-shift"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.rstrip().endswith("segment 0: mean_accept_length=3.2 must be a number in 1 .. 3 (profile seed: "
                                        "spec_steps 2 + 1)"), res.output
