"""`specctl status`'s lines on the SGLang plugin: the engine's SGLang and off path, how off batches ran (fast, on
CUDA graphs, lean, steps-0 and why), the draft-KV and prompt writes, and what the plugin's hooks cost per batch."""
from __future__ import annotations

from ..contract import FAST_PATHS, OFF_PATHS

# each fast off path as [sglang] off_path names it (status says the operator's word)
OFF_PATH_SETTING = dict(zip((OFF_PATHS[i] for i in FAST_PATHS), ("fast", "synced", "kv")))


def plugin_lines(plugin: dict) -> list[str]:
    """The status's lines on the SGLang plugin (none where the engine has none): its SGLang and off path, how its
    off batches ran, what its hooks cost."""
    if "off_path" not in plugin:
        return []
    switches, switch_ns = plugin.get("switches", 0), plugin.get("switch_ns", 0)
    return [_sglang_line(plugin),
            f"off path:    {plugin['off_path']}, {plugin['fast_off_batches']} fast batches "
            f"({plugin['fast_off_graph_batches']} on CUDA graphs"
            + (f", {plugin['fast_off_lean_batches']} lean" if plugin.get("fast_off_lean_batches") else "")
            + (f", {plugin['lean_resolves']} without the draft extras' gather" if plugin.get("lean_resolves") else "")
            + (f", {plugin['plain_off_batches']} as non-speculative batches" if plugin.get("plain_off_batches") else "")
            + f"), {plugin['off_fallbacks']} on steps-0"
            + _fallback_split(plugin)
            + (f"; {plugin['lean_prefills']} prefills skipped the draft (their batch did not speculate)"
               if plugin.get("lean_prefills") else "")
            + _kv_writes(plugin),
            f"plugin cost: decision {_per(plugin['decision_ns'] - switch_ns, plugin['decisions'] - switches)}"
            f" us, telemetry {_per(plugin['telemetry_ns'], plugin['telemetry_calls'])} us per batch; "
            f"{_per(switch_ns, switches)} us per state switch ({switches} switches)"
            + (f"; {plugin['alloc_loop_batches']} decode allocations by SGLang 0.5.19's loop"
               if plugin.get("alloc_loop_batches") else ""),
            f"off launch:  {_per(plugin['fast_off_cpu_ns'], plugin['fast_off_batches'])} us CPU per fast "
            f"off batch: target forward {_per(plugin.get('fast_off_target_ns', 0), plugin['fast_off_batches'])}"
            f", draft KV writes {_per(plugin.get('draft_kv_ns', 0), plugin['fast_off_batches'])}"
            + _prompt_writes(plugin)]


def _sglang_line(plugin: dict) -> str:
    """The engine's SGLang and what backs its off path: fast (measured / contract-checked) or steps-0, why."""
    path = plugin["off_path"]
    if plugin.get("off_path_evidence"):
        what = f"off path {OFF_PATH_SETTING.get(path, 'fast')}, {plugin['off_path_evidence']}" + \
            (f"; {plugin['off_reason']}" if plugin.get("off_reason") else "")
    else:
        what = f"off path {path}" + (f": {plugin['off_reason']}" if plugin.get("off_reason") else "")
    return f"sglang:      {plugin.get('sglang', '?')}; {what}"


def _per(ns: float, n: int) -> str:
    """Microseconds per event ("-" for none)."""
    return f"{ns / n / 1e3:.1f}" if n else "-"


def _kv_writes(plugin: dict) -> str:
    """What the plugin's draft-KV writes did: how many, how many replayed from CUDA graphs."""
    if not plugin.get("draft_kv_writes"):
        return ""
    graphs, side = plugin.get("draft_kv_graph_writes"), plugin.get("draft_kv_side_writes")
    launches = plugin.get("draft_kv_graph_launches")
    beside = f", {side} of them beside the next forward on a side stream" if side else ""
    beside += f", coalesced into {launches} replays" if graphs and launches and launches < graphs else ""
    return (f"; draft KV written by the plugin for {plugin['draft_kv_writes']} batches"
            + (f" ({graphs} from CUDA graphs{beside})" if graphs else ""))


def _prompt_writes(plugin: dict) -> str:
    """The lean prefills' prompt writes: CPU per prefill, and the eager ones' apart."""
    if not plugin.get("draft_kv_prefill_ns"):
        return ""
    eager, held = plugin.get("draft_kv_prefill_eager"), plugin.get("draft_kv_prefill_held")
    in_writer, direct = plugin.get("draft_kv_prefill_writer_ns"), plugin.get("draft_kv_prefill_direct")
    return (f"; prompt KV writes {_per(plugin['draft_kv_prefill_ns'], plugin['lean_prefills'])} us per prefill"
            + (f" ({_per(in_writer, plugin['lean_prefills'])} of it in the graphed writer)" if in_writer else "")
            + (f" ({direct} straight into the graphs' inputs)" if direct else "")
            + (f" ({eager} written eagerly, {_per(plugin.get('draft_kv_prefill_eager_ns', 0), eager)} us each)"
               if eager else "")
            + (f" ({held} held until the next decode's forward)" if held else ""))


def _fallback_split(plugin: dict) -> str:
    """Why off batches took steps-0, and their share of all off batches (grammar and logprob requests
    need the verify's extras: the share says what the fast path misses on this server's traffic)."""
    n = plugin.get("off_fallbacks", 0)
    if not n:
        return ""
    logprob, grammar = plugin.get("off_fallbacks_logprob", 0), plugin.get("off_fallbacks_grammar", 0)
    share = 100 * n / (n + plugin.get("fast_off_batches", 0))
    return f" ({share:.0f}% of off batches: {logprob} logprobs, {grammar} grammar, {n - logprob - grammar} other)"
