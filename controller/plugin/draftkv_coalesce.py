"""The kv off path's EAGER draft-KV writes coalesced over several off decode batches. EXPERIMENTAL, off by default:
used when the engine starts with SPEC_CONTROLLER_DRAFT_KV_COALESCE=N (N batches a write) and has no draft-KV graphs
(SPEC_CONTROLLER_DRAFT_KV_GRAPH=0, no decode CUDA graphs); with graphs (the default) the graphed writer coalesces in
its static inputs instead (draftkv_graph.GraphedKVWriter.batches: DEFAULT_COALESCE writes a replay unless started
otherwise, since 12-04b). On the H200 in 12-02 this eager form kept the draft consistent and was not faster than
per-batch eager writes.

Runs inside SGLang's scheduler process, on every off batch: keep it lean. Why: at small batches the
per-batch write (draftkv.DraftKVWriter.write) is bound by reading the draft's fc and qkv weights (~200 MB for
a 4096-wide EAGLE3 head, ~45 us on an H200) plus ~10 small kernels: ~2 % of each decode step at batch 16
(bench/results/h200-2026-12-01g section 3). Here an off batch only copies its rows (the target's aux hidden
states, the tokens, positions and slots) into a buffer, and one write covers up to N batches.

The draft's KV must hold every buffered position before anything else reads or writes the draft's pool: the
plugin flushes before every batch this writer does not take (speculative, extend with its prefill's draft
KV, steps-0, another writer; offpath.py). Not with the hierarchical cache, the external cache linker,
disaggregation or TP > 1 (unsupported_reason). Within one flush a slot can appear twice (a request
finished and its slot went to another request's next token): the later row wins, the earlier ones are
pointed at the pool's padding slot, where SGLang's padded graph rows write too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from .draftkv import PAD_SLOT, fc_weight

log = logging.getLogger("spec_controller.plugin")

MAX_ROWS = 2048          # the buffer's rows at most (at the 7.2B target's aux width: 48 MiB in bf16)


def last_write_wins(loc: Any) -> Any:
    """loc with every slot's earlier occurrences replaced by PAD_SLOT, on the device (no host sync)."""
    import torch
    order = torch.argsort(loc, stable=True)            # equal slots stay in row (= time) order
    slots = loc[order]
    last = torch.ones_like(slots, dtype=torch.bool)
    last[:-1] = slots[:-1] != slots[1:]
    out = torch.empty_like(loc)
    out[order] = torch.where(last, slots, torch.full_like(slots, PAD_SLOT))
    return out


@dataclass
class CoalescedKVWriter:
    """Same write() as DraftKVWriter, deferred; flush(draft_worker) writes what is buffered."""
    eager: Any                                  # the DraftKVWriter
    batches: int                                # off batches a write covers at most
    capacity: int                               # buffered rows at most
    enter: Callable[[Any], ContextManager]      # the draft's TP context for a draft worker (as the eager write)
    dedupe: Callable[[Any], Any] = last_write_wins
    buffers: tuple | None = None                # (aux, tokens, positions, loc), made at the first write
    rows: int = 0
    pending: int = 0
    flushes: int = field(default=0)

    def write(self, aux_hidden: Any, next_tokens: Any, positions: Any, loc: Any) -> None:
        """Called where the eager write is (fastoff.run, inside the draft's context)."""
        n = positions.shape[0]
        if self.buffers is None:
            self.buffers = (aux_hidden.new_empty((self.capacity, aux_hidden.shape[-1])),
                            next_tokens.new_empty(self.capacity), positions.new_empty(self.capacity),
                            loc.new_empty(self.capacity))
        aux, tokens, pos, slots = self.buffers
        if n > self.capacity - self.rows or aux_hidden.shape[-1] != aux.shape[-1]:
            self._write_buffered()
            if n > self.capacity or aux_hidden.shape[-1] != aux.shape[-1]:
                self.eager.write(aux_hidden, next_tokens, positions, loc)
                return
        r = self.rows
        aux[r:r + n].copy_(aux_hidden[:n])
        tokens[r:r + n].copy_(next_tokens[:n])
        pos[r:r + n].copy_(positions)
        slots[r:r + n].copy_(loc)
        self.rows, self.pending = r + n, self.pending + 1
        if self.pending >= self.batches:
            self._write_buffered()

    def flush(self, draft_worker: Any) -> None:
        """Write every buffered row, in the draft's context (a no-op when empty)."""
        if self.rows:
            with self.enter(draft_worker):
                self._write_buffered()

    def _write_buffered(self) -> None:
        r = self.rows
        if r == 0:
            return
        self.rows = self.pending = 0         # first: a failed write is not retried over newer rows
        aux, tokens, pos, slots = self.buffers
        self.eager.write(aux[:r], tokens[:r], pos[:r], self.dedupe(slots[:r]))
        self.flushes += 1


def capacity(batches: int, max_running_requests: int) -> int:
    return max(1, min(MAX_ROWS, batches * max(1, max_running_requests)))


def unsupported_reason(server_args: Any, tp_size: int) -> str | None:
    """Why this engine's draft-KV writes must stay per batch, or None. Other readers and writers of the
    draft's pool that do not pass the plugin's flushes: the hierarchical cache backs it up to host memory
    while result processing inserts into the radix tree, and loads it back on its own stream;
    disaggregation sends a prompt's KV from the prefill engine and writes it into the decode engine's slots;
    SGLang 0.5.23's external cache linker offloads and loads an EAGLE3 draft's pool as a sidecar of the target's
    pages, gated on the forward stream alone. At TP > 1 every rank would have to buffer and flush alike (the draft's
    embedding is a collective)."""
    if getattr(server_args, "enable_hierarchical_cache", False):
        return "the hierarchical cache copies the draft's KV outside the plugin's flushes"
    if getattr(server_args, "enable_unified_cache_external_linker", False):
        return "the external cache linker copies the draft's KV outside the plugin's flushes"
    if (getattr(server_args, "disaggregation_mode", None) or "null") != "null":
        return "disaggregation moves the draft's KV outside the plugin's flushes"
    if tp_size > 1:
        return "TP > 1 (every rank would have to flush alike)"
    return None


def for_engine(eager: Any, batches: int, worker: Any, tp_size: int,
               enter: Callable[[Any], ContextManager]) -> CoalescedKVWriter | None:
    """The engine's coalesced writer, or None where its draft pool has other readers (logged); build errors
    propagate."""
    args = getattr(worker, "server_args", None)
    why = unsupported_reason(args, tp_size)
    if why is not None:
        log.warning("spec-controller: draft KV writes not coalesced (%s): written per batch", why)
        return None
    rows = capacity(batches, getattr(args, "max_running_requests", None) or 128)
    out = build(eager, batches, rows, enter)
    log.info("spec-controller: draft KV writes coalesced over up to %d off batches (%d rows; experimental)",
             batches, rows)
    return out


def build(eager: Any, batches: int, rows: int, enter: Callable[[Any], ContextManager]) -> CoalescedKVWriter:
    """The writer with its buffers made now, on the draft's device, at its fc input width (the target's aux
    hidden states): not on the hot path, and a failure here leaves the writes per batch (ValueError or
    torch's error)."""
    import torch
    weight = fc_weight(eager, "the buffer's hidden-state rows")
    i64 = dict(dtype=torch.int64, device=weight.device)
    buffers = (torch.empty((rows, weight.shape[1]), dtype=weight.dtype, device=weight.device),
               torch.empty(rows, **i64), torch.empty(rows, **i64), torch.empty(rows, **i64))
    return CoalescedKVWriter(eager, batches, rows, enter, buffers=buffers)
