"""The policies' operator-facing surface, exactly: parameter ranges (inclusive) and their errors,
`k=v` parsing, the registry's listing, the fixed policies' decisions and reasons."""
from __future__ import annotations

import pytest

from controller.numtext import WRITTEN, WRITTEN_NUMBER, written
from policies import Decision, PolicyError, Snapshot, list_policies, make_policy, parse_kv, resolve_name
from policies.params import ParamSpec, resolve_params

SPECS = (ParamSpec("c", float, 1.0, 0.0, 100.0, "width"), ParamSpec("n", int, 2, 1, 64, "count"))


def error(fn, *args, **kwargs) -> str:
    with pytest.raises(PolicyError) as err:
        fn(*args, **kwargs)
    return str(err.value)


def test_parameter_ranges_are_inclusive():
    assert resolve_params("p", SPECS, {"c": "0", "n": 64}) == {"c": 0.0, "n": 64}
    assert resolve_params("p", SPECS, {"c": 100, "n": "1"}) == {"c": 100.0, "n": 1}
    assert resolve_params("p", SPECS, None) == {"c": 1.0, "n": 2}
    assert type(resolve_params("p", SPECS, {"n": "7"})["n"]) is int
    for written in ("7.0", 7.0):          # (an int parameter is an integer, as numtext and the API's bodies write one)
        with pytest.raises(PolicyError, match="is not an integer"):
            resolve_params("p", SPECS, {"n": written})
    assert type(resolve_params("p", SPECS, {"c": 3})["c"]) is float


@pytest.mark.parametrize("given,message", [
    ({"c": -0.5}, "policy p: parameter c=-0.5 out of range (allowed 0 .. 100)"),
    ({"c": 100.5}, "policy p: parameter c=100.5 out of range (allowed 0 .. 100)"),
    ({"n": 0}, "policy p: parameter n=0 out of range (allowed 1 .. 64)"),
    ({"n": 65}, "policy p: parameter n=65 out of range (allowed 1 .. 64)"),
    ({"n": "2.5"}, f"policy p: parameter n='2.5' is not an integer (allowed 1 .. 64; {written(int, 1)})"),
    ({"c": True}, "policy p: parameter c=true is not a number (allowed 0 .. 100)"),
    ({"c": None}, "policy p: parameter c=null is not a number (allowed 0 .. 100)"),
    ({"n": "1e400"}, f"policy p: parameter n='1e400' is not an integer (allowed 1 .. 64; {written(int, 1)})"),
    ({"c": "nan"}, f"policy p: parameter c='nan' is not a number (allowed 0 .. 100; {written(float, 0)})"),
    ({"c": float("inf")}, "policy p: parameter c=inf is not a number (allowed 0 .. 100)"),
    ({"c": "1e400"}, "policy p: parameter c='1e400' out of range (allowed 0 .. 100)"),    # (a number, past a float's)
    ({"c": "9" * 401}, f"policy p: parameter c='{'9' * 76}... out of range (allowed 0 .. 100)"),
    ({"c": "-1e400"}, "policy p: parameter c='-1e400' out of range (allowed 0 .. 100)"),
    ({"x": 1, "b": 2}, "policy p: unknown parameter 'b' (allowed: c, n)"),
])
def test_parameter_errors_name_the_parameter_and_its_range(given, message):
    assert error(resolve_params, "p", SPECS, given) == message


def test_a_policy_without_parameters_says_so():
    assert error(make_policy, "always", {"x": 1}) == "policy always: unknown parameter 'x' (allowed: none)"


def test_a_refusal_names_the_policy_as_typed_and_who_takes_an_unknown_parameter():
    """helper-94: `specctl policy set bandit --param c=2` said 'policy thompson: unknown parameter' (a name the
    operator never typed) and not that c is ucb's."""
    assert error(make_policy, "bandit", {"c": 2}).startswith("policy bandit (thompson): unknown parameter 'c' (")
    assert error(make_policy, "bandit", {"c": 2}).endswith("; c is a parameter of ucb")
    assert error(make_policy, "bandit", {"half_life_s": 0}) == \
        "policy bandit (thompson): parameter half_life_s=0 out of range (allowed 0.5 .. 3600)"
    assert error(make_policy, "ucb", {"scale": 1}).endswith("; scale is a parameter of thompson")
    assert error(make_policy, "ucb", {"zz": 1}).endswith("prefill, zero_margin)")      # (no policy takes zz)
    assert error(make_policy, "never", {"threshold": 1}).endswith("; threshold is a parameter of fixed")


def test_parse_kv():
    assert parse_kv([" c = 1.5 ", "n=2", "s=a=b"]) == {"c": "1.5", "n": "2", "s": "a=b"}
    assert parse_kv([]) == {}
    for bad in ("c", "=1", " =1"):
        assert error(parse_kv, [bad]) == f"bad parameter {bad!r}: expected NAME=VALUE"
    assert error(parse_kv, ["c=2", "n=1", " c =3"]) == "parameter 'c' given twice ('2' and '3')"


@pytest.mark.parametrize("size,ok", [(0, False), (1, True), (65536, True), (65537, False)])
def test_max_batch_size_range(size, ok):
    if ok:
        assert make_policy("ucb", max_batch_size=size).max_batch_size == size
    else:
        assert error(make_policy, "ucb", max_batch_size=size) == f"max_batch_size={size} out of range (allowed 1 .. 65536)"


def test_policy_keeps_its_seed_and_params():
    p = make_policy("bandit", {"scale": "2"}, seed=7, max_batch_size=64)
    assert (p.name, p.seed, p.params["scale"]) == ("thompson", 7, 2.0)
    assert p.buckets.edges[-1] == 64


def test_unknown_policy_lists_every_name_and_alias():
    assert error(resolve_name, "foo") == ("unknown policy 'foo' (known: always, bandit, fixed, model, never, "
                                          "sglang-ema, thompson, ucb)")
    assert resolve_name("bandit") == "thompson" and resolve_name("ucb") == "ucb"


def test_listing_documents_each_parameter():
    rows = {r["name"]: r for r in list_policies()}
    assert rows["fixed"] == {"name": "fixed", "summary": "a static threshold (0 = never speculate, >= max batch "
                             "size = always)", "aliases": [], "params": [
                                 {"name": "threshold", "type": "int", "default": 5, "min": 0, "max": 65536,
                                  "help": "speculate iff batch size <= threshold"}]}
    assert rows["thompson"]["aliases"] == ["bandit"] and rows["always"]["params"] == []
    assert [p["name"] for p in rows["ucb"]["params"]] == ["half_life_s", "accept_half_life_s", "min_samples",
                                                           "dominance", "indifference", "prefill", "guess", "zero_margin", "c"]


def test_fixed_policies_decide_and_say_why():
    snap = Snapshot(0.0, 3, 64)
    # the operator's own thresholds: commands the guard applies as they are (Decision.command)
    assert make_policy("fixed", {"threshold": 7}).decide(snap) == Decision(7, 7, "fixed threshold 7", command=True)
    assert make_policy("fixed").decide(snap) == Decision(5, 5, "fixed threshold 5", command=True)
    assert make_policy("always", max_batch_size=64).decide(snap) == Decision(64, 64, "always speculate", command=True)
    assert make_policy("never").decide(snap) == Decision(0, 0, "never speculate", command=True)
    for name in ("fixed", "always", "never"):
        p = make_policy(name)
        assert p.state() == {} and p.load_state({"anything": 1}) is None


def test_decision_is_exploratory_iff_it_differs_from_the_exploit_threshold():
    assert Decision(5, 4, "x").exploratory and not Decision(4, 4, "x").exploratory


def test_every_policy_class_takes_params_seed_and_max_batch_size_with_the_same_defaults():
    from policies import POLICIES
    for name, cls in POLICIES.items():
        p = cls()
        assert (p.seed, p.max_batch_size, p.buckets.edges[-1]) == (0, 256, 256), name
        q = cls(None, seed=5, max_batch_size=32)
        assert (q.seed, q.max_batch_size, q.buckets.edges[-1]) == (5, 32, 32), name
        if cls.PARAMS:
            spec = cls.PARAMS[-1]
            value = spec.kind(spec.hi)
            assert cls({spec.name: value}).params[spec.name] == value, name


def test_make_policy_defaults():
    p = make_policy("ucb")
    assert (p.seed, p.max_batch_size) == (0, 256)


def test_bucket_edges_and_lookups():
    from policies.buckets import Buckets
    b = Buckets(24)
    assert b.edges == (*range(1, 17), 18, 20, 23, 24)
    assert [b.low(i) for i in range(3)] == [1, 2, 3] and [b.high(i) for i in range(3)] == [1, 2, 3]
    assert (b.low(16), b.high(16), b.low(19), b.high(19)) == (17, 18, 24, 24)
    assert [b.of(bs) for bs in (0, 1, 2, 16, 17, 18, 19, 24, 25, 1000)] == [0, 0, 1, 15, 16, 16, 17, 19, 19, 19]
    assert [b.index_of_threshold(t) for t in (0, 1, 17, 18, 24, 99)] == [0, 1, 16, 17, 20, 20]
    assert Buckets(5).edges == (1, 2, 3, 4, 5) and Buckets(1).edges == (1,)


def test_the_written_rule_names_a_minus_only_where_the_range_has_negatives():
    """newcomer-53: `specctl threshold pin abc` was told "a '-' at most" though no pin is negative."""
    assert "'-'" not in error(make_policy, "bandit", {"half_life_s": "x"})
    assert "a '-' at most" in error(make_policy, "sglang-ema", {"down_hysteresis": "x"})     # (-10 .. 10)
    assert written(int, 0) == "ASCII digits: no '+', spaces, '_' or leading zeros" and written(int, -1) == WRITTEN
    assert written(float) == WRITTEN_NUMBER
