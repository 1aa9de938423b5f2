"""Off decode batches as SGLang's own non-speculative decode batches (start-time switch SPEC_CONTROLLER_PLAIN_OFF=1;
SGLang 0.5.17-0.5.18; the design and its reading of SGLang: docs/off-as-plain-batch.md).

The fast off path (fastoff.py) runs an off batch's forward as a plain decode, but the scheduler still treats the
batch as speculative around it: spec-v2's preparation (allocation 8 slots ahead, a per-request Python loop), the
future map's relay (lengths resolved, extras gathered and stashed, the full field snapshot) and the speculative
result processing. Here a running batch that does not speculate is switched to SGLang's non-speculative mode
(`batch.spec_algorithm = NONE`) at its decode preparation, so all of that is SGLang's non-speculative code instead,
as in an engine started without speculation. What stays the plugin's: the forward through the fast path's decode
graphs (the worker is still EAGLEWorkerV2), its input-token gather (the future map's gather is per engine), the
draft-KV write (so the draft is ready when speculation resumes), and three seams where SGLang's speculative engine
assumes a speculative batch (the stash, the published lengths, the accept-length metrics).

Switches: a running batch enters the plain mode only straight from a prefill (its lengths and allocation exact); a
plain batch goes back to speculative mode at the first preparation where it speculates or cannot stay plain (a
grammar, logprob or hidden-state request joined). A batch already speculative stays so (its off batches take the fast
path as before): the resync of a speculative batch's lengths and its over-allocation is not built
(docs/off-as-plain-batch.md section 2). Runs in the scheduler process, on every decode batch."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..contract import parse_version
from ..envwords import PLAIN_OFF_ENV
from . import fastoff
from .support import FUTURE_MAP, RESULT_PROCESSOR, SCHEDULE_BATCH, switch_on

log = logging.getLogger("spec_controller.plugin")
ENV = PLAIN_OFF_ENV
VERSIONS = ((0, 5, 17), (0, 5, 18))     # where the seams' facts were read (sglang_names.PLAIN_OFF_FACTS)


def unsupported_reason(version: tuple[int, int, int] | None) -> str | None:
    if version is None or version[:3] not in VERSIONS:
        return (f"SGLang {'.'.join(map(str, version)) if version else 'unknown'}: plain off batches are written for "
                f"{', '.join('.'.join(map(str, v)) for v in VERSIONS)} (where the plain commit is in prepare and the "
                "stash writes every extra)")
    return None


def wanted(env: Any, version: str) -> bool:
    """Register the hooks? Only where asked for (ENV=1) and SGLang is one the seams were read in (else logged)."""
    if not switch_on(env, ENV, False):
        return False
    reason = unsupported_reason(parse_version(version))
    if reason is not None:
        log.warning("spec-controller: %s=1 ignored: %s", ENV, reason)
    return reason is None


def hooks(plain: "PlainOff") -> dict[str, tuple[Callable, str]]:
    """target -> (bound hook, HookType name): PLAIN_OFF_TARGETS."""
    return {f"{SCHEDULE_BATCH}.prepare_for_decode": (plain.prepare, "AROUND"),
            f"{SCHEDULE_BATCH}.new_tokens_required_next_decode": (plain.memory, "AROUND"),
            f"{FUTURE_MAP}.publish": (plain.publish, "AROUND"),
            f"{FUTURE_MAP}.stash": (plain.stash, "AROUND"),
            f"{RESULT_PROCESSOR}._normalize_decode_outputs": (plain.after_normalize, "AFTER")}


def batch_unsupported_reason(batch: Any) -> str | None:
    """Why this running batch cannot be a plain batch (the speculative mode and its fast path serve it)."""
    if getattr(batch, "has_grammar", False):
        return "grammar"      # a plain batch's target samples at once; a grammar mask would see a stale FSM
    if getattr(batch, "return_logprob", False):
        return "logprob"
    if getattr(batch, "return_hidden_states", False):
        return "hidden states"
    if not getattr(batch, "enable_overlap", False):
        return "overlap scheduler off"
    if getattr(batch.token_to_kv_pool_allocator, "page_size", 1) != 1:
        return "page size above 1"
    # SGLang's non-speculative preparation and result processing keep state of their own for these (mamba tracks,
    # hierarchical sparse attention, encoder lengths, multimodal embeddings) that a speculative engine keeps otherwise
    if getattr(getattr(batch, "req_to_token_pool", None), "mamba_pool", None) is not None:
        return "hybrid (mamba) model"
    if getattr(batch, "hisparse_coordinator", None) is not None:
        return "hierarchical sparse attention"
    if getattr(getattr(batch, "model_config", None), "is_encoder_decoder", False):
        return "encoder-decoder model"
    if any(m is not None for m in getattr(batch, "multimodal_inputs", None) or ()):
        return "multimodal request"
    return None


class PlainOff:
    """The hooks (registered only where the engine was started with ENV=1 on a supported SGLang) and the forward."""

    def __init__(self, off: Any, registered: bool = False,
                 sample: Callable[[Any, Any], None] = lambda result, batch: None) -> None:
        self.off = off                   # the OffPath: its fast path, writer, router
        self.sample = sample             # the telemetry's sample of a decode batch (TelemetrySender.sample)
        self.registered = self.enabled = registered   # enabled: run-time; a plain batch goes back when it is off
        self.spec_algorithm: Any = None  # the engine's algorithm, kept from the first batch made plain
        self.none: Any = None            # SpeculativeAlgorithm.NONE
        self.future_map: Any = None      # the engine's, seen at its first publish (a prefill's, before any plain batch)
        self.publish_lens: Any = None    # (rows, lengths) the plain batch in flight publishes (spec-v2's convention)
        self.batches = self.entered = self.left = 0

    # --- the decision (the same on every TP rank: the router's threshold, the batch's requests) -------------------
    def wants(self, batch: Any, size: int) -> bool:
        off, r = self.off, self.off.router
        return (self.enabled and off.enabled and off.fast is not None and r.active and not off.sync_draft
                and not r.speculates(size) and batch_unsupported_reason(batch) is None)

    def prepare(self, original: Callable, batch: Any, *args, **kwargs) -> Any:
        """AROUND ScheduleBatch.prepare_for_decode: the mode of this decode, then SGLang's own preparation for it."""
        size = len(batch.reqs)
        if batch.spec_algorithm.is_none():
            if self.none is None:          # never made one plain: an engine without speculation (all its batches)
                return original(batch, *args, **kwargs)
            if self.wants(batch, size):
                self.off.router.last_batch_size = size      # what a lean prefill reads (no activate_step for plain)
            else:
                self._to_spec(batch)
        elif batch.forward_mode.is_extend() and batch.seq_lens_cpu is not None and self.wants(batch, size):
            self._to_plain(batch)                           # straight from its prefill: lengths and allocation exact
            self.off.router.last_batch_size = size
        return original(batch, *args, **kwargs)

    def _to_plain(self, batch: Any) -> None:
        if self.none is None:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
            self.none, self.spec_algorithm = SpeculativeAlgorithm.NONE, batch.spec_algorithm
            log.info("spec-controller: off decode batches run as SGLang's non-speculative batches (%s)", ENV)
        batch.spec_algorithm, batch.spec_info = self.none, None
        self.entered += 1

    def _to_spec(self, batch: Any) -> None:
        """Back to speculative mode: the lengths the plain batches published are in spec-v2's convention (publish()),
        committed lengths are exact, and the draft input's extras are the future map's rows (each request's prefill
        or last speculative step: stale, finite, one step of poorer acceptance)."""
        batch.spec_algorithm = self.spec_algorithm
        batch.spec_info = fastoff._sg["DraftInput"](future_indices=batch.req_pool_indices)
        self.left += 1

    def memory(self, original: Callable, batch: Any, selected_indices: Any = None) -> int:
        """AROUND ScheduleBatch.new_tokens_required_next_decode: a plain batch whose next preparation will be
        speculative needs spec-v2's reserve, not one slot a request (SGLang raises where the pool runs short)."""
        if self.none is None or not batch.spec_algorithm.is_none():
            return original(batch, selected_indices)
        size = len(batch.reqs) if selected_indices is None else len(selected_indices)
        if self.wants(batch, size):
            return original(batch, selected_indices)
        requests = batch.reqs if selected_indices is None else [batch.reqs[i] for i in selected_indices]
        return batch._new_tokens_required_next_decode_spec_v2(requests, batch.token_to_kv_pool_allocator.page_size)

    # --- the future map: what SGLang's speculative engine assumes of every decode batch -------------------------
    def publish(self, original: Callable, future_map: Any, indices: Any, new_seq_lens: Any, *args, **kwargs) -> Any:
        """AROUND FutureMap.publish: a plain batch publishes `seq_lens + 1` (the non-speculative convention, its
        lengths already advanced); a speculative batch resolving them next expects the KV length before its step."""
        self.future_map = future_map
        if self.publish_lens is not None:
            rows, lens = self.publish_lens
            self.publish_lens = None
            if rows is indices:            # run_batch's publish right after the plain forward, of its requests
                new_seq_lens = lens
            else:                          # not that publish: SGLang's lengths, and said (the next resolve may be off)
                log.warning("spec-controller: a plain batch's publish was not the next one; its lengths were not "
                            "put in spec-v2's convention")
        return original(future_map, indices, new_seq_lens, *args, **kwargs)

    def stash(self, original: Callable, future_map: Any, indices: Any, payload: Any, *args, **kwargs) -> Any:
        """AROUND FutureMap.stash: a plain batch's payload has its tokens only (SGLang 0.5.17-0.5.21 would read its
        missing extras); the rows keep each request's last extras."""
        if (self.none is None or payload.topk_p is not None or payload.hidden_states is not None
                or not future_map._forward_buf_initialized):
            return original(future_map, indices, payload, *args, **kwargs)
        if indices.shape[0]:
            future_map.output_tokens_buf[indices] = payload.bonus_tokens.to(future_map.output_tokens_buf.dtype)
        return None

    def after_normalize(self, value: Any, processor: Any, *args, **kwargs) -> None:
        """AFTER SchedulerBatchResultProcessor._normalize_decode_outputs: a plain batch's accept-length metrics (as
        steps-0 records them: SGLang's speculative log line divides by them) and its telemetry sample."""
        batch = kwargs["batch"]
        if self.none is not None and batch.spec_algorithm.is_none():
            processor.metrics_reporter.update_spec_metrics(batch.batch_size(), 0)
            self.sample(kwargs["result"], batch)

    # --- the forward ---------------------------------------------------------------------------------------------
    def forward(self, worker: Any, batch: Any) -> Any:
        """A plain batch's forward (from OffPath's AROUND EAGLEWorkerV2.forward_batch_generation): the target's
        DECODE through the fast path's graphs, the draft's KV for the decoded position; returns the target's result,
        which SGLang's non-speculative run_batch and result processing take as they are."""
        try:
            return self._forward(worker, batch)
        except Exception as e:    # no fallback: the batch's state is already plain (SGLang's worker cannot take it)
            self.off.failures.record("plain off", e)
            raise

    def _forward(self, worker: Any, batch: Any) -> Any:
        off, fast = self.off, self.off.fast
        torch = fastoff._sg["torch"]
        t0 = time.perf_counter_ns()
        # the future map gathers input tokens only in an engine without speculation
        batch.input_ids = self.future_map.output_tokens_buf[batch.req_pool_indices]
        target = worker.target_worker
        runner = target.model_runner
        setattr(runner, fast.names.read_done_event, None)     # (fastoff.run: a verify's event left from 0.5.18)
        writer = off.active_writer()
        off._flush_kv(worker.draft_worker, keep=writer)
        out = fastoff.target_forward(target, fast, batch, writer is not None)
        if writer is not None:
            loc = batch.out_cache_loc
            fastoff.write_draft_kv(worker, fast, writer, out, (batch.seq_lens - 1).to(torch.int64),
                                   loc if loc.dtype == torch.int64 else loc.to(torch.int64),
                                   off._stage_held if off.prompts.holding() else None)
            off.kv_writes += 1
        fastoff._hand_over_read_done_event(worker, runner, fast.names)
        self.publish_lens = (batch.req_pool_indices, batch.seq_lens)   # run_batch publishes batch.req_pool_indices
        self.batches += 1
        fast.batches += 1
        fast.graph_batches += bool(out.can_run_cuda_graph)
        fast.cpu_ns += time.perf_counter_ns() - t0
        return out
