"""`spec-controller config check` on an [sglang] section: the launch the daemon would run, read by SGLang's own parser
in the interpreter that would run it (launchparse.py, as from-launch reads a command). Runs in the daemon's command
line, before a `systemctl restart`, and in the daemon when SGLang exits 2 before it is ready (not_ready_exit).

Why: a key SGLang does not know (`mem_fraction_statc`) or a value its flag does not take passed the check, and the
service then started SGLang, which exited at once on its parser's error, and systemd restarted it, again and again."""
from __future__ import annotations

import os
import sys

from .engines.base import Engine
from .engines.sglang import SGLangEngine
from .engines.sglang_flags import OWN_KEYS, flag_of
from .launchcfg import LaunchError, SGLangParser, deprecated_notes

WHAT = "the [sglang] section's flags"


def section_notes(engine: SGLangEngine) -> list[str]:
    """Notes on the section as SGLang's parser reads it (the flags it deprecates; that it could not be asked). Raises
    LaunchError (code 2) where SGLang refuses the flags, naming the keys they came from."""
    python = str(engine.args.get("python") or sys.executable)
    try:                       # (in the environment SGLang gets: [sglang] env's PYTHONPATH or SGLANG_PLUGINS count)
        parser = SGLangParser(python, {**os.environ, **engine.user_env}, "[sglang] python")
    except LaunchError as e:
        return [f"{WHAT} were not read by SGLang's parser: {e}"]
    try:
        answer = parser.ask({"argv": engine.server_argv()}, WHAT)
    except LaunchError as e:
        if e.code != 2:                       # the parser could not run there (no SGLang it can import, it stopped)
            return [f"{WHAT} were not read by SGLang's parser: {e}"]
        raise LaunchError(f"{e}{keys_in(str(e), engine.args)}") from None
    finally:
        parser.close()
    return deprecated_notes(answer)


def not_ready_exit(engine: Engine, timeout: float) -> tuple[str, int]:
    """Why an engine was not ready, and the daemon's exit status: 2 (which the unit does not restart) only where SGLang
    exited 2 and its own parser, asked again here, refuses the launch (its line, naming the key, said too). An exit 2
    the parser does not confirm may have had another cause (a wrapper script, a plugin that did not load this once):
    1, restarted."""
    reason, code = engine.not_ready_reason(timeout), engine.not_ready_code()
    if code != 2 or not isinstance(engine, SGLangEngine):
        return reason, code
    try:
        section_notes(engine)
    except LaunchError as e:
        return f"{reason}; {e}", 2
    return f"{reason}; SGLang's parser, asked again, takes the flags: restarted", 1


def keys_in(message: str, args: dict) -> str:
    """' ([sglang] key, ...)': the section's keys whose flags SGLang's refusal names ('' where none: extra_args')."""
    named = [key for key in args if key not in OWN_KEYS and _names(message, flag_of(key))]
    return f" ([sglang] {', '.join(named)})" if named else ""


def _names(message: str, flag: str) -> bool:
    """Does the message name this flag as a whole word (--tp-size, not inside --tp-size-extra)?"""
    at = message.find(flag)
    while at >= 0:
        end = at + len(flag)
        if end == len(message) or not (message[end].isalnum() or message[end] in "-_"):
            return True
        at = message.find(flag, end)
    return False
