"""What the off path reports (OffPath.counters, path_index, prefills_pay_draft): the plugin's stats message reads it
(contract.STATS_FIELDS, OFF_PATHS); runs in SGLang's scheduler process at each stats flush, not per batch."""
from __future__ import annotations

from typing import Any

from ..contract import KV_PATH, PAYS_DRAFT, SAME_AT_ZERO, zero_saves_prefill_draft
from . import fastoff


def prefills_pay_draft(off: Any) -> bool:
    """Does a prefill joining an off batch run the draft's pass above 0 and skip it at 0 (draft_extend_for_prefill)?
    Not with the KV writer (skipped at any threshold), lean prefill off or rejection sampling (run at 0 too), nor
    once the plugin found the engine is not its own (inert: SGLang's own path at every threshold)."""
    lean = off.lean_prefill and not off.rejection and off.router.inert_reason is None
    return zero_saves_prefill_draft(lean, off.active_writer() is not None)


def path_index(off: Any) -> int:
    """Index into contract.OFF_PATHS: steps-0, fast, fast built but switched off, fast + draft synced,
    fast + the draft's KV written by the plugin."""
    if off.fast is None:
        return 0
    if not off.enabled:
        return 2
    if off.sync_draft and off.fast.with_hidden:
        return 3
    return KV_PATH if off.active_writer() is not None else 1


def counters(off: Any) -> dict[str, int]:
    out = {"off_fallbacks": off.fallbacks, "lean_prefills": off.lean_prefills,
           "off_fallbacks_logprob": off.fallback_reasons.get(fastoff.LOGPROB, 0),
           "off_fallbacks_grammar": off.fallback_reasons.get(fastoff.GRAMMAR, 0),
           "draft_kv_writes": off.kv_writes, **off.prompts.counters(), "lean_resolves": off.resolve.batches,
           "draft_kv_graph_writes": off.kv_graph.replays if off.kv_graph is not None else 0,
           "draft_kv_side_writes": off.kv_graph.side_replays if off.kv_graph is not None else 0,
           "draft_kv_graph_launches": off.kv_graph.launches if off.kv_graph is not None else 0,
           "draft_kv_prefill_direct": off.kv_graph.direct_prompts if off.kv_graph is not None else 0,
           "prefills_pay_draft": PAYS_DRAFT if off.prefills_pay_draft() else SAME_AT_ZERO,
           "plain_off_batches": off.plain.batches if off.plain is not None else 0}
    if off.fast is not None:
        out.update(fast_off_batches=off.fast.batches, fast_off_graph_batches=off.fast.graph_batches,
                   fast_off_cpu_ns=off.fast.cpu_ns, fast_off_target_ns=off.fast.target_ns,
                   draft_kv_ns=off.fast.kv_ns, fast_off_lean_batches=off.fast.lean_batches)
    return out
