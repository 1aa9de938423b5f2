"""The SGLang internals the fast off path (fastoff.py) relies on: one table per range of versions.

Each table names what build() and run() call, construct or read, and the facts of SGLang's own
code that make the fast path's result what the scheduler expects (quoted, as `ast.unparse` writes
them). tests/test_fastoff_contract.py checks every entry against each released wheel; build()
checks the live engine against the same table and, if a name is missing or changed, does not
build the fast path (the reason is logged once and shown by `specctl status`). Grammar batches
(offgrammar.py) rest on the same seams in every release 0.5.17 ... 0.5.23 (sglang_names.GRAMMAR_FACTS).

No table for 0.5.14 ... 0.5.16: before 0.5.16 TpModelWorker.forward_batch_generation takes no
capture_hidden_mode; 0.5.16 takes it but sizes its decode graphs' hidden-state capture its own way (no
get_server_return_hidden_states_mode; graphs re-captured at replay). Those keep SGLang's steps-0.

What differs between the versions (read from the wheels):
- 0.5.18: the scheduler's write-after-read barrier hand-off was renamed (`war_fastpath_runner` ->
  `last_shared_read_runner`, `war_fastpath_read_done_event` -> `shared_read_done_event`), and
  `get_server_return_hidden_states_mode` lost its `server_args` parameter. From 0.5.18 every graph
  replay of the target's verify also publishes an event on the target runner, which the scheduler
  never reads nor clears (it reads the draft runner's): run() clears it before its own forward.
- 0.5.21: SGLang enters the draft's TP context with `owns_attention=`; 0.5.22: through the
  module-level `draft_tp_context(owns_attention)`; 0.5.23: `draft_tp_context(parallel_layout)`.
- 0.5.22: draft, verify and draft extend share one `kv_loc_plan` (KV write window); a forward given none
  plans its own, as without speculation: so do the fast path's plain decode and steps-0's draft extend.
- 0.5.18: the steps-0 verify's logprobs, `compute_spec_v2_logprobs(..., accept_index, num_steps)`, became
  `compute_spec_logprobs(..., *, accept_index=None, chain_stride=None)` (the same computation).
- 0.5.22: watermarking; ModelRunner.sample hands the sampler the pre-watermark logits for logprobs, which
  the fast path's logprobs (offlogprob.py) do not reproduce: such batches keep steps-0.
- 0.5.23: decode-graph metadata preparation moved into `_init_replay_attn_metadata`; its new branches
  apply to TARGET_VERIFY or draft runners only (the fast path's DECODE runner keeps the backend's).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..contract import REASON_0_5_16, REASON_NO_CAPTURE_MODE
from . import offgrammar
from .sglang_names import (DECODE_RUNNER, EAGLE_V2, GRAMMAR_FACTS, HIDDEN_MODE, LEAN_OFF_FACTS, LEAN_RESOLVE_FACTS,
                           LOGPROB_FACTS, RESULTS, RUNNER, SAMPLING_INFO, SPEC_LOGPROBS, SPEC_V2_LOGPROBS, TP_WORKER, VERIFY,
                           WAR_BARRIER, WORKER_FORWARD, V17_LOGPROB_FACTS, V18_LOGPROB_FACTS, WATERMARK_FACTS)

FIRST_FAST = (0, 5, 17)


class MissingInternal(Exception):
    """An SGLang name the table lists is absent or has other parameters in the running engine."""


@dataclass(frozen=True)
class DraftContext:
    """How EAGLEWorkerV2.forward_batch_generation enters the draft's TP placement around the draft
    extend: a method of the draft worker, or a function of eagle_worker_v2's namespace, called with
    draft-worker attributes (dotted paths)."""
    name: str
    method: bool
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...] = ()

    def sglang_source(self) -> str:
        """The expression as SGLang's forward_batch_generation writes it (ast.unparse)."""
        parts = [f"self.draft_worker.{a}" for a in self.args]
        parts += [f"{k}=self.draft_worker.{v}" for k, v in self.kwargs]
        callee = f"self.draft_worker.{self.name}" if self.method else self.name
        return f"{callee}({', '.join(parts)})"

    def attribute_paths(self) -> tuple[str, ...]:
        """The draft-worker attributes it reads (and its own name, for a method)."""
        return ((self.name,) if self.method else ()) + self.args + tuple(v for _, v in self.kwargs)

    def enter(self, draft: Any) -> Any:
        """The context manager, for this draft worker."""
        fn = getattr(draft, self.name) if self.method else getattr(importlib.import_module(EAGLE_V2), self.name)
        return fn(*(_attr(draft, a) for a in self.args), **{k: _attr(draft, v) for k, v in self.kwargs})


@dataclass(frozen=True)
class FastOffInternals:
    versions: tuple[str, str]                       # first, last release (inclusive)
    read_done_event: str                            # ModelRunner attribute a graph replay publishes
    last_reader: str                                # worker property: the runner the WAR barrier reads
    hidden_mode_params: tuple[str, ...]             # get_server_return_hidden_states_mode, exactly
    draft_context: DraftContext
    callables: dict[str, tuple[str, ...]]           # dotted -> the parameters, in this order
    attributes: dict[str, tuple[str, ...]]          # class -> attributes set (self.x = ...) or properties
    module_names: dict[str, tuple[str, ...]]        # module -> names it defines or imports
    facts: tuple[tuple[str, str, str], ...] = field(default=())   # (function, quoted source, why)
    spec_logprobs: str = ""                         # the steps-0 verify's logprob function (offlogprob.py)
    grammar: bool = False                           # SGLang's delayed grammar sample + barrier (offgrammar.py)

    def covers(self, version: tuple[int, int, int]) -> bool:
        first, last = (_parse(v) for v in self.versions)
        return first <= version <= last


def _parse(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in text.split(".")[:3])
    return major, minor, patch


def _attr(obj: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        obj = getattr(obj, name)
    return obj


_CALLABLES = {
    "sglang.srt.distributed.parallel_state.get_tp_group": (),
    f"{DECODE_RUNNER}.__init__": ("self", "model_runner", "attn_backend", "speculative_num_steps",
                                  "speculative_num_draft_tokens"),
    f"{RUNNER}._get_attention_backend": ("self", "init_new_workspace"),
    "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation":
        ("self", "batch", "forward_batch", "pp_proxy_tensors", "is_verify", "skip_attn_backend_init",
         "capture_hidden_mode"),
    f"{EAGLE_V2}.EAGLEWorkerV2._stub_skipped_draft_extend": ("self", "batch", "batch_output"),
    "sglang.srt.speculative.eagle_utils.get_draft_recurrent_hidden_state_spec": ("model_runner",),
    f"{EAGLE_V2}.EagleDraftWorker._draft_extend_for_decode": ("self", "batch", "batch_result"),
    WORKER_FORWARD: ("self", "batch", "on_publish", "grammar_barrier"),    # the hooked call's (offpath.py)
    "sglang.srt.layers.sampler.Sampler.forward": ("self", "logits_output", "sampling_info", "return_logprob",
                                                  "top_logprobs_nums", "token_ids_logprobs", "positions"),
}
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch.ScheduleBatch"
# what run() reads and swaps on a decode batch, and what decides that an off batch needs verify's extras
_BATCH_FIELDS = ("seq_lens", "seq_lens_cpu", "seq_lens_sum", "spec_info", "forward_mode", "input_ids",
                 "out_cache_loc", "req_pool_indices", "is_extend_in_batch", "return_logprob", "has_grammar",
                 "return_hidden_states", "sampling_info")
# what build() swaps on the target's model runner (and restores), and what run() reads
_RUNNER_ATTRIBUTES = ("init_new_workspace", "spec_algorithm", "attn_backend", "decode_cuda_graph_runner",
                      "req_to_token_pool", "sampler")
_MODULE_NAMES = {
    EAGLE_V2: ("GenerationBatchResult", "EagleDraftInput", "get_draft_recurrent_hidden_state_spec",
               "speculative_moe_backend_context", "speculative_moe_a2a_backend_context"),
    "sglang.srt.model_executor.runner.base_runner": ("get_server_return_hidden_states_mode",),
    "sglang.srt.model_executor.forward_batch_info": ("CaptureHiddenMode", "ForwardMode"),
    "sglang.srt.speculative.spec_info": ("SpeculativeAlgorithm",),
}
# Facts every fast version keeps (the {event}/{reader}/{context} fields come from the table)
_COMMON_FACTS = (
    (WAR_BARRIER, "runner = self.model_worker.{reader}",
     "the barrier waits on the event of the worker's last shared-buffer reader"),
    (WAR_BARRIER, "ev = runner.{event}", "... under this attribute name"),
    (f"{DECODE_RUNNER}.__init__", "if model_runner.spec_algorithm.is_speculative():",
     "the runner captures TARGET_VERIFY only if the model runner speculates: told NONE, it captures DECODE"),
    (f"{RUNNER}.decode_num_tokens_per_req", "if self.spec_algorithm.is_speculative():",
     "... one token per request"),
    (WORKER_FORWARD, "self._stub_skipped_draft_extend(batch, batch_output)",
     "steps-0 with the draft skipped is SGLang's own path; the fast path's result has its shape"),
    (WORKER_FORWARD, "{context}", "synced mode enters the draft's TP context as SGLang does"),
    (WORKER_FORWARD, "self.draft_worker._draft_extend_for_decode(batch, batch_output",
     "synced mode runs SGLang's own draft extend of the steps-0 state"),
    (VERIFY, "next_draft_input = EagleDraftInput(bonus_tokens=bonus_tokens)",
     "a verify hands on only the bonus tokens, as the fast path does"),
) + LOGPROB_FACTS + GRAMMAR_FACTS + LEAN_OFF_FACTS + LEAN_RESOLVE_FACTS
FAST_OFF_INTERNALS = FastOffInternals(
    versions=("0.5.17", "0.5.17"),
    read_done_event="war_fastpath_read_done_event",
    last_reader="war_fastpath_runner",
    hidden_mode_params=("server_args",),
    draft_context=DraftContext("draft_tp_context", True, ("draft_runner.tp_group",)),
    callables={**_CALLABLES, SPEC_V2_LOGPROBS: ("batch", "logits_output", "predict", "accept_index",
                                                "speculative_num_steps")},
    spec_logprobs=SPEC_V2_LOGPROBS, grammar=True,
    attributes={RUNNER: _RUNNER_ATTRIBUTES + ("war_fastpath_read_done_event",),
                TP_WORKER: offgrammar.ATTRIBUTES,
                "sglang.srt.speculative.base_spec_worker.BaseSpecWorker": ("target_worker", "draft_worker"),
                SCHEDULE_BATCH: _BATCH_FIELDS,
                f"{EAGLE_V2}.EAGLEWorkerV2": ("war_fastpath_runner",),
                f"{EAGLE_V2}.EagleDraftWorker": ("draft_runner", "topk", "draft_tp_context"),
                SAMPLING_INFO: ("is_all_greedy",)},
    module_names=_MODULE_NAMES,
    facts=_COMMON_FACTS + V17_LOGPROB_FACTS + (
        (f"{DECODE_RUNNER}.execute", "self.model_runner.war_fastpath_read_done_event = read_done",
         "a decode graph replay publishes its read-done event on its model runner"),),
)


def _renamed_barrier(base: FastOffInternals) -> FastOffInternals:
    """0.5.18: the barrier hand-off's new names; the hidden-state mode reads the runtime context; the
    steps-0 logprobs' new function."""
    callables = {k: v for k, v in base.callables.items() if k != SPEC_V2_LOGPROBS}
    return dataclasses.replace(
        base, read_done_event="shared_read_done_event", last_reader="last_shared_read_runner",
        hidden_mode_params=(), spec_logprobs=SPEC_LOGPROBS,
        callables={**callables, SPEC_LOGPROBS: ("batch", "logits_output", "predict", "accept_index")},
        attributes={**base.attributes, RUNNER: _RUNNER_ATTRIBUTES + ("shared_read_done_event",),
                    f"{EAGLE_V2}.EAGLEWorkerV2": ("last_shared_read_runner",)},
        facts=_COMMON_FACTS + V18_LOGPROB_FACTS + (
            (f"{DECODE_RUNNER}._publish_read_done", "self.model_runner.shared_read_done_event = read_done",
             "a decode graph replay publishes its read-done event on its model runner"),
            ("sglang.srt.layers.attention.base_attn_backend.AttentionBackend.shared_read_ends",
             "if fm.is_decode() or fm.is_target_verify():",
             "a target verify replay publishes one on the target runner too: run() clears it first"),))


def _with_draft(base: FastOffInternals, context: DraftContext, attributes: tuple[str, ...],
                versions: tuple[str, str], extra: dict[str, tuple[str, ...]] | None = None,
                facts: tuple = (), sampling_info: tuple[str, ...] = ()) -> FastOffInternals:
    draft_cls = f"{EAGLE_V2}.EagleDraftWorker"
    names = dict(base.module_names)
    if not context.method and context.name not in names[EAGLE_V2]:
        names[EAGLE_V2] = names[EAGLE_V2] + (context.name,)
    return dataclasses.replace(base, versions=versions, draft_context=context,
                               attributes={**base.attributes, draft_cls: ("draft_runner", "topk") + attributes,
                                           SAMPLING_INFO: base.attributes[SAMPLING_INFO] + sampling_info},
                               callables={**base.callables, **(extra or {})}, module_names=names,
                               facts=base.facts + facts)


_V18 = dataclasses.replace(_renamed_barrier(FAST_OFF_INTERNALS), versions=("0.5.18", "0.5.20"))
_V21 = _with_draft(_V18, DraftContext("draft_tp_context", True, ("draft_runner.tp_group",),
                                      (("owns_attention", "draft_owns_attention"),)),
                   ("draft_tp_context", "draft_owns_attention"), ("0.5.21", "0.5.21"))
_KV_PLAN_FACTS = (
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new", "kv_loc_plan = translator.own_plan(ret)",
     "a forward given no kv_loc_plan plans its own write window, as in an engine without speculation"),
    (f"{EAGLE_V2}.EAGLEWorkerV2._build_trivial_verify_input", "!kv_loc_plan",
     "steps-0's verify input carries no plan: its draft extend gets None, like synced mode's"),
)
_V22 = _with_draft(_V21, DraftContext("draft_tp_context", False, ("draft_owns_attention",)),
                   ("draft_owns_attention",), ("0.5.22", "0.5.22"),
                   {"sglang.srt.speculative.spec_utils.draft_tp_context": ("owns_attention",)},
                   _KV_PLAN_FACTS + WATERMARK_FACTS, ("has_watermark_candidates",))
_GRAPH_METADATA_FACTS = (
    (f"{DECODE_RUNNER}._init_replay_attn_metadata_from_view", "attn_backend.init_forward_metadata_out_graph(fb_view)",
     "a DECODE replay's metadata is still prepared by the attention backend, out of graph"),
    (f"{DECODE_RUNNER}._wants_early_verify_metadata", "self.capture_forward_mode == ForwardMode.TARGET_VERIFY",
     "early verify metadata (new in 0.5.23) never applies to a DECODE runner"),
    (f"{DECODE_RUNNER}._resolve_skips_prefilled_inputs", "self.capture_forward_mode == ForwardMode.TARGET_VERIFY",
     "... nor do prefilled inputs"),
    (f"{DECODE_RUNNER}._glues_draft_metadata", "if not self.model_runner.is_draft_worker:",
     "... nor the draft metadata glue graph"),
)
_V23 = _with_draft(_V22, DraftContext("draft_tp_context", False, ("parallel_layout",)),
                   ("parallel_layout",), ("0.5.23", "0.5.23"),
                   {"sglang.srt.speculative.spec_utils.draft_tp_context": ("layout",)}, _GRAPH_METADATA_FACTS)

TABLES: tuple[FastOffInternals, ...] = (FAST_OFF_INTERNALS, _V18, _V21, _V22, _V23)


def for_version(version: tuple[int, int, int] | None) -> FastOffInternals | None:
    """The table of this release, or None where no fast path is written for it."""
    return next((t for t in TABLES if version is not None and t.covers(version)), None)


def no_table_reason(version: tuple[int, int, int] | None) -> int:
    """contract.OFF_REASONS index for a release without a table (read from the 0.5.14 ... 0.5.16 wheels:
    0.5.16 has capture_hidden_mode, but sizes the decode graphs' hidden-state capture its own way)."""
    return REASON_0_5_16 if version == (0, 5, 16) else REASON_NO_CAPTURE_MODE


def quoted_facts(table: FastOffInternals) -> list[tuple[str, str, str]]:
    """The table's facts with its own names filled in ('!' first: the source must not contain it)."""
    fill = dict(reader=table.last_reader, event=table.read_done_event, context=table.draft_context.sglang_source())
    return [(fn, quote.format(**fill), why) for fn, quote, why in table.facts]


def check_live(table: FastOffInternals, worker: Any) -> None:
    """MissingInternal unless the running engine has every name of the table (build time, once)."""
    for dotted, params in {**table.callables, HIDDEN_MODE: table.hidden_mode_params}.items():
        names = list(inspect.signature(_resolve(dotted)).parameters)
        if (names if dotted == HIDDEN_MODE else [n for n in names if n in params]) != list(params):
            raise MissingInternal(f"{dotted}{tuple(names)}, expected {params}")
    for module, names in table.module_names.items():
        for name in names:
            _resolve(f"{module}.{name}")
    batch_cls = _resolve(SCHEDULE_BATCH)
    for name in table.attributes[SCHEDULE_BATCH]:      # dataclass fields, or properties
        if name not in getattr(batch_cls, "__dataclass_fields__", {}) and not hasattr(batch_cls, name):
            raise MissingInternal(f"ScheduleBatch.{name}")
    runner = worker.target_worker.model_runner
    for owner, names in ((runner, table.attributes[RUNNER]), (type(worker), (table.last_reader,)),
                         (worker.draft_worker, table.draft_context.attribute_paths())):
        for name in names:
            try:
                _attr(owner, name)
            except AttributeError:
                raise MissingInternal(f"{type(owner).__name__}.{name}") from None


def _resolve(dotted: str) -> Any:
    """The object a dotted path names: its longest importable prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            return _attr(obj, ".".join(parts[i:]))
        except AttributeError:
            break
    raise MissingInternal(dotted)


def hidden_mode_full(table: FastOffInternals, full: Any) -> Callable[..., Any]:
    """A stand-in for get_server_return_hidden_states_mode with the release's signature, answering FULL."""
    if table.hidden_mode_params:
        return lambda server_args: full
    return lambda: full
