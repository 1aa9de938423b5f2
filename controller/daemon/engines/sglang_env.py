"""The environment the SGLang process gets from [sglang]: the plugin's start-up switches (off_path, lean_prefill) and
the operator's [sglang] env, which may not set what the daemon sets itself."""
from __future__ import annotations

from ...envwords import operator_value_problem
from ...contract import ENV_ADDRESS, ENV_DRAFT_KV, ENV_FAST_OFF, ENV_INITIAL_THRESHOLD, ENV_LEAN_PREFILL, ENV_SYNC_DRAFT
from .base import EngineError
from .sglang_flags import shown_value

# [sglang] off_path: how off batches run (docs/sglang.md#the-off-path) -> the plugin's environment
OFF_PATH_ENV = {"kv": {ENV_DRAFT_KV: "1", ENV_SYNC_DRAFT: "0"}, "synced": {ENV_SYNC_DRAFT: "1", ENV_DRAFT_KV: "0"},
                "fast": {ENV_SYNC_DRAFT: "0", ENV_DRAFT_KV: "0"}, "steps0": {ENV_FAST_OFF: "0"}}
# kv: the draft's KV complete when speculation resumes (issue 12 item 3), at a few kernels per off batch;
# synced costs 21 % at steady batch 128, fast leaves the draft stale (docs/sglang.md#the-off-path)
DEFAULT_OFF_PATH = "kv"
DEFAULT_LEAN_PREFILL = True


def plugin_env(args: dict) -> dict[str, str]:
    """The plugin's start-up choices from [sglang] off_path / lean_prefill; EngineError on a bad value."""
    off_path = args.get("off_path", DEFAULT_OFF_PATH)
    if off_path not in OFF_PATH_ENV:
        raise EngineError(f"sglang engine: [sglang] off_path={off_path!r} must be one of {', '.join(OFF_PATH_ENV)}")
    lean = args.get("lean_prefill", DEFAULT_LEAN_PREFILL)
    if not isinstance(lean, bool):
        raise EngineError(f"sglang engine: [sglang] lean_prefill={lean!r} must be true or false")
    return {**OFF_PATH_ENV[off_path], ENV_LEAN_PREFILL: "1" if lean else "0"}


# SGLang's opt-in SIGKILL of its process group on a scheduler exception (scheduler.py, 0.5.14 ... 0.5.23): that group
# is the daemon's too (systemd's unit, the bench's pins), so the daemon would die unheard, without its exit 1, the
# error's event or a drain. Always off: the daemon stops SGLang's whole tree itself when SGLang fails.
KILLPG_ENV = {"SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION": "0"}
# The SGLang process's variables the daemon sets itself -> what chooses them ([sglang] env may not)
DAEMON_ENV = {ENV_ADDRESS: "the daemon (its telemetry socket)", ENV_INITIAL_THRESHOLD: "the daemon (the threshold)",
              ENV_LEAN_PREFILL: "[sglang] lean_prefill"} | {k: "[sglang] off_path" for v in OFF_PATH_ENV.values() for k in v} \
    | {k: "the daemon (off: SGLang shares its process group, a killpg would SIGKILL the daemon)" for k in KILLPG_ENV}


def user_env(args: dict) -> dict[str, str]:
    """[sglang] env: extra environment for the SGLang process (a table of names to strings, numbers or booleans,
    true / false as "1" / "0").
    The variables the daemon sets itself are refused (EngineError), naming the setting that chooses them, and so is a
    SPEC_CONTROLLER_* name or value the plugin would not read (envwords.operator_value_problem)."""
    env = args.get("env", {})
    if not isinstance(env, dict):
        raise EngineError(f"sglang engine: [sglang] env must be a table of NAME = \"value\", got a "
                          f"{type(env).__name__}")         # (not the value: it may hold a token)
    out: dict[str, str] = {}
    for name, value in env.items():
        if name in DAEMON_ENV:
            raise EngineError(f"sglang engine: [sglang] env {name} is set by {DAEMON_ENV[name]}: remove it from env")
        if not name or "=" in name or isinstance(value, (dict, list)):
            raise EngineError(f"sglang engine: [sglang] env {name!r} = {shown_value('env.' + name, value)!r}: a "
                              "variable name and a string")
        out[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)   # the plugin's switches
        if name.startswith("SPEC_CONTROLLER_") and (problem := operator_value_problem(name, out[name])):
            raise EngineError(f"sglang engine: [sglang] env {name} = {shown_value('env.' + name, value)!r}: {problem}")
    return out
