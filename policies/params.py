"""Declared, validated policy parameters: every policy lists its ParamSpecs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Mapping

from controller.numtext import OddSpace, Unheld, a_kind, number_text, plain, shown, trimmed, written

from .types import PolicyError


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: type            # int or float
    default: float
    lo: float
    hi: float
    help: str

    def coerce(self, policy: str, raw: Any) -> float | int:
        """raw as this parameter's value: text by numtext's rule (an int parameter's as an integer: not "5.0" or
        "1e1"), else a JSON / TOML number (an int parameter's an integer: not 5.0, as the API's bodies and the config's
        other integers); PolicyError otherwise or out of range."""
        if isinstance(raw, str):
            try:
                value = number_text(raw, self.kind)
            except Unheld as e:      # ("1e-400": echoed as given, it ran as 0)
                raise PolicyError(f"policy {policy}: parameter {self.name}={e}") from None
        elif isinstance(raw, bool) or not isinstance(raw, Integral if self.kind is int else Real):
            value = None
        else:
            try:
                value = int(raw) if self.kind is int else float(raw)
            except OverflowError:           # (an integer past a float's range)
                value = None
        # (a JSON nan / inf is not "out of range"; text of 400 digits is a number past a float's range, which is)
        past_range = isinstance(raw, str) and isinstance(value, float) and math.isinf(value)
        if not past_range and (value is None or isinstance(value, float) and not math.isfinite(value)):
            rule = f"; {written(self.kind, self.lo)}" if isinstance(raw, str) and value is None else ""
            raise PolicyError(
                f"policy {policy}: parameter {self.name}={shown(raw)} is not {a_kind(self.kind)} "
                f"(allowed {plain(self.lo)} .. {plain(self.hi)}{rule})")
        if not (self.lo <= value <= self.hi):
            raise PolicyError(
                f"policy {policy}: parameter {self.name}={shown(raw)} out of range "
                f"(allowed {plain(self.lo)} .. {plain(self.hi)})")
        return value


def resolve_params(policy: str, specs: tuple[ParamSpec, ...], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with the given values; unknown names and bad values raise PolicyError."""
    by_name = {s.name: s for s in specs}
    given = dict(given or {})
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        allowed = ", ".join(sorted(by_name)) or "none"
        raise PolicyError(f"policy {policy}: unknown parameter {shown(unknown[0])} (allowed: {allowed})")
    out = {s.name: s.kind(s.default) for s in specs}
    for name, raw in given.items():
        out[name] = by_name[name].coerce(policy, raw)
    return out


def parse_kv(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """'k=v' strings from the command line into a dict (values stay strings)."""
    out: dict[str, str] = {}
    for pair in pairs:
        try:
            key, sep, value = (trimmed(part) for part in pair.partition("="))
        except OddSpace as e:       # ('c = 1.5' pasted with U+00A0s: read as c=1.5, unsaid)
            raise PolicyError(f"bad parameter {shown(pair)}: {e}") from None
        if not sep or not key:
            raise PolicyError(f"bad parameter {shown(pair)}: expected NAME=VALUE")
        if key in out:          # (the API refuses a key given twice too: no silent last-one-wins; echoed as every
            # other refusal of a parameter, one line and cut short: raw, a newline in a value made it two lines)
            raise PolicyError(f"parameter {shown(key)} given twice ({shown(out[key])} and {shown(value)})")
        out[key] = value
    return out
