"""Pure decision logic for spec-controller: which batch sizes profit from speculation."""
from __future__ import annotations

from typing import Any, Mapping

from .base import Policy
from .fixed import AlwaysPolicy, FixedPolicy, NeverPolicy
from .model import ModelPolicy
from .params import ParamSpec, parse_kv, shown
from .sglang_ema import SGLangEMAPolicy
from .thompson import ThompsonPolicy
from .types import Decision, PolicyError, Sample, Snapshot
from .ucb import UCBPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (FixedPolicy, AlwaysPolicy, NeverPolicy, UCBPolicy, ThompsonPolicy, ModelPolicy, SGLangEMAPolicy)
}

# `bandit` is what operators type; it names the policy that won the evaluation
# (bench/results/compare.md; README "Which policy is bandit").
ALIASES: dict[str, str] = {"bandit": "thompson"}


def resolve_name(name: str) -> str:
    """The registered policy a name (or alias) stands for; PolicyError if none."""
    real = ALIASES.get(name, name)
    if real not in POLICIES:
        known = ", ".join(sorted([*POLICIES, *ALIASES]))
        raise PolicyError(f"unknown policy {shown(name)} (known: {known})")     # (a 60 kB name: not echoed whole)
    return real


def known_name(name: Any) -> str | None:
    """The registered policy a name stands for, or None: no name, or one this version does not know (a saved setting
    from another version, a config's typo: shown as it is, not refused)."""
    try:
        return resolve_name(name) if isinstance(name, str) and name else None
    except PolicyError:
        return None


def make_policy(name: str, params: Mapping[str, Any] | None = None, *, seed: int = 0,
                max_batch_size: int = 256) -> Policy:
    """Build a policy by name or alias, validating every parameter. A refusal names the policy as the operator
    typed it ('policy bandit (thompson): ...', not thompson alone) and says which policies take an unknown parameter
    (`--param c=2` for bandit: c is ucb's)."""
    real = resolve_name(name)
    try:
        return POLICIES[real](params, seed=seed, max_batch_size=max_batch_size)
    except PolicyError as e:
        text = str(e)
        if name != real and text.startswith(f"policy {real}: "):
            text = _named(name) + text[len(f"policy {real}: "):]
        unknown = sorted(set(params or {}) - {p.name for p in POLICIES[real].PARAMS})
        owners = [other for other, cls in POLICIES.items() if unknown and unknown[0] in {p.name for p in cls.PARAMS}]
        if "unknown parameter" in text and owners:
            text += f"; {unknown[0]} is a parameter of {', '.join(owners)}"
        raise PolicyError(text) from None


def runnable_params(name: str, params: Mapping[str, Any]) -> tuple[dict, dict[str, str]]:
    """Of a saved policy's parameters (an older version's: renamed, or out of today's range), those it runs with and,
    for each other one, why it runs at its default instead ({"": why} where they build one by one and not together):
    what the daemon's start and specctl's offline `policy show` / `status` both read. PolicyError: an unknown policy."""
    make_policy(name, {})
    dropped = {}
    for key, value in params.items():
        try:
            make_policy(name, {key: value})
        except PolicyError as e:
            dropped[key] = _unprefixed(e, name)
    kept = {key: value for key, value in params.items() if key not in dropped}
    try:
        make_policy(name, kept)
    except PolicyError as e:
        return {}, {"": _unprefixed(e, name)}
    return kept, dropped


def _named(name: str) -> str:
    """How make_policy's refusals begin: 'policy ucb: ', for an alias 'policy bandit (thompson): '."""
    return f"policy {name} ({ALIASES[name]}): " if name in ALIASES else f"policy {name}: "


def _unprefixed(error: PolicyError, name: str) -> str:
    """A refusal without its _named(name) beginning: the caller names the policy."""
    return str(error).removeprefix(_named(name))


def list_policies() -> list[dict]:
    rows = []
    for name, cls in POLICIES.items():
        rows.append({
            "name": name,
            "summary": cls.summary,
            "aliases": sorted(a for a, r in ALIASES.items() if r == name),
            "params": [{"name": p.name, "type": p.kind.__name__, "default": p.default,
                        "min": p.lo, "max": p.hi, "help": p.help} for p in cls.PARAMS],
        })
    return rows


__all__ = ["POLICIES", "ALIASES", "runnable_params", "Policy", "ParamSpec", "Decision", "PolicyError", "Sample",
           "Snapshot", "make_policy", "resolve_name", "list_policies", "parse_kv"]
