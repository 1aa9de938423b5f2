"""A policy's saved state edited by hand (helper-151): a number far past any measurement, or text float() reads as
NaN, passed the restore's check. 1e200 in one bucket's row overflowed the learner's arithmetic: every retune raised
('min() arg is an empty sequence'), the threshold held where a trial had left it, and each checkpoint saved the state
again, so every restart restored it. "nan" as text in the optional parts became a NaN in every later state, which was
then never checkpointed; a random state's next draw as text was the first decision's TypeError."""
import json
import random

import pytest

from controller.contract import Sample
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import PolicyError, make_policy


def _learned(name: str) -> dict:
    policy = make_policy(name, {})
    rnd, t = random.Random(0), 10.0
    for _ in range(3000):
        t += 0.01
        bs, steps = rnd.choice([1, 8, 32, 96]), rnd.choice([0, 4])
        policy.observe(Sample(t, bs, steps, bs * (3 if steps else 1), 0.01 + bs * 1e-4, True))
    return json.loads(json.dumps(policy.state()))


def _runs(policy, start: float) -> None:
    """observe and decide for a while, as the daemon's ingest and retune do"""
    loop, rnd, t = ControlLoop(policy, GuardConfig.from_mapping({}), 29), random.Random(1), start
    for i in range(400):
        t += 0.01
        bs, steps = rnd.choice([1, 8, 32, 96, 200]), rnd.choice([0, 4])
        loop.observe(Sample(t, bs, steps, bs * (4 if steps else 1), 0.01 + bs * 1e-4, True))
        if i % 25 == 0:
            loop.tick(t)
    json.dumps(policy.state(), allow_nan=False)         # (what the next checkpoint saves)


@pytest.mark.parametrize("name", ["thompson", "ucb"])
@pytest.mark.parametrize("where", [("q_off", 0), ("q_spec", 5), ("accept",)])
@pytest.mark.parametrize("big", [1e200, -1e200, 10 ** 300], ids=["1e200", "-1e200", "int 1e300"])
def test_a_state_with_a_number_past_any_measurement_is_not_restored(name, where, big):
    state = _learned(name)
    row = state
    for key in where:
        row = row[key]
    row[:] = [big, abs(big), abs(big), 20.0]
    policy = make_policy(name, {})
    with pytest.raises(PolicyError, match=r"past 1e\+50: no measurement"):
        policy.load_state(state)
    _runs(make_policy(name, {}), 40.0)      # (the daemon's _restore: a fresh policy instead)


@pytest.mark.parametrize("key, bad", [("prefill_s", ["nan", "nan", "nan", "nan"]), ("accept_high", ["nan", 30.0]),
                                      ("accept_high", ["inf", "1e999"])])      # (max_steps: no optional part, a
# state without it aside; "4" or 0 there refuses the state, test_review_h158)
def test_text_in_a_states_optional_parts_is_not_read_as_a_number(key, bad):
    state = _learned("thompson")
    state[key] = bad
    policy = make_policy("thompson", {})
    policy.load_state(state)                     # (the optional part starts empty, as an older state's)
    assert policy.state()[key] == make_policy("thompson", {}).state()[key]
    _runs(policy, 40.0)


@pytest.mark.parametrize("draw", ["nan", "x", [1.0], {}, True])
def test_a_random_state_whose_next_draw_is_no_number_is_refused(draw):
    state = _learned("thompson")
    state["rng"][2] = draw
    with pytest.raises(PolicyError, match="saved random state is unreadable"):
        make_policy("thompson", {}).load_state(state)


def test_a_learned_state_still_restores():
    for name in ("thompson", "ucb"):
        state = _learned(name)
        policy = make_policy(name, {})
        policy.load_state(state)
        assert policy.state() == state
        _runs(policy, 40.0)


@pytest.mark.parametrize("name", ["thompson", "model"])
@pytest.mark.parametrize("total", [0.0, 5e-324], ids=["0", "subnormal"])
def test_a_restored_step_record_whose_mean_is_zero_fails_no_decision(name, total):
    """(prefill_cost's decode-only steps: their mean divides speculation's gain; a step is never 0 s, but a row edited
    to a positive weight with a sum of 0 was every retune's ZeroDivisionError)"""
    state = _learned(name)
    state["prefill_cost"]["steps"][1][0][1] = total
    policy = make_policy(name, {})
    policy.load_state(state)
    _runs(policy, 40.0)


@pytest.mark.parametrize("where, bad", [((0, 1), "nan"), ((2, 1), "1e999"), ((1, 0), "1"), (None, "2")])
def test_sglang_emas_state_with_text_for_a_number_is_refused(where, bad):
    """(float() read "nan" as text: a NaN EMA restored, and every later checkpoint refused as non-finite)"""
    state = _learned("sglang-ema")
    if where is None:
        state["live"] = bad
    else:
        state["slots"][where[0]][where[1]] = bad
    with pytest.raises(PolicyError, match="not numbers"):
        make_policy("sglang-ema", {}).load_state(state)
