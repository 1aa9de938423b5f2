"""A bucket learner's saved state (JSON): what a restart, or a switch back to the policy, resumes from.

Checked before anything loads (stats.check_state: every bucket's statistics and the acceptance); the optional
parts added since (prefill_s, accept_high, tried, prefill_cost) load where they match and start empty otherwise,
so a database written by an older version still restores."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from .base import OFF, SPEC
from .stats import check_state

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
        "tried": [[None if t == -math.inf else t for t in arm] for arm in learner.tried],
        "prefill_cost": learner.prefill.state(),
    }


def load(learner: "BucketLearner", state: Mapping[str, Any]) -> None:
    """PolicyError (nothing loaded) unless the state holds the learner's buckets and an acceptance record."""
    check_state(learner.name, state, len(learner.buckets))
    for arm, key in ((OFF, "q_off"), (SPEC, "q_spec")):
        for d, row in zip(learner.q[arm], state[key]):
            d.load(row)
    learner.accept.load(state["accept"])
    learner.max_steps = int(state.get("max_steps", 1))
    if isinstance(state.get("prefill_s"), list) and len(state["prefill_s"]) == 4:
        learner.prefill_s.load(state["prefill_s"])
    if isinstance(state.get("accept_high"), list) and len(state["accept_high"]) == 2:
        learner.accept_hi = (float(state["accept_high"][0]), float(state["accept_high"][1]))
    learner.prefill.load_state(state.get("prefill_cost"))
    tried = state.get("tried")
    if isinstance(tried, list) and len(tried) == 2 and all(len(a) == len(learner.buckets) for a in tried):
        learner.tried = tuple([-math.inf if t is None else float(t) for t in arm] for arm in tried)
