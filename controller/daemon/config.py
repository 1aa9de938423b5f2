"""The daemon's configuration: a TOML file, then command-line flags on top; strictly checked."""
from __future__ import annotations

import copy
import ipaddress
import socket
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

from policies import PolicyError, make_policy
from state.room import DEFAULT_MIN_FREE_MB, LEAST_MIN_FREE_MB

from ..closename import close_hint
from ..control.guard_config import GuardConfig, GuardConfigError
from ..contract import MAX_BATCH
from ..numtext import data_text, not_a_number, plain, shown
from ..paths import (DEFAULT_CONFIG, beside, db_path_problem, home_unexpanded, is_db_own_path, names_a_file, present,
                     read_text_file, socket_path_problem)
from .engines.child import SGLANG_PORT

DEFAULTS: dict[str, dict[str, Any]] = {
    "engine": {"kind": "sim"},
    # profile "": the trace's own profile (crossover-b without one). The default trace shifts
    # acceptance and load, so the right threshold moves (README quick start).
    "sim": {"profile": "", "trace": "mixed-shift", "concurrency": 0, "arrival_rate": 0.0, "speed": 1.0, "seed": 0},
    "sglang": {},                 # SGLang ServerArgs, passed through (see docs/sglang.md)
    "policy": {"name": "bandit", "seed": 0, "tick_s": 0.5, "initial_threshold": 0, "params": {}},
    "guard": {},                  # GuardConfig fields
    "storage": {"db": "", "retention_samples_s": 3600.0, "retention_max_samples": 2_000_000,
                "retention_aggregates_s": 7 * 86400.0, "retention_decisions_s": 30 * 86400.0,
                "retention_max_decisions": 200_000, "retention_events_s": 30 * 86400.0, "retention_max_events": 20_000,
                "retention_states_keep": 48, "retention_states_hourly_s": 7 * 86400.0,
                "rollup_s": 10.0, "checkpoint_s": 30.0, "min_free_mb": DEFAULT_MIN_FREE_MB},
    "control": {"socket": "", "metrics_port": 0, "metrics_addr": "127.0.0.1", "ingest_queue": 65536,
                "log_level": "INFO"},
}
FREE_FORM = {("sglang",), ("policy", "params"), ("guard",)}
FILE_PATHS = {"storage": ("db",), "control": ("socket",), "sim": ("profile", "trace")}    # anchored(): the file's
# `spec-controller run` flags with a name of their own (flag parameter -> section, key); every
# other key is reached with --set SECTION.KEY=VALUE (systemd/config.example.toml says so).
FLAGS: dict[str, tuple[str, str]] = {
    "engine": ("engine", "kind"), "profile": ("sim", "profile"), "trace": ("sim", "trace"), "speed": ("sim", "speed"),
    "concurrency": ("sim", "concurrency"), "arrival_rate": ("sim", "arrival_rate"), "policy": ("policy", "name"),
    "db": ("storage", "db"), "socket_path": ("control", "socket"), "metrics_port": ("control", "metrics_port"),
    "log_level": ("control", "log_level")}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# retention_max_rows was the samples' row cap before every table had one
RENAMED = {("storage", "retention_max_rows"): "retention_max_samples"}


class ConfigError(ValueError):
    """A config that cannot be used; the message is one line."""


def _homes(section: str) -> dict[str, list[str]]:
    """Every other section's keys, for a key given in the wrong one ([engine] speed = 10: [sim]'s); [guard]'s are
    GuardConfig's settings, a renamed key's old name is still its section's."""
    keys = {s: [f.name for f in fields(GuardConfig)] if s == "guard" else list(k) for s, k in DEFAULTS.items()}
    for s, old in RENAMED:
        keys[s].append(old)
    return {s: k for s, k in keys.items() if s != section}


def _check(section: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    for key, value in given.items():
        if key not in defaults:
            hint = close_hint(key, defaults, _homes(section), {o: n for (s, o), n in RENAMED.items() if s == section},
                              sections=DEFAULTS)        # ([control] policy = "ucb": [policy] is a section)
            raise ConfigError(f"config: unknown key {key!r} in [{section}] ({hint}known: {', '.join(defaults)})")
        default = defaults[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"config: [{section}] {key} must be a table")
            continue
        want = float if isinstance(default, float) else type(default)
        why = not_a_number(key, value, want) if want in (int, float) else (   # (numtext's: [guard]'s wording too)
            None if isinstance(value, want) else f"must be {KINDS.get(want, want.__name__)}")
        if why:
            raise ConfigError(f"config: [{section}] {key}={shown(value)} {why}")


# a TOML value's kind as the operator writes it (not Python's type name: "a str"); numbers: numtext.not_a_number
KINDS = {str: "text (a quoted string)", bool: "true or false", list: "a list"}


def load_config(path: str | Path | None, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict:
    """Defaults < file < overrides. A missing *default* file means built-in defaults."""
    cfg = copy.deepcopy(DEFAULTS)
    file_data: dict = {}
    explicit = path is not None
    path = Path(DEFAULT_CONFIG if path is None else path)
    # (explicit first: a name too long to stat was a traceback; present(): a default file in a directory this user may
    # not enter, /etc/spec-controller 0750, raised PermissionError from exists() as a traceback, now "cannot read")
    if read := explicit or present(path):
        try:
            if (text := read_text_file(path)).startswith("\ufeff"):
                raise ConfigError(f"config file {path}: not valid TOML (it starts with a byte-order mark (BOM): save "
                                  "it as UTF-8 without one)")
            file_data = data_text(text)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except OSError as e:
            raise ConfigError(f"config file {path}: cannot read ({e.strerror})" + ("" if explicit else ": it is the "
                              "default, read when --config is not given; give --config FILE for another")) from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path}: not valid TOML ({e})") from None
        except RecursionError:         # (a SIGHUP's reload of such a file stopped the daemon)
            raise ConfigError(f"config file {path}: not valid TOML (nested too deeply)") from None
        except UnicodeDecodeError as e:          # (read_text's, before TOML sees it)
            raise ConfigError(f"config file {path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                              f"{e.start})") from None
    for source in (file_data, overrides or {}):
        for section, values in source.items():
            if section not in DEFAULTS and not isinstance(values, dict):      # (a key above every header: TOML's top)
                homes = [f"[{s}]" for s, keys in _homes("").items() if section in keys]
                raise ConfigError(f"config: key {section!r} is above every [section] header (" + (
                    f"put it under {' or '.join(homes)})" if homes else
                    f"a key goes under one of {', '.join(f'[{s}]' for s in DEFAULTS)})"))
            if section not in DEFAULTS:
                hint = close_hint(section, DEFAULTS, brackets=True)
                raise ConfigError(f"config: unknown section [{section}] ({hint}known: {', '.join(DEFAULTS)})")
            if not isinstance(values, dict):
                raise ConfigError(f"config: [{section}] must be a table")
            for k in values:        # (both names in one table: the comprehension below kept whichever came last)
                if (new := RENAMED.get((section, k))) in values:
                    raise ConfigError(f"config: [{section}] gives both {k} and {new}, its new name: keep {new}")
            values = {RENAMED.get((section, k), k): v for k, v in values.items()}
            if (section,) not in FREE_FORM:
                _check(section, values, DEFAULTS[section])
            if source is file_data:
                values = anchored(section, values, path.parent)
            for key, value in values.items():
                if isinstance(cfg[section].get(key), dict):
                    cfg[section][key].update(value)
                else:
                    cfg[section][key] = value
    validate(cfg)
    if cfg["sglang"] and not any("kind" in (source.get("engine") or {}) for source in (file_data, overrides or {})):
        raise ConfigError('config: [sglang] is set but not [engine] kind, whose default runs the simulator: add '
                          '[engine] kind = "sglang" (or "sim", to run the simulator with this file)')
    sim, given = cfg["sim"], {k for source in (file_data, overrides or {}) for k in (source.get("sim") or {})}
    why = load_conflict(sim["trace"] if "trace" in given else None, sim["concurrency"], sim["arrival_rate"])
    if why and cfg["engine"]["kind"] == "sim":     # SGLang's load is its clients': [sim] is not read
        # the file's choice against a flag's ('give one of them' to one who gave one): how to give the flag's
        mine, flags = file_data.get("sim") or {}, (overrides or {}).get("sim") or {}
        on = {"trace": True, "concurrency": sim["concurrency"] > 0, "arrival_rate": sim["arrival_rate"] > 0}
        if (ours := [k for k in on if on[k] and k in mine and k not in flags]) and any(on.get(k) for k in flags):
            how = ", which no flag unsets:" if "trace" in ours else f": add {' '.join(f'--set sim.{k}=0' for k in ours)} or"
            why += f"; {path} sets [sim] {' and '.join(ours)}{how} remove it there to choose the load on the command line"
        raise ConfigError(f"config: {why}")
    cfg["_trace_given"] = "trace" in given      # (a profile that the default trace does not fit is told so: preflight)
    cfg["_path"] = str(path) if read else ""
    cfg["_file_empty"] = bool(cfg["_path"]) and not file_data     # (config check's note: read here, not again)
    # (the defaults' bandit is nobody's choice: restore warns of a config policy not used only where one was given)
    given = [any(k in ("name", "params") for k in s.get("policy") or {}) for s in (file_data, overrides or {})]
    cfg["_policy_given"], cfg["_policy_flags"] = any(given), given[1]      # (flags: --policy / --set, said so)
    return cfg


def anchored(section: str, values: dict, base: Path) -> dict:
    """A config file's relative paths are the file's (from its directory), not the starting directory's: `config
    check` in a shell and the unit (which starts in /) read one file the same way. Flags stay the shell's."""
    out = dict(values)
    for key in FILE_PATHS.get(section, ()):
        value = out.get(key)
        if names_file(section, key, value):
            if why := home_unexpanded(value):
                raise ConfigError(f"config: [{section}] {key} {value!r}: {why}")
            out[key] = beside(value, base)
    return out


def names_file(section: str, key: str, value: Any) -> bool:
    """A value of a path key that names a file (the [sim] ones may name a built-in instead)."""
    return key in FILE_PATHS.get(section, ()) and isinstance(value, str) and bool(value) and (
        section != "sim" or names_a_file(value))


def load_conflict(trace: str | None, concurrency: float, arrival_rate: float) -> str | None:
    """Why these simulated-load choices clash (each replaces the others), or None. trace: a trace
    named on purpose (None: the default one, which a concurrency or a rate replaces). One rule
    for `spec-controller run` and `specctl simulate`, whose flags it names."""
    chosen = [name for name, on in (("--trace", trace is not None), ("--concurrency", concurrency > 0),
                                    ("--arrival-rate", arrival_rate > 0)) if on]
    if len(chosen) < 2:
        return None
    values = {"--trace": repr(trace), "--concurrency": plain(concurrency), "--arrival-rate": plain(arrival_rate)}
    keys = " and ".join(f"[sim] {n[2:].replace('-', '_')} = {values[n]} ({n})" for n in chosen)   # (file or flag)
    return f"{keys} each choose the simulated load: give one of them"


MIN_ARRIVAL_RATE = 0.001      # the lowest rate a trace segment, a profile and `specctl simulate` take (0: no rate)
RANGES = [("sim", "speed", 0.01, 10000), ("sim", "concurrency", 0, MAX_BATCH), ("sim", "arrival_rate", 0, 1e6),
          ("sim", "seed", 0, 2**63),
          ("policy", "tick_s", 0.05, 3600), ("policy", "initial_threshold", 0, MAX_BATCH), ("policy", "seed", 0, 2**63),
          ("storage", "retention_samples_s", 1, 1e9), ("storage", "retention_max_samples", 1000, 1e10),
          ("storage", "retention_aggregates_s", 1, 1e10), ("storage", "retention_decisions_s", 1, 1e10),
          ("storage", "retention_max_decisions", 100, 1e10), ("storage", "retention_events_s", 1, 1e10),
          ("storage", "retention_max_events", 100, 1e10), ("storage", "retention_states_keep", 1, 1e6),
          ("storage", "retention_states_hourly_s", 0, 1e10), ("storage", "rollup_s", 1, 86400),
          ("storage", "checkpoint_s", 1, 86400), ("storage", "min_free_mb", 0, 1e9),
          ("control", "metrics_port", 0, 65535), ("control", "ingest_queue", 16, 10_000_000)]
# 0 (none) or at least: an arrival rate of 1e-300 hung the start at 100 % CPU; a disk floor under a WAL checkpoint's room
ZERO_OR_AT_LEAST = [("sim", "arrival_rate", MIN_ARRIVAL_RATE, f"{plain(1e6)} requests/s, as a trace's rate and specctl simulate's"),
                    ("storage", "min_free_mb", LEAST_MIN_FREE_MB, f"{plain(1e9)}: a checkpoint of the WAL needs that room")]


def validate(cfg: dict) -> None:
    """Every value a running daemon would choke on is refused here, with one line."""
    if cfg["engine"]["kind"] not in ("sim", "sglang"):
        raise ConfigError(f"config: [engine] kind={cfg['engine']['kind']!r} must be 'sim' or 'sglang'")
    for section, key, lo, hi in RANGES:
        value = cfg[section][key]
        if not lo <= value <= hi:          # NaN fails too
            # (plain: --speed 0, a float flag, read `speed=0.0`; the value as the operator writes it, as its range)
            raise ConfigError(f"config: [{section}] {key}={plain(value)} out of range (allowed {plain(lo)} .. {plain(hi)})")
    for section, key, least, upto in ZERO_OR_AT_LEAST:
        if 0 < (value := cfg[section][key]) < least:
            raise ConfigError(f"config: [{section}] {key}={plain(value)} out of range (allowed 0 for none, or {plain(least)} .. "
                              f"{upto})")
    ctl = cfg["control"]
    if str(ctl["log_level"]).upper() not in LOG_LEVELS:
        raise ConfigError(f"config: [control] log_level={ctl['log_level']!r} must be one of {', '.join(LOG_LEVELS)}")
    ctl["log_level"] = ctl["log_level"].upper()
    try:
        ipaddress.ip_address(ctl["metrics_addr"])
    except ValueError:
        raise ConfigError(f"config: [control] metrics_addr={ctl['metrics_addr']!r} is not an IP address") from None
    if cfg["engine"]["kind"] == "sglang" and _shares_sglangs_port(ctl, cfg["sglang"]):
        raise ConfigError(f"config: [control] metrics_port={ctl['metrics_port']} is SGLang's port on that address "
                          "([sglang] port): give the metrics another")
    for key, value in (("storage", cfg["storage"]["db"]), ("control", ctl["socket"])):
        if "\0" in value:
            raise ConfigError(f"config: [{key}] path {value!r} holds a NUL byte")
    if cfg["storage"]["db"] and (problem := db_path_problem(Path(cfg["storage"]["db"]))) is not None:
        raise ConfigError(f"config: [storage] db {cfg['storage']['db']}: {problem}")    # (was OSError at its lock)
    if ctl["socket"] and cfg["storage"]["db"] and is_db_own_path(Path(ctl["socket"]), Path(cfg["storage"]["db"])):
        raise ConfigError(f"config: [control] socket {ctl['socket']} is the database's own path ([storage] db); give "
                          "another")        # (both sections named: a --db alone is why, given_causes names it)
    if ctl["socket"] and (problem := socket_path_problem(Path(ctl["socket"]))) is not None:
        raise ConfigError(f"config: [control] socket {ctl['socket']}: {problem}")   # (a socket there: at bind)
    try:
        GuardConfig.from_mapping(cfg["guard"], _homes("guard"))      # ([guard] initial_threshold: [policy]'s)
    except GuardConfigError as e:
        raise ConfigError(f"config: [guard] {str(e).removeprefix('guard ')}") from None
    try:
        make_policy(cfg["policy"]["name"], cfg["policy"]["params"])
    except PolicyError as e:
        raise ConfigError(f"config: [policy] {e}") from None


def _shares_sglangs_port(ctl: dict, sglang: dict) -> bool:
    """Would the metrics server bind where SGLang serves? (SGLang takes it first, and start_metrics failed only once
    the engine had loaded: exit 1, restarted, for ever.) The same port on the same or an unspecified address."""
    if not ctl["metrics_port"] or sglang.get("port", SGLANG_PORT) != ctl["metrics_port"]:
        return False            # (first: the addresses may take a name lookup)
    wild = lambda a: a in ("", "0.0.0.0", "::")
    host, metrics = _address(sglang.get("host", "127.0.0.1")), _address(ctl["metrics_addr"])
    return host == metrics or wild(host) or wild(metrics)


def _address(host: object) -> str:
    """An address as one spelling, as SGLang's server (uvicorn) binds it: "0::" is "::", "localhost" and other names
    resolved in the family the text says (IPv6 where it holds a colon); a name that does not resolve (the engine's
    port check says so) as it is."""
    text = str(host).strip()
    if text.lower() == "localhost":
        return "127.0.0.1"              # (what an IPv4 lookup of it gives: no lookup needed)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    try:
        family = socket.AF_INET6 if ":" in text else socket.AF_INET
        return str(ipaddress.ip_address(socket.getaddrinfo(text, None, family, socket.SOCK_STREAM)[0][4][0]))
    except (OSError, ValueError, IndexError, UnicodeError):     # (ValueError: a NUL, text no codec takes)
        return text
