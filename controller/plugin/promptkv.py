"""A prefill's draft-KV write held until the next batch's forward is queued (run-time switch
spec_controller_defer_prompt_kv, off by default). Runs inside SGLang's scheduler.

Why: an extend's launch is CPU-bound (SGLang's prefill graphs are breakable), so the ~0.4-0.5 ms of CPU the
prompt's write takes inside it (draftkv.write_prefill) lengthens the extend on the GPU too: each extend's launch
outside the target was +0.3-1.0 ms in every pair of bench/results/h200-2026-12-04d, ~1 % of a closed loop. Held,
the write is staged right after the next off decode's forward is queued, while the GPU runs that step.

Order, which keeps the draft's pool as an immediate write would: the held rows go into the writer before that
decode's own rows (a slot freed and given to it keeps the later row) and before anything else touches the draft's
pool (OffPath._flush_kv stages them first: speculating batches, steps-0 batches, a prefill's own draft pass).
Up to MAX_HELD_PROMPTS prefills, MAX_HELD_BYTES of aux copies together, are held (an aux copy per prompt), in order:
prefills often come back to back under arrivals, and with one held the second extend staged the first inside its
launch (12-04e: the held write took only ~0.25 of the write's ~0.6 ms off each extend). A prompt that would pass
either cap stages those held first. prompt_rows_of(keep) copies the device tensors, since the target's prefill
output may sit in a buffer that a later forward reuses.
Not where others copy the draft's pool outside the plugin's flushes (hierarchical cache, linker, disaggregation) or
at TP > 1: why_not, as for coalescing. Counted: the staging's CPU as the prompt writes' (draft_kv_prefill_ns) and,
staged inside an off decode, in that batch's launch CPU too (fast_off_cpu_ns); a failed staging loses those rows'
draft KV (recorded; the writer is dropped, so later prompts run the draft's pass above threshold 0 and go without
draft KV at 0, where lean prefill skips the pass: acceptance only, the target verifies every token) - an immediate
write's failure runs the draft's pass for that prompt instead.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from . import draftkv

log = logging.getLogger("spec_controller.plugin")
MAX_HELD_PROMPTS = 4         # prefills held at once ...
MAX_HELD_BYTES = 96 << 20    # ... and their aux copies' bytes (3 x hidden bf16 a row: 4,096 rows at hidden 4096, 2,048 at
                             # 8192), outside SGLang's memory budget; a prompt over it is written at once


def row_bytes(aux_hidden: Any) -> int:
    """Bytes a held prompt's aux copy takes per token (the target's aux hidden states: its width x element size)."""
    return int(aux_hidden.shape[-1]) * aux_hidden.element_size()


def writer_ns(writer: Any) -> int:
    """CPU a writer has spent in write() so far (the graphed writer counts it; the eager one: 0)."""
    return getattr(writer, "write_ns", 0) or 0


class PromptWrites:
    """The prompts' draft-KV writes of one engine: written at once, or held (defer) until the next forward is queued;
    their CPU time, how many no CUDA graph held (the eager writer, or more rows than any graph) and how many waited
    for the next decode, for status."""

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer                  # run-time switch (spec_controller_defer_prompt_kv)
        # why this engine's prompt rows may not wait (other readers of the draft's pool, TP > 1: the same as for
        # coalescing, draftkv_coalesce.unsupported_reason); set at start
        self.why_not: str | None = "not started"
        self.writer: Any = None
        self.queue: list[draftkv.PromptRows] = []    # held, oldest first, all for self.writer
        self.queued_rows = 0
        self.ns = self.eager = self.eager_ns = self.held = 0
        self.writer_ns = 0                  # of ns: in the graphed writer's write() (its static-input copies, replays)

    def write(self, writer: Any, batch: Any, aux_hidden: Any, next_token_ids: Any) -> bool:
        """A prefill's draft KV: written now, or (defer, where this engine allows it) its rows held. Either way a
        row held before goes in first (a slot it freed and this prompt reuses keeps this prompt's row). Returns
        whether there was anything to write; raises what the write raises."""
        n = sum(getattr(batch, "extend_lens", None) or ())
        # a prompt whose own aux copy would pass MAX_HELD_BYTES is written at once: held memory stays under the cap
        if self.defer and self.why_not is None and n * row_bytes(aux_hidden) <= MAX_HELD_BYTES:
            if self.queue and (writer is not self.writer or len(self.queue) >= MAX_HELD_PROMPTS
                               or (self.queued_rows + n) * row_bytes(aux_hidden) > MAX_HELD_BYTES):
                self.stage()          # (before this prompt's copies: the held ones' memory first given back)
            t0 = time.perf_counter_ns()
            rows = draftkv.prompt_rows_of(batch, aux_hidden, next_token_ids, keep=True)
            self.ns += time.perf_counter_ns() - t0
            if rows is not None:
                self.writer = writer
                self.queue.append(rows)
                self.queued_rows += n
                self.held += 1
                if self.held == 1:      # the engine's log says it engaged (run_consistency has no daemon's status)
                    log.info("spec-controller: prompts' draft-KV writes held until the next decode's forward "
                             "(spec_controller_defer_prompt_kv)")
            return rows is not None
        self.stage()
        t0, replays, in_writer = time.perf_counter_ns(), getattr(writer, "replays", None), writer_ns(writer)
        wrote = draftkv.write_prefill(writer, batch, aux_hidden, next_token_ids)
        spent = time.perf_counter_ns() - t0
        self.ns += spent
        self.writer_ns += writer_ns(writer) - in_writer
        if wrote and (replays is None or writer.replays == replays):    # eager writer, or too many rows
            self.eager += 1
            self.eager_ns += spent
        return wrote

    def counters(self) -> dict[str, int]:
        return {"draft_kv_prefill_ns": self.ns, "draft_kv_prefill_eager": self.eager,
                "draft_kv_prefill_eager_ns": self.eager_ns, "draft_kv_prefill_held": self.held,
                "draft_kv_prefill_writer_ns": self.writer_ns}

    def decide(self, why_not: str | None) -> None:
        """At start: may this engine's prompt rows wait (None), or why not (said once where it was asked for)."""
        self.why_not = why_not
        if why_not and self.defer:
            log.warning("spec-controller: prompts' draft-KV writes not held (%s): written at once", why_not)

    def holding(self) -> bool:
        return bool(self.queue)

    def pending_for(self, writer: Any) -> bool:
        return bool(self.queue) and self.writer is writer

    def stage(self) -> bool:
        """The held rows into their writer, oldest first, now (none held: nothing). Raises what a write raises; every
        held prompt is dropped either way (a failed write is not retried over newer rows)."""
        writer, queue = self.writer, self.queue
        self.writer, self.queue, self.queued_rows = None, [], 0
        if not queue:
            return False
        t0, in_writer = time.perf_counter_ns(), writer_ns(writer)
        try:
            for rows in queue:
                draftkv.stage_prefill(writer, rows)
        finally:
            self.ns += time.perf_counter_ns() - t0
            self.writer_ns += writer_ns(writer) - in_writer
        return True
