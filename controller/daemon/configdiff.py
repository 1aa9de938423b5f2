"""How a reloaded configuration differs from the running one, key by key, in the daemon process: what SIGHUP
re-reads (reloadable), what only a restart or only a first start applies (restart_needed), and the file's values
that the command line overrides (shadowed). The reload's warnings (lifecycle) name these keys; the values are
shown as the log and the events table get them, [sglang]'s secrets masked."""
from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from ..numtext import data_text
from ..paths import read_text_file
from .config import ConfigError, anchored, load_config, names_file
from .engines.sglang_flags import shown_value


# what a reload's event and log line say it did (reloadable's keys)
RELOADED = "guard, retention, min_free_mb and log level re-read"


def reloadable(section: str, key: str) -> bool:
    """What SIGHUP re-reads (the rest takes a restart): the guard, retention, the free space kept, the log level."""
    return section == "guard" or (section, key) in (("control", "log_level"), ("storage", "min_free_mb")) or \
        (section == "storage" and key.startswith("retention_"))


def _flat(cfg: Mapping[str, Any]) -> dict[tuple[str, str], Any]:
    out = {}
    for section, values in cfg.items():
        if section.startswith("_") or not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, dict) and section != "guard":      # [sglang] args, [policy] params
                out.update({(section, f"{key}.{k}"): v for k, v in value.items()})
            else:
                out[(section, key)] = value
    return out


def first_start_only(section: str, key: str) -> bool:
    """What a daemon takes from the config on an empty database only: once the database holds its own policy and
    threshold (`specctl policy set`, what it learned), those win at every start (daemon/restore.py)."""
    return section == "policy" and key in ("name", "params", "initial_threshold")


def restart_needed(running: Mapping[str, Any], fresh: Mapping[str, Any], first_start: bool = False) -> list[str]:
    """The keys a reload cannot apply that differ between the running config and a fresh one, as `[sim] speed 10 ->
    3` (a key only one side has: `(unset)`): those a restart applies, or with first_start those only a first start
    takes (first_start_only)."""
    old, new = _flat(running), _flat(fresh)
    show = lambda flat, at: repr(_shown(at, flat[at])) if at in flat else "(unset)"
    return [f"[{section}] {key} {show(old, (section, key))} -> {show(new, (section, key))}"
            for section, key in sorted(set(old) | set(new)) if old.get((section, key), show) != new.get((section, key), show)
            and not reloadable(section, top := key.split(".")[0]) and first_start_only(section, top) == first_start]


def shadowed(path: str | Path | None, overrides: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """The file's values that the command line (a flag or --set) overrides, as
    `[sim] speed 3 (overridden by the command line: 10)`: a reload re-reads the file under the
    same flags, so editing such a key changes nothing, not even after a restart."""
    if not path or not overrides:
        return []
    try:
        data = data_text(read_text_file(path))
        data = {s: anchored(s, v, Path(path).parent) if isinstance(v, dict) else v for s, v in data.items()}
    except (OSError, tomllib.TOMLDecodeError, ConfigError, RecursionError):
        return []
    mine = _flat(data)          # (a path flag is the shell's: compared as the file it names)
    theirs = {at: os.path.abspath(v) if names_file(*at, v) else v for at, v in _flat(overrides).items()}
    return [f"[{s}] {k} {_shown((s, k), mine[(s, k)])!r} (overridden by the command line: {_shown((s, k), v)!r})"
            for (s, k), v in sorted(theirs.items()) if (s, k) in mine and mine[(s, k)] != v]


def _shown(at: tuple[str, str], value: Any) -> Any:
    """A config value as the log and the events table get it: [sglang]'s secrets as *** (engines/sglang_flags)."""
    return shown_value(at[1], value) if at[0] == "sglang" else value


def given_causes(message: str, path: str | None, overrides: dict, given: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The words of `given` ((a flag or `--set PAIR`, the (section, key[, key]) it sets)) that a refusal of the config
    (`message`, of the file at `path` under `overrides`) is about: of the section it names, those without which it
    goes or changes (`--speed 0 --set sim.seed=2` listed both, every one of the section)."""
    def refusal(without: tuple[str, ...]) -> str | None:
        less = copy.deepcopy(overrides)
        table = less
        for key in without[:-1]:
            table = table.get(key) if isinstance(table, dict) else None
        if isinstance(table, dict):
            table.pop(without[-1], None)
        try:
            load_config(path, less)
        except ConfigError as e:
            return str(e)
        return None
    return [word for word, at in given if f"[{at[0]}]" in message and refusal(at) != message]
