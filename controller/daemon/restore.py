"""What a daemon starts from: the settings its database saved (policy, pin, learned threshold) read against the
engine and the config. The config's [policy] name, params and initial_threshold are a first start's only: once the
database holds its own (`specctl policy set`, a learned threshold), that wins at every start."""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from policies import Policy, PolicyError, make_policy, runnable_params

from ..control.guard_config import GuardConfig
from ..control.loop import ControlLoop, pinned_reason
from ..numtext import one_line, value_text

log = logging.getLogger("spec_controller")


def saved_batch_size(saved: Mapping[str, Any], key: str, top: int) -> int | None:
    """A saved threshold (`pinned`, `threshold`) as one an engine whose largest batch is `top` runs, or None."""
    value = saved.get(key)
    if value is None or (type(value) is int and 0 <= value <= top):
        return value
    if type(value) is int and value > top:      # (an offline pin, an engine started smaller): the same routing
        log.warning(f"saved {key}={value} is above the engine's largest batch; taken as {top} (every batch "
                    "speculates)")      # (its own text: the pin's would hold the threshold's back, RepeatFilter)
        return top
    log.warning(f"saved {key}={value!r} is not a batch size (0 .. {top}); ignored")
    return None


def saved_policy(saved: Mapping[str, Any], cfg: dict, build: Callable[[str, Mapping[str, Any]], Policy],
                 warn: Callable[[str], Any] = log.warning) -> tuple[str, dict, Policy]:
    """(name, params, the policy built) that a start runs: the database's policy, else the config's. A saved one that
    no longer builds (a parameter renamed or out of today's range, a policy no longer known: saved by an older
    version) refused the start, exit 2, and the service stayed down until the database was edited: now each such
    parameter runs at its default, or the config's policy runs, and one warning names what was dropped. The database
    keeps what it saved (`specctl policy set` replaces it). warn: where that warning goes (config check: a note)."""
    configured = cfg["policy"]["name"], dict(cfg["policy"]["params"])
    if saved.get("policy") is None:                # (the config's: refused as the config check refuses it)
        return *configured, build(*configured)
    name, params = saved["policy"]["name"], dict(saved["policy"].get("params") or {})
    try:
        return name, params, build(name, params)
    except PolicyError as e:
        whole = str(e)
    try:
        kept, dropped = runnable_params(name, params)
    except PolicyError:                                # (a policy this version does not know)
        warn(f"saved policy {policy_words(name, params)} not run ({whole}); {as_given(cfg, policy_words(*configured))} "
             "runs instead (the database keeps it; `specctl policy set` replaces it)")
        return *configured, build(*configured)
    try:
        policy = build(name, kept)
    except PolicyError as e:                           # (the engine's largest batch, which runnable_params takes as 256)
        kept, dropped, policy = {}, {"": str(e)}, build(name, {})
    warn(f"saved policy {name}: {'; '.join(dropped.values())}: dropped, running at its default (the database "
                f"keeps it; `specctl policy set {name}` replaces it)")
    return name, kept, policy


def start_loop(cfg: dict, policy: Policy, saved: Mapping[str, Any], top: int) -> tuple[ControlLoop, str]:
    """The control loop at the saved pin and learned threshold (else [policy] initial_threshold), and why it starts
    where it does (the history's first row)."""
    pinned = saved_batch_size(saved, "pinned", top)
    learned = saved_batch_size(saved, "threshold", top)      # the learned threshold (Service._record), not a trial's
    reason = "restored at start"
    if learned is None:     # nothing learned: an unpin goes where a fresh start would (a pin is not learned: it was
        learned = cfg["policy"]["initial_threshold"]     # taken as one, and an unpin then said 'best so far' of it)
        saved_any = saved.get("threshold") is not None or saved.get("pinned") is not None
        reason = ("initial threshold ([policy] initial_threshold): " +      # (a pin restored says so instead, below)
                  ("the saved one is not a batch size" if saved_any else "nothing saved yet"))
    loop = ControlLoop(policy, GuardConfig.from_mapping(cfg["guard"]), learned)
    if pinned is not None:  # the engine starts with the pin; an unpin goes back to what was learned
        loop.pin(pinned)
        loop.revert(pinned)
        reason = f"restored at start: {pinned_reason(pinned)}"     # (it read as the policy's: no word of the pin)
    return loop, reason


def same_policy(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Two {"name", "params"} that run the same policy: bandit is thompson, a parameter's text and its number (a
    `policy set --param c=2` saves "2") and a default given or not are the same; what does not build, as it is."""
    def runs(p: Mapping[str, Any]) -> tuple:
        try:
            built = make_policy(p.get("name"), p.get("params") or {})
            return built.name, built.params
        except (PolicyError, TypeError):
            return str(p.get("name")), dict(p.get("params") or {})
    return runs(one) == runs(other)


def config_policy_unused(cfg: dict, saved: Mapping[str, Any]) -> str | None:
    """Why the config's [policy] name / params are not the ones that run (the database's are), or None."""
    mine, theirs = saved.get("policy"), cfg["policy"]
    if not cfg.get("_policy_given", True):
        return None
    if not isinstance(mine, dict) or same_policy(mine, theirs):
        return None
    asked = as_given(cfg, policy_words(theirs["name"], theirs["params"]))
    return (f"{asked} is not used: the database's policy "
            f"{policy_words(mine.get('name'), mine.get('params') or {})} is (a config's policy is a first start's only; "
            f"`specctl policy set {theirs['name']}` switches)")


def resumed_policy(cfg: dict, saved: Mapping[str, Any], build: Callable[[str, Mapping[str, Any]], Policy],
                   where: str) -> tuple[str, list[str]]:
    """config check's words for the policy a start runs, and the warnings the start would log of it: the config's,
    or the database's (where), which a start resumes and the check named as the config's (newcomer: `ok (...; policy
    bandit)` of a database that runs ucb)."""
    notes: list[str] = []
    name, params, _ = saved_policy(saved, cfg, build, warn=notes.append)
    if "policy" not in saved or same_policy({"name": name, "params": params}, cfg["policy"]):
        return cfg["policy"]["name"], notes
    configured = policy_words(cfg["policy"]["name"], cfg["policy"]["params"])
    return (f"{policy_words(name, params)} saved in {where}, which run resumes ({as_given(cfg, configured)} is a first "
            "start's only: `specctl policy set` switches)"), notes


def policy_words(name: object, params: Mapping[str, Any]) -> str:
    """A policy and its parameters as the start's lines and config check's say them: `ucb (c=2)` (a number as
    numtext.value_text writes it, 2 for 2.0 too), `bandit` (none given: its defaults); the log read `policy model {}`,
    a Python dict's text."""
    given = ", ".join(f"{k}={value_text(v)}" for k, v in params.items()) if isinstance(params, Mapping) else str(params)
    return one_line(f"{name} ({given})" if given else f"{name}")     # (a saved text's newline: still one log line)


def as_given(cfg: dict, words: str) -> str:
    """The policy a first start runs (words: its name and parameters), named where it was given: a flag's (--policy,
    --set policy.*) said to be the config's misled (newcomer-54; helper-168: `config check --policy ucb` said 'the
    config's ucb')."""
    if cfg.get("_policy_flags"):
        return f"policy {words} given on the command line"
    return f"[policy] {words} in the config" if cfg.get("_policy_given", True) else f"the default policy {words}"
