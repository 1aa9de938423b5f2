"""The SGLang engine's [sglang] section checked, in the daemon process: what no SGLang could be started from is
refused before anything is launched (a NUL byte, no model, a path that expands no ~, an unsupported or config-file
launch), and the keys the daemon decides (the draft's shape, host and port) are completed. count and seconds read
a number setting in range (the engine's timeouts and probe interval too); OWN_DEFAULTS holds the defaults of the
engine's own settings. SGLangEngine builds itself from this; its launch command (sglang_flags) and environment
(sglang_env) are read from the result."""
from __future__ import annotations

import math
import os

from policies.types import MAX_SPEC_STEPS

from ...contract import unsupported_reason
from ...numtext import plain
from ...paths import home_unexpanded
from .base import Engine, EngineError
from .child import SGLANG_PORT
from .sglang_env import DEFAULT_LEAN_PREFILL, DEFAULT_OFF_PATH
from .sglang_flags import config_file_reason, extra_args, named_paths, no_http_reason, server_flags, unfit_key

# the defaults of the engine's own keys (sglang_flags.OWN_KEYS, which never reach SGLang's command line;
# systemd/config.example.toml shows them; python: the daemon's interpreter)
OWN_DEFAULTS = {"ready_timeout_s": Engine.ready_timeout_s, "probe_s": 30.0, "hang_after_s": 180.0, "off_path": DEFAULT_OFF_PATH,
                "lean_prefill": DEFAULT_LEAN_PREFILL, "extra_args": [], "env": {}}


def count(args: dict, key: str, default: int, lo: int, hi: int) -> int:
    """[sglang] key as an integer in lo .. hi (default where it is not set or null)."""
    value = args.get(key)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise EngineError(f"sglang engine: [sglang] {key} must be an integer in {lo} .. {hi}, got {value!r}")
    return value


def seconds(args: dict, key: str, default: float, most: float = math.inf) -> float:
    """[sglang] key as a number of seconds in 0 .. most (default where it is not set)."""
    value = args.get(key, default)      # (an interval, probe_s, has a most: APScheduler's timedelta takes no inf)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:   # NaN too (inf: no limit)
        bound = f" and <= {plain(most)} (0: none)" if most < math.inf else ""
        raise EngineError(f"sglang engine: [sglang] {key} must be a number of seconds >= 0{bound}, got {value!r}")
    if key == "ready_timeout_s" and value == 0:     # (probe_s and hang_after_s take 0 as none; here it ended every start)
        raise EngineError("sglang engine: [sglang] ready_timeout_s = 0 would end every start before SGLang could answer: "
                          "give seconds > 0, or inf for no limit")
    return float(value)


def checked_section(args: dict) -> tuple[dict, int]:
    """A copy of the [sglang] section, refused where SGLang could not be started from it (EngineError, one line),
    with the draft's shape, host and port the daemon decides where the section leaves them; and K, the draft's steps
    (the candidate the plugin switches on: 3 where the section gives none, null included)."""
    args = dict(args)
    if (unfit := unfit_key(args)) is not None:       # (the value not echoed: it may be a key)
        raise EngineError(f"sglang engine: [sglang] {unfit[0]} {unfit[1]}")
    if "model_path" not in args:
        raise EngineError("sglang engine: [sglang] model_path is required")
    for key, value in named_paths(args):    # (SGLang takes "" for a path and expands no ~: it fails at start)
        if why := home_unexpanded(value) or (None if value.strip() else "name a path or a model id"):
            raise EngineError(f"sglang engine: [sglang] {key} = {value!r}: {why}")
    if "python" in args and not (isinstance(args["python"], str) and args["python"].strip()):
        raise EngineError("sglang engine: [sglang] python must name an interpreter (leave it out for the daemon's)")
    args["extra_args"] = extra_args(args)
    reason = (launch_size_reason(args) or unsupported_reason({**args, "speculative_adaptive": True})
              or config_file_reason(args) or no_http_reason(args))
    if reason:
        raise EngineError(f"sglang engine: {reason}")
    k = count(args, "speculative_num_steps", 3, 1, MAX_SPEC_STEPS)
    args.setdefault("speculative_num_steps", k)
    args.setdefault("speculative_num_draft_tokens", k + 1)   # start at the largest candidate
    args.setdefault("speculative_eagle_topk", 1)
    args.setdefault("host", "127.0.0.1")
    args["port"] = count(args, "port", SGLANG_PORT, 1, 65535)
    return args, k


def launch_size_reason(args: dict) -> str | None:
    """Why the engine's exec would refuse the launch as a whole (E2BIG, 'Argument list too long'), or None: its words,
    [sglang.env]'s entries and the daemon's environment, each with its NUL and its pointer, past the kernel's ARG_MAX
    (a million extra_args passed config check's parser only at its 300 s timeout: helper-141); the words around
    them (the interpreter, -m sglang.launch_server, the plugin's variables): LAUNCH_SLACK."""
    env = args.get("env") if isinstance(args.get("env"), dict) else {}
    words = [*server_flags(args), *(f"{k}={v}" for k, v in {**os.environ, **env}.items())]
    size = sum(len(word.encode(errors="replace")) + 1 + 8 for word in words) + LAUNCH_SLACK
    most = os.sysconf("SC_ARG_MAX")
    if size <= most:
        return None
    return (f"[sglang] the launch's words and environment come to {size:,} bytes, more than the kernel gives a new "
            f"program ({most:,}, ARG_MAX): fewer or shorter extra_args, keys or [sglang.env] entries")


LAUNCH_SLACK = 16384
