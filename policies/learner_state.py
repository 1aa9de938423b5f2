"""A bucket learner's saved state (JSON): what a restart, or a switch back to the policy, resumes from.

Checked before anything loads (stats.check_state: every bucket's statistics and the acceptance); the optional
parts added since (prefill_s, accept_high, tried, prefill_cost, arrived, fresh_run) load where they match and start empty otherwise,
so a database written by an older version still restores."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from .base import OFF, SPEC
from .params import shown
from .stats import check_state, stat_row
from .types import MAX_SPEC_STEPS, PolicyError, is_number

if TYPE_CHECKING:
    from .learner import BucketLearner


def save(learner: "BucketLearner") -> dict:
    return {
        "q_off": [d.to_list() for d in learner.q[OFF]],
        "q_spec": [d.to_list() for d in learner.q[SPEC]],
        "accept": learner.accept.to_list(),
        "max_steps": learner.max_steps,
        "prefill_s": learner.prefill_s.to_list(),
        "accept_high": list(learner.accept_hi),
        "tried": [_times(arm) for arm in learner.tried],
        "prefill_cost": learner.prefill.state(),
        "arrived": _times(learner.arrived),     # (the trend's guess and a shift trial read when the load came back)
        "fresh_run": [learner.run.bucket, *_times([learner.run.since]), learner.run.requests, learner.run.tokens],
    }


def _times(times: list[float]) -> list[float | None]:
    """Times with 'never' (-inf, no JSON number) as None."""
    return [None if t == -math.inf else t for t in times]


def _times_back(row: Any, n: int) -> list[float] | None:
    """_times' list of n read back, or None where it is not one (a state from before it was saved)."""
    if not isinstance(row, list) or len(row) != n or \
            not all(t is None or is_number(t) for t in row):
        return None
    return [-math.inf if t is None else float(t) for t in row]


def load(learner: "BucketLearner", state: Mapping[str, Any]) -> None:
    """PolicyError (nothing loaded) unless the state holds the learner's buckets and an acceptance record."""
    check_state(learner.name, state, len(learner.buckets))
    # (checked before anything loads: 10**40 loaded and made every speculative reward ~0; 1e40 was dropped unheard)
    if not (type(steps := state.get("max_steps", 1)) is int and 1 <= steps <= MAX_SPEC_STEPS):
        raise PolicyError(f"policy {learner.name}: saved state's max_steps={shown(steps)} is not an integer in 1 .. "
                          f"{MAX_SPEC_STEPS} (the most speculative steps an engine runs)")
    learner.max_steps = steps
    for arm, key in ((OFF, "q_off"), (SPEC, "q_spec")):
        for d, row in zip(learner.q[arm], state[key]):
            d.load(row)
    learner.accept.load(state["accept"])
    # (the optional parts: numbers, not text float() reads: "nan" there was a NaN in every later state, never saved)
    if stat_row(state.get("prefill_s")):
        learner.prefill_s.load(state["prefill_s"])
    if isinstance(high := state.get("accept_high"), list) and len(high) == 2 and all(map(is_number, high)):
        learner.accept_hi = (float(high[0]), float(high[1]))
    learner.prefill.load_state(state.get("prefill_cost"))
    n, tried = len(learner.buckets), state.get("tried")
    if isinstance(tried, list) and len(tried) == 2 and all(_times_back(a, n) is not None for a in tried):
        learner.tried = tuple(_times_back(arm, n) for arm in tried)
    if (arrived := _times_back(state.get("arrived"), n)) is not None:
        learner.arrived = arrived
    run = state.get("fresh_run")        # [bucket, since, requests, tokens]
    if isinstance(run, list) and len(run) == 4 and type(run[0]) is int and -1 <= run[0] < n and \
            (since_and_sums := _times_back(run[1:], 3)) is not None and None not in run[2:]:
        learner.run.start(run[0], since_and_sums[0])
        learner.run.add(*since_and_sums[1:])
