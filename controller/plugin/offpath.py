"""Which path an off decode batch takes: the fast off path (the target's plain decode through
its own CUDA graphs, controller.plugin.fastoff) where it was built on every TP rank, else
SGLang's steps-0 state. Batches that need verify's extras always take steps-0."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..contract import (REASON_CAPTURE_FAILED, REASON_CONFIG, REASON_INACTIVE, REASON_KV_UNSUPPORTED,
                        REASON_MISSING_INTERNAL, REASON_NONE, REASON_OTHER_RANK, REASON_REJECTION_SAMPLING,
                        REASON_KV_WRITE_FAILED, REASON_RUN_FAILED, parse_version, prefill_skips_draft)
from . import (draftkv, draftkv_coalesce, draftkv_graph, fastoff, internals, offgrammar, offresolve, offstatus, offstubs,
               promptkv)
from .failures import Failures
from .router import Router

log = logging.getLogger("spec_controller.plugin")
LOG_EVERY = 20000          # a progress line every this many fast off batches


def rejection_sampling(worker: Any) -> bool:
    """Does this engine verify by rejection sampling (server_args.speculative_use_rejection_sampling)?"""
    return bool(getattr(getattr(worker, "server_args", None), "speculative_use_rejection_sampling", False))


class OffPath:
    """enabled: the fast path at all (else SGLang's steps-0 state, which keeps the draft in step).
    sync_draft: off batches also run the draft's 1-token extend (its KV is ready when speculation
    resumes; costs the draft's share of a step). lean_prefill: while no batch size speculates (with
    draft_kv: while the batch a prefill joins does not speculate), prefills skip the draft's forward over
    the prompt (cheaper; without draft_kv that request's draft is stale if it later speculates).
    draft_kv: off batches (and lean prefills) write the draft's KV with the plugin's own writer
    (controller.plugin.draftkv) instead of running the draft: its KV is complete when speculation
    resumes, for a few kernels per batch; sync_draft wins where both are set. fast_grammar: grammar batches
    take the fast path where SGLang's delayed grammar sample allows it (offgrammar.py), else steps-0.
    lean_off: off batches' results from per-engine stubs (offstubs.py; run-time switch). lean_resolve: the future
    map gathers only the bonus tokens of a batch this path takes (offresolve.py; run-time switch)."""

    def __init__(self, router: Router, failures: Failures, enabled: bool = True, sync_draft: bool = False,
                 lean_prefill: bool = False, capture_hidden: bool = False, draft_kv: bool = False,
                 draft_kv_graph: bool = False, fast_grammar: bool = False, draft_kv_coalesce: int | None = None,
                 lean_off: bool = False, draft_kv_side: bool = False, defer_prompt_kv: bool = False,
                 lean_resolve: bool = False):
        self.router, self.failures, self.enabled, self.fast_grammar = router, failures, enabled, fast_grammar
        self.sync_draft, self.lean_prefill, self.draft_kv, self.lean_off = sync_draft, lean_prefill, draft_kv, lean_off
        self.capture_hidden = capture_hidden or sync_draft or draft_kv   # graphs that can feed the draft
        self.kv_writer: draftkv.DraftKVWriter | None = None   # built with the fast path, where supported
        self.kv_graph: draftkv_graph.GraphedKVWriter | None = None   # its writes as graphs (the default, TP 1)
        self.want_kv_graph = draft_kv_graph                  # capture them at start (TP 1)
        self.use_kv_graph = draft_kv_graph                   # run-time switch, once captured
        self.kv_side = draft_kv_side                         # ... their replays on a side stream (run-time switch)
        self.want_coalesce = draft_kv_coalesce   # writes per write; None: graphs DEFAULT_COALESCE, eager 1 (12-02)
        self.kv_coalesced: draftkv_coalesce.CoalescedKVWriter | None = None   # eager, coalesced: only where asked
        self.use_coalesce = True                             # run-time switch, once built
        self.kv_writes = 0
        self.prompts = promptkv.PromptWrites(defer_prompt_kv)   # the prompt writes (held: after the next forward)
        self.resolve = offresolve.LeanResolve(self.takes_resolved, lean_resolve)   # the future map's gather
        self.plain: Any = None                     # plainoff.PlainOff where the engine runs off batches as plain ones
        self.tp_size = 1
        self.fast: fastoff.FastOff | None = None   # built after SGLang's graph capture, if supported
        self.reason = REASON_CONFIG if not enabled else REASON_NONE   # contract.OFF_REASONS: why not fast
        self.fallbacks = 0                         # off batches that took SGLang's steps-0 path
        self.fallback_reasons: dict[str, int] = {}   # batch_unsupported_reason -> batches (the share in production)
        self.lean_prefills = 0
        self.rejection = False                     # the engine verifies by rejection sampling: no skipped draft

    def can_sync(self) -> bool:
        return self.fast.with_hidden if self.fast is not None else self.capture_hidden

    def can_write_kv(self) -> bool:
        return self.kv_writer is not None if self.fast is not None else self.capture_hidden

    def active_writer(self) -> Any:
        """The KV writer, when this batch should use it."""
        if self.kv_writer is None or not self.draft_kv or self.sync_draft:
            return None
        if self.use_kv_graph and self.kv_graph is not None:
            return self.kv_graph
        return self.kv_coalesced if self.use_coalesce and self.kv_coalesced is not None else self.kv_writer

    def set_kv_side(self, on: bool) -> None:
        """The graphs' replays beside the next forward (on, where no outside reader of the draft's pool forbids it)
        or in line; a pending one is waited for by the next write or whatever next touches the draft's pool."""
        self.kv_side = on
        if self.kv_graph is not None:
            self.kv_graph.use_side(on)

    def set_kv_coalesce(self, on: bool) -> None:
        """The writes coalesced (on, where the engine was started so) or each its own, the graphs' and the eager ones'."""
        self.use_coalesce = on
        if self.kv_graph is not None:
            self.kv_graph.use_coalesce(on)

    def coalesces(self) -> bool:
        """Was this engine started with its draft-KV writes coalesced (graphed or eager)?"""
        return self.kv_coalesced is not None or getattr(self.kv_graph, "coalesce_batches", 1) > 1

    def coalesce_why(self) -> str | None:
        """Why this engine's draft-KV writes stay one a write whatever it is started with (outside readers of the
        draft's pool, as the graphs found them; TP > 1), or None."""
        return (getattr(self.kv_graph, "side_why", None)
                or draftkv_coalesce.unsupported_reason(None, self.tp_size))

    def _flush_kv(self, draft_worker: Any, keep: Any = None) -> None:
        """A held prompt's rows (promptkv), the writes buffered (coalesced) or running beside (side stream), except
        `keep`'s (the off batch's writer), before anything else touches the draft's pool: every batch but an off decode
        comes here, a prefill in its draft pass (a lean one adds its rows instead: prefills do not end a window)."""
        if self.prompts.holding() and not self.prompts.pending_for(keep):
            self._stage_held()
        if self.kv_graph is not None and keep is not self.kv_graph:
            self.kv_graph.wait()
        if self.kv_coalesced is None or keep is self.kv_coalesced:
            return
        try:
            self.kv_coalesced.flush(draft_worker)
        except Exception as e:        # those positions' draft KV stays unwritten; later batches write per batch
            self.failures.record("draft KV flush", e)
            self.kv_coalesced = None
            if self.tp_size > 1:
                raise

    def _stage_held(self) -> None:      # a held prompt's rows into their writer; a failure leaves them unwritten
        try:
            self.prompts.stage()
        except Exception as e:
            self._drop_writer(e)

    def _drop_writer(self, e: Exception) -> None:
        """A prompt's draft-KV write failed: no more draft-KV writes in this process (a failed write is not retried
        over newer rows), and the status says so (its off path line's reason)."""
        self.failures.record("draft KV prefill", e)
        self.kv_writer = None
        if self.reason == REASON_NONE:
            self.reason = REASON_KV_WRITE_FAILED

    def after_init_cuda_graphs(self, result: Any, worker: Any, *args, **kwargs) -> None:
        """AFTER EAGLEWorkerV2.init_cuda_graphs, every rank, once: capture the target's decode graphs."""
        # With rejection sampling the verify weighs each draft token by the draft's probability: a draft
        # skipped while off (fast path, lean prefill) leaves stale probabilities and sampled outputs drift.
        self.rejection = rejection_sampling(worker)
        self.tp_size = int(getattr(getattr(worker, "server_args", None), "tp_size", 1) or 1)
        self.prompts.decide(draftkv_coalesce.unsupported_reason(getattr(worker, "server_args", None), self.tp_size))
        active = self.router.check(worker)     # whatever the off path: else first at a decode batch (keys taken till then)
        if not self.enabled:
            return None
        if not active:
            self.reason = REASON_INACTIVE
            return None
        if self.rejection:
            log.warning("spec-controller: rejection sampling is on: off batches use SGLang's steps-0 state")
            self.reason = REASON_REJECTION_SAMPLING
            return None
        version = self.router.version()
        names = internals.for_version(parse_version(version))
        if names is None:
            self.reason = internals.no_table_reason(parse_version(version))
            log.warning("spec-controller: no fast off path for sglang %s; off batches use SGLang's steps-0 "
                        "state", version)
            return None
        fast = self._build(worker, names)
        try:
            agreed = fastoff.all_ranks_agree(fast is not None)
        except Exception as e:
            self.failures.record("fast off agreement", e)
            agreed = False
        if fast is not None and not agreed:
            log.warning("spec-controller: another TP rank could not build the fast off path; all ranks use steps-0")
            self.reason = REASON_OTHER_RANK
        self.fast = fast if agreed else None
        if self.fast is not None and self.fast.with_hidden:
            self._build_writer(worker)
        return None

    def _build_writer(self, worker: Any) -> None:
        """The draft KV writer (same on every rank: the draft and its pool are alike on all of them)."""
        try:
            self.kv_writer = draftkv.build(worker.draft_worker.draft_runner)
            log.info("spec-controller: draft KV writer's k, v projection: %s", self.kv_writer.projection)
        except ValueError as e:
            log.warning("spec-controller: the plugin cannot write this draft's KV (%s)%s", e,
                        "; off batches run SGLang's draft extend instead" if self.draft_kv else "")
            if self.draft_kv:
                self.sync_draft, self.reason = True, REASON_KV_UNSUPPORTED
        except Exception as e:
            self.failures.record("draft KV writer", e)
        if self.kv_writer is not None and self.want_kv_graph:       # coalesced there too where asked for
            self._capture_kv_graphs(worker)
        if self.kv_writer is not None and (self.want_coalesce or 1) > 1 and self.kv_graph is None:   # asked, no graphs
            self._build_coalesced(worker)

    def _build_coalesced(self, worker: Any) -> None:
        names = self.fast.names
        try:
            self.kv_coalesced = draftkv_coalesce.for_engine(self.kv_writer, self.want_coalesce, worker, self.tp_size,
                                                            lambda draft_worker: names.draft_context.enter(draft_worker))
        except Exception as e:
            self.failures.record("draft KV coalescing", e)

    def _capture_kv_graphs(self, worker: Any) -> None:
        try:
            self.kv_graph = draftkv_graph.for_engine(self.kv_writer, self.fast.graph_runner, self.tp_size, worker,
                                                     lambda: self.fast.names.draft_context.enter(worker.draft_worker),
                                                     self.kv_side, self.want_coalesce)   # (None: the default)
        except Exception as e:
            self.failures.record("draft KV graphs", e)

    def _build(self, worker: Any, names: internals.FastOffInternals) -> fastoff.FastOff | None:
        """The fast path on this rank, or None with the reason set (and logged once)."""
        try:
            fast = fastoff.build(worker, names, with_hidden=self.capture_hidden)
            fast.grammar = offgrammar.available(names, getattr(worker, "target_worker", None), self.fast_grammar)
            return fast
        except internals.MissingInternal as e:
            log.warning("spec-controller: fast off path not built, sglang %s lacks %s (its table: %s .. %s); "
                        "off batches use SGLang's steps-0 state", self.router.version(), e, *names.versions)
            self.reason = REASON_MISSING_INTERNAL
        except Exception as e:
            self.failures.record("fast off capture", e)
            self.reason = REASON_CAPTURE_FAILED
        return None

    def _off_decode(self, batch: Any) -> bool:
        return not (self.fast is None or not self.enabled or batch.forward_mode.is_extend() or batch.is_extend_in_batch
                    or batch.forward_mode.is_idle())

    def _ours(self, worker: Any, batch: Any) -> bool:
        """An off decode batch the fast path may take."""
        return self._off_decode(batch) and self.router.check(worker) and not self.router.speculates(batch.seq_lens.shape[0])

    def takes_resolved(self, batch: Any) -> bool:
        """At the future map's resolve, before the forward (no worker there: the router decided at the first decode
        batch; grammar batches as under overlap; not with the draft synced, whose extend rebinds more fields): the fast
        path will take this batch."""
        r, grammar = self.router, self.fast_grammar and getattr(self.fast, "grammar", False)
        return (self._off_decode(batch) and r.checked and r.inert_reason is None and not self.sync_draft
                and not r.speculates(batch.seq_lens.shape[0]) and fastoff.batch_unsupported_reason(batch, grammar) is None)

    def _sglangs(self, original: Callable, worker: Any, batch: Any, args: tuple, kwargs: dict, flush: bool = True) -> Any:
        """SGLang's own path for this batch: the coalesced draft-KV rows written before its draft reads the pool, and
        what offresolve left out for a batch it took for the fast path's (the extras' gather, the full isolation)."""
        if flush:
            self._flush_kv(getattr(worker, "draft_worker", None))
        return self.resolve.guard(batch, lambda: original(worker, batch, *args, **kwargs))

    def forward_batch_generation(self, original: Callable, worker: Any, batch: Any, *args, **kwargs) -> Any:
        """AROUND EAGLEWorkerV2.forward_batch_generation."""
        if self.plain is not None and batch.spec_algorithm.is_none():   # made plain by plainoff (SGLang makes none)
            return self.plain.forward(worker, batch)
        draft = getattr(worker, "draft_worker", None)      # (the eager coalesced writes flush in its context)
        if not self._ours(worker, batch):
            # a prefill flushes in its draft pass (draft_extend_for_prefill); a decode batch with a prefill elsewhere
            # (is_extend_in_batch: 0.5.23's DP coordination drafts outside that hook) here
            return self._sglangs(original, worker, batch, args, kwargs, flush=not batch.forward_mode.is_extend())
        barrier = kwargs.get("grammar_barrier", args[1] if len(args) > 1 else None)   # the scheduler's, or None
        grammar = (self.fast_grammar and getattr(batch, "has_grammar", False)
                   and offgrammar.served(self.fast, worker, barrier))
        why = fastoff.batch_unsupported_reason(batch, grammar)
        if why is not None:
            self.fallbacks += 1
            self.fallback_reasons[why] = self.fallback_reasons.get(why, 0) + 1
            return self._sglangs(original, worker, batch, args, kwargs)
        fast = self.fast
        worker.activate_step_by_batch(batch.seq_lens.shape[0])   # steps-0 state: allocation and stride as SGLang's off
        on_publish = kwargs.get("on_publish", args[0] if args else None)
        t0 = time.perf_counter_ns()
        try:
            writer = self.active_writer()
            self._flush_kv(draft, keep=writer)   # another writer's rows first
            result = fastoff.run(worker, fast, batch, on_publish, self.sync_draft and fast.with_hidden, writer,
                                 grammar_barrier=barrier, lean=self.lean_off,
                                 before_write=self._stage_held if self.prompts.holding() else None)
        except Exception as e:      # restored batch fields: SGLang's own path can still take this batch
            self.failures.record("fast off", e)
            self.fast, self.reason = None, REASON_RUN_FAILED
            if self.tp_size > 1:    # this rank alone on steps-0 would issue other collectives: fail loudly
                raise
            return self._sglangs(original, worker, batch, args, kwargs)
        self.kv_writes += writer is not None
        fast.cpu_ns += time.perf_counter_ns() - t0        # CPU time to launch it (the GPU runs on, overlapped)
        if fast.batches % LOG_EVERY == 1:
            log.info("spec-controller fast off: %d batches (%d on CUDA graphs), %d fell back to steps-0",
                     fast.batches, fast.graph_batches, self.fallbacks)
        return result

    def draft_extend_for_prefill(self, original: Callable, draft_worker: Any, batch: Any, target_hidden_states: Any,
                                 next_token_ids: Any, *args, **kwargs) -> Any:
        """AROUND EagleDraftWorker._draft_extend_for_prefill. lean_prefill: a prefill skips the draft's
        forward over the prompt while no batch size speculates (without the kv writer its draft KV stays
        unwritten) and, with the writer, whenever the batch it joins will not speculate
        (contract.prefill_skips_draft): a busy server at a small threshold pays no draft pass per prefill."""
        writer = self.active_writer()
        joining = len(getattr(batch, "extend_lens", None) or ())      # requests in this extend (draftkv.ATTRIBUTES)
        lean = self.lean_prefill and not self.rejection and self.router.active and prefill_skips_draft(
            self.router.threshold, self.router.last_batch_size, joining, writer is not None)
        mm_embeds = kwargs.get("mm_input_embeds", args[0] if args else None)
        if not lean or (writer is not None and mm_embeds is not None):   # (multimodal: the draft embeds it its way)
            self._flush_kv(draft_worker)        # the draft's own pass reads and writes its pool: the held rows first
            return original(draft_worker, batch, target_hidden_states, next_token_ids, *args, **kwargs)
        self.lean_prefills += 1
        if writer is not None:
            self._flush_kv(draft_worker, keep=writer)    # another writer's rows before this one's
            try:
                self.kv_writes += self.prompts.write(writer, batch, target_hidden_states, next_token_ids)
            except Exception as e:     # this prompt runs the draft's pass; later ones too above threshold 0
                self._drop_writer(e)
                if self.tp_size > 1:   # the other ranks' writers ran collectives this rank did not: fail loudly
                    raise
                self._flush_kv(draft_worker)    # rows held or replayed before the failure: in before SGLang's writes
                return original(draft_worker, batch, target_hidden_states, next_token_ids, *args, **kwargs)
        return fastoff.stub_draft_input(draft_worker, next_token_ids, offstubs.for_prefill(self, batch))

    def prefills_pay_draft(self) -> bool:
        return offstatus.prefills_pay_draft(self)

    def path_index(self) -> int:
        return offstatus.path_index(self)

    def counters(self) -> dict[str, int]:
        return offstatus.counters(self)
