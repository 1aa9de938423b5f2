"""`--set SECTION.KEY=VALUE` (run's and config check's): read as the config's TOML, each key once; the one place that
splits a pair into its keys (a refusal's "(given on the command line: ...)" names them too)."""
from __future__ import annotations

import tomllib
from typing import Sequence

from ..numtext import OddSpace, Unheld, data_text, decimal_text, number_text, trimmed
from .config import ConfigError


def set_keys(pair: str) -> tuple[str, ...]:
    """('policy', 'params', 'c') for policy.params.c=1.5; OddSpace where a space other than ASCII's is around a key."""
    return tuple(trimmed(k) for k in pair.partition("=")[0].split("."))


def parse_set(pairs: Sequence[str]) -> dict[str, dict]:
    """--set SECTION.KEY=VALUE (KEY may be dotted once more: policy.params.c=1.5) into overrides.
    VALUE is read as TOML (1, 0.5, true, "x"); a number that TOML reads and numtext's rule does not is taken as a
    string (+5, 1_0, 0x10, inf: refused where a number goes), one that numtext's rule reads and TOML does not as the
    number (.5, 5.: as run's flags take it; it was text, refused as "'.5' must be a number"); anything else that is
    not TOML as a string."""
    out: dict[str, dict] = {}
    given: dict[tuple[str, ...], str] = {}
    for pair in pairs:
        path, sep, raw = pair.partition("=")
        try:
            keys, raw = list(set_keys(pair)), trimmed(raw)
        except OddSpace as e:       # (a value pasted with U+00A0 around it: read without it, unsaid)
            raise ConfigError(f"--set {pair!r}: {e}") from None
        if not sep or len(keys) not in (2, 3) or not all(keys):
            raise ConfigError(f"--set {pair!r}: expected SECTION.KEY=VALUE (e.g. guard.explore_share=0.1)")
        # each key once, a table whole or key by key (policy.params=3, then policy.params.c=1: a TypeError traceback;
        # policy.params.c=1, then policy.params={scale=2}: c dropped without a word; a key twice: the last one won)
        if clash := next((p for k, p in given.items() if tuple(keys[:len(k)]) == k or k[:len(keys)] == tuple(keys)), None):
            raise ConfigError(f"--set {pair!r}: {'.'.join(keys)} is set by --set {clash!r} already; give each key once "
                              "(a table whole or key by key)")
        given[tuple(keys)] = pair
        try:
            value = data_text(f"v = {raw}")["v"]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and number_text(raw, type(value)) is None:
                value = raw       # (+5, 1_0, 0x10, inf: a number only as numtext writes one, as run's flags)
        except tomllib.TOMLDecodeError as e:     # (an integer past 64 bits too: still one, refused as out of range)
            if (why := str(e))[:2] in ("v.", "v["):      # (a value in a table or list: named, not "must be a table")
                raise ConfigError(f"--set {path.strip()}{why[1:]}") from None
            try:
                number = number_text(raw, int)
                number = decimal_text(raw) if number is None else number
            except Unheld as e:         # (1e-400: TOML's and numtext's 0.0)
                raise ConfigError(f"--set {path.strip()}={e}") from None
            value = raw if number is None else number
        except RecursionError:         # (tomllib recurses per level: a traceback out of run and config check)
            raise ConfigError(f"--set {path.strip()}=...: VALUE is nested too deeply") from None
        table = out.setdefault(keys[0], {})
        (table.setdefault(keys[1], {}) if len(keys) == 3 else table)[keys[-1]] = value
    return out
