"""The SPEC_CONTROLLER_* variables the plugin reads at an SGLang engine's start, as an operator writes them (a unit
file, a shell, the daemon's [sglang] env): shared by the plugin, which reads them, and the daemon, which refuses in
[sglang] env a value the plugin would not read (it would take its default, unheard) or a name it does not know."""
from __future__ import annotations

from collections.abc import Mapping

from .contract import (ENV_DEFER_PROMPT_KV, ENV_DRAFT_KV_COALESCE, ENV_DRAFT_KV_GRAPH, ENV_DRAFT_KV_SIDE, ENV_LEAN_OFF,
                       ENV_LEAN_RESOLVE)
from .numtext import ASCII_SPACE, int_text

OFF_WORDS = frozenset({"0", "false", "no", "off"})
ON_WORDS = frozenset({"1", "true", "yes", "on"})
PLUGIN_ENV = "SPEC_CONTROLLER_PLUGIN"              # "0": the plugin stays out of this SGLang
EXPERIMENTS_ENV = "SPEC_CONTROLLER_EXPERIMENTS"    # "1": the simulator's knobs and the draft's hidden states
ALLOC_LOOP_ENV = "SPEC_CONTROLLER_ALLOC_LOOP"      # the plugin's modules of the same names read these (their ENV)
PLAIN_OFF_ENV = "SPEC_CONTROLLER_PLAIN_OFF"
WARM_SIZES_ENV = "SPEC_CONTROLLER_WARM_SIZES"
FAST_GRAMMAR_ENV = "SPEC_CONTROLLER_FAST_GRAMMAR"
# The switches an operator may set for the daemon's engine (the rest the daemon sets: sglang_env.DAEMON_ENV)
OPERATOR_SWITCHES = frozenset({EXPERIMENTS_ENV, ENV_DRAFT_KV_GRAPH, ENV_DRAFT_KV_SIDE, ENV_LEAN_OFF, ENV_DEFER_PROMPT_KV,
                               ENV_LEAN_RESOLVE, ALLOC_LOOP_ENV, PLAIN_OFF_ENV, WARM_SIZES_ENV, FAST_GRAMMAR_ENV})
COALESCE_RANGE = (0, 64)                           # ENV_DRAFT_KV_COALESCE: draft-KV writes per graph replay


def switch_on(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    """A SPEC_CONTROLLER_* switch as an operator writes it in a unit file or a shell: 0 / false / no / off and
    1 / true / yes / on (any case, spaces around); anything else, or unset, is the default. Was off for exactly "0"
    (so SPEC_CONTROLLER_PLUGIN=false left the plugin steering every adaptive engine) and on for exactly "1"."""
    word = env.get(name, "").strip(ASCII_SPACE).lower()     # (not U+00A0's: the daemon's [sglang] env refuses it)
    return False if word in OFF_WORDS else True if word in ON_WORDS else default


# An environment value as an integer: numtext's rule, as every integer an operator writes ('08', ' 8' and '+8' were
# read here and refused at specctl's arguments; '²' passes isdigit() and not int(); '٣' passes isdecimal() and reads
# 3; int() of thousands of digits raised, which would stop the scheduler's start-up)
env_int = int_text


def operator_value_problem(name: str, value: str) -> str | None:
    """Why the plugin would not read [sglang] env's NAME = VALUE as written (None: it would), for a SPEC_CONTROLLER_*
    name; the daemon's own variables are refused before this (sglang_env.DAEMON_ENV)."""
    if name == PLUGIN_ENV:      # (on, its default, changes nothing)
        return None if value.strip(ASCII_SPACE).lower() in ON_WORDS else \
            "the daemon's engine runs the plugin (without it nothing steers the threshold): remove it from env"
    if name == ENV_DRAFT_KV_COALESCE:
        lo, hi = COALESCE_RANGE
        n = env_int(value)
        return None if n is not None and lo <= n <= hi else f"must be an integer {lo} .. {hi}"
    if name in OPERATOR_SWITCHES:
        return None if value.strip(ASCII_SPACE).lower() in OFF_WORDS | ON_WORDS else \
            "must be one of 0 / false / no / off or 1 / true / yes / on (else the plugin takes its default)"
    return f"not a variable the plugin reads (here: {', '.join(sorted(OPERATOR_SWITCHES | {ENV_DRAFT_KV_COALESCE}))})"
