"""Policies' edges on main's code: decision reasons word for word (policies/reasons.py), a saved state
with a NaN refused with its path (types.check_finite), the model's fit at exactly its weight floor and
its zero step time, UCB's indifference margin."""
from __future__ import annotations

import math

import pytest

from policies import PolicyError, make_policy, reasons
from policies.base import OFF, SPEC
from tests.test_steady import feed


def test_exploit_reasons_for_a_rise_a_fall_and_a_hold():
    assert reasons.exploit(12, 8, "batch 9-12", 0.25, "batch 4", 0.5) == (
        "speculate up to batch 12: it pays at batch 9-12 (speculation +25% tok/s)")
    assert reasons.exploit(0, 8, "batch 1", -0.1, "batch 4", None) == (
        "stop speculating: it no longer pays at batch 1 (speculation -10% tok/s)")
    assert reasons.exploit(1, 8, "batch 2", -0.05, "batch 4", None) == (
        "speculate only up to batch 1: it no longer pays at batch 2 (speculation -5% tok/s)")
    assert reasons.exploit(4, 4, "x", 1.0, "batch 3", 0.5, live_speculates=True) == (
        "best threshold 4: live batch 3 is speculating (speculation +50% tok/s)")
    # the mode is the threshold's, whatever the gain's sign (a held threshold) or none measured
    assert reasons.exploit(4, 4, "x", 1.0, "batch 3", -0.02, live_speculates=True) == (
        "best threshold 4: live batch 3 is speculating (speculation -2% tok/s)")
    assert reasons.exploit(4, 4, "x", 1.0, "batch 5", 0.3) == (
        "best threshold 4: live batch 5 is plain decoding (speculation +30% tok/s)")
    assert reasons.exploit(105, 105, "x", 1.0, "batch 95-105", None, live_speculates=True) == (
        "best threshold 105: live batch 95-105 is speculating (not measured)")


def test_trial_reasons():
    assert reasons.batches(3, 3) == "batch 3" and reasons.batches(3, 5) == "batch 3-5"
    assert reasons.unmeasured(-math.inf, 10.0) == "never measured"
    assert reasons.unmeasured(4.0, 10.0) == "last measured 6 s ago"
    assert reasons.settled(True) == "plain decoding lost at larger batches"
    assert reasons.settled(False) == "speculation lost at smaller batches"
    assert reasons.uncertain(-0.04) == "estimate uncertain: speculation -4% tok/s"
    assert reasons.trial(True, "batch 4", "why") == "trial: speculate at batch 4 to measure it (why)"
    assert reasons.trial(False, "batch 4", "why") == "trial: plain decode at batch 4 to measure it (why)"


@pytest.mark.parametrize("name,mutate,where,bad", [
    ("ucb", lambda s: s["q_off"][2].__setitem__(1, float("nan")), "state.q_off[2][1]", "nan"),
    ("thompson", lambda s: s.__setitem__("accept", [1.0, float("inf"), 1.0, 0.0]), "state.accept[1]", "inf"),
    ("sglang-ema", lambda s: s["slots"][0].__setitem__(1, float("-inf")), "state.slots[0][1]", "-inf"),
])
def test_a_saved_state_with_a_non_finite_number_is_refused_with_its_path(name, mutate, where, bad):
    p = make_policy(name, max_batch_size=64)
    state = p.state()
    mutate(state)
    with pytest.raises(PolicyError) as err:
        make_policy(name, max_batch_size=64).load_state(state)
    assert str(err.value) == f"policy {name}: saved {where} holds a non-finite number ({bad})"


def test_model_fit_uses_buckets_above_the_weight_floor_with_a_positive_rate():
    def policy(second_weight: float, second_sum: float):
        p = make_policy("model", {"min_buckets": 2}, max_batch_size=64)
        feed(p, OFF, 4, 0.010, 1)                           # bucket of 4: weight 1
        d = p.q[OFF][p.buckets.of(16)]
        d.w, d.s, d.t = second_weight, second_sum, 0.0
        p.refit(0.0)
        return p._fit[OFF]
    assert policy(1e-6, 1e-6 * 1600.0) is None              # exactly the floor: not seen, one bucket left
    assert policy(1.1e-6, 1.1e-6 * 1600.0) is not None
    assert policy(1.0, 0.0) is None                         # weight but no rate: not seen


def test_model_rate_is_zero_where_its_fitted_step_time_is():
    p = make_policy("model", max_batch_size=64)
    feed(p, SPEC, 4, 0.020, 1)                              # an accept estimate
    p._fit = [[0.0, 0.0], [0.0, 0.0]]
    assert p.mean(OFF, 3) == 0.0 and p.mean(SPEC, 3) == 0.0


def test_ucb_indifference_margin_keeps_the_incumbent_on_near_ties():
    def policy(indifference):
        p = make_policy("ucb", {"indifference": indifference, "c": 0.0})
        feed(p, OFF, 8, 0.010, 50)                          # off: 800 tok/s
        feed(p, SPEC, 8, 0.02475, 50, accept=2.5)           # spec: 808 tok/s (+1 %)
        return p, p.buckets.of(8)
    p, b = policy(0.02)
    assert p.choose_arm(b, 1.0, incumbent=OFF) == OFF and p.choose_arm(b, 1.0, incumbent=SPEC) == SPEC
    p, b = policy(0.0)
    assert p.choose_arm(b, 1.0, incumbent=OFF) == SPEC


def test_a_gain_under_half_a_percent_has_a_decimal_and_a_zero_no_sign():
    assert reasons.gain_text(-0.004) == "speculation -0.4% tok/s"      # under 0.5 %: one decimal
    assert reasons.gain_text(0.003) == "speculation +0.3% tok/s" and reasons.gain_text(-0.0004) == "speculation +0.0% tok/s"
    assert reasons.gain_text(0.006) == "speculation +1% tok/s" and reasons.gain_text(-0.13) == "speculation -13% tok/s"
    assert reasons.gain_text(-0.006, guessed=True) == "the trend says speculation -1% tok/s"
    assert reasons.gain_text(0.254) == "speculation +25% tok/s"


def test_a_gain_of_exactly_half_a_percent_is_a_whole_percent():
    """The decimal is for gains under 0.5 % only (where a whole percent reads +0% beside 'it pays'); 0.5 % itself
    rounds to a whole 1 %, as every gain above it does."""
    assert reasons.gain_text(0.005) == "speculation +1% tok/s" and reasons.gain_text(-0.005) == "speculation -1% tok/s"
    assert reasons.gain_text(0.0049) == "speculation +0.5% tok/s"


def test_an_unknown_policy_name_is_echoed_cut_short_not_whole():
    """(bench/fuzz.py: a 64 KiB name came back whole in the one-line refusal)"""
    from policies import PolicyError, resolve_name
    with pytest.raises(PolicyError) as e:
        resolve_name("x" * 65536)
    assert len(str(e.value)) < 300 and str(e.value).startswith("unknown policy 'xxx") and "x... (known: " in str(e.value)
    with pytest.raises(PolicyError, match=r"^unknown policy 'nope' \(known: "):
        resolve_name("nope")


@pytest.mark.parametrize("params", [{"threshold": "5" * 65536}, {"threshold": 10 ** 4000}, {"x" * 65536: 1}])
def test_a_parameter_refused_is_echoed_cut_short_not_whole(params):
    """As an unknown policy name: a 64 KiB value or name in POST /policy's params (or --param) came back whole in the
    one-line refusal (and 10**4000's repr is 4001 digits)."""
    from policies import PolicyError, make_policy
    with pytest.raises(PolicyError) as e:
        make_policy("fixed", params)
    assert len(str(e.value)) < 300, str(e.value)[:300]
    assert str(e.value).startswith("policy fixed: ") and "..." in str(e.value)
    with pytest.raises(PolicyError, match=r"^policy fixed: parameter threshold='x' is not an integer \(allowed 0 "):
        make_policy("fixed", {"threshold": "x"})
