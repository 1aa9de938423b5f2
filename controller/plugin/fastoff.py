"""The plugin's fast off path: an off decode batch runs the target's plain decode.

SGLang's own "steps = 0" state still runs each off batch as a 1-token TARGET_VERIFY forward
(the extend-attention kernel with a custom mask) followed by the draft model's KV catch-up;
on the H200 that ran at 52-73 % of an engine started without speculation. Here an off batch
runs the target in DECODE mode, through decode CUDA graphs captured for it once at start-up,
and its result is laid out exactly as a steps-0 verify result (one token per request, accept
length 1, the new token as the next bonus token), so the scheduler cannot tell the difference.

The draft model does not run. By default (off path "kv") the plugin writes the draft's KV for the
decoded position itself (draftkv.py), so a request that lives through an off -> on switch drafts
from complete state; with off path "fast" it is skipped as with SGLang's
SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND and such a request drafts from partly stale state, which
costs acceptance, never correctness: the target verifies every drafted token.

Written against SGLang 0.5.17 (measured there on an H200) and carried to 0.5.18 ... 0.5.23 from the
wheels: the SGLang names it relies on are the release's table in internals.py, checked against the
running engine at build time and against every wheel by the contract tests.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import offgrammar, offlogprob, offstubs
from .internals import FastOffInternals, check_live, hidden_mode_full

log = logging.getLogger("spec_controller.plugin")


@dataclass
class FastOff:
    """The target's decode-mode attention backend and CUDA graphs, beside the speculative ones."""
    attn_backend: Any
    graph_runner: Any          # None: CUDA graphs are off, the decode runs eagerly
    with_hidden: bool = False  # the graphs also return the target's hidden states (needed to sync the draft)
    names: FastOffInternals | None = None    # the release's table (None only in tests that never run it)
    grammar: bool = False      # SGLang's delayed grammar sample found (offgrammar.py): grammar batches served
    batches: int = 0
    graph_batches: int = 0
    cpu_ns: int = 0            # CPU to launch an off batch, all of it (offpath.py); of which:
    target_ns: int = 0         #   the target's own forward (what an engine without speculation launches too)
    kv_ns: int = 0             #   the draft's KV writes (draftkv.py)
    lean_batches: int = 0      # off batches that took the lean step (offstubs.py)
    stubs: offstubs.OffStubs | None = None   # made at the first lean batch


# the ScheduleBatch fields run() sets (all but the first two put back by _plain_decode; offresolve's light isolation
# puts back all seven)
FAST_FIELDS = ("input_ids", "out_cache_loc", "seq_lens", "seq_lens_cpu", "seq_lens_sum", "spec_info", "forward_mode")

# counted apart (contract.STATS_FIELDS): logprob and grammar batches the fast path does not cover
LOGPROB, GRAMMAR = offlogprob.WATERMARK, "grammar-constrained request"


def batch_unsupported_reason(batch: Any, grammar_served: bool = False) -> str | None:
    """Why this off batch must take SGLang's steps-0 path instead (its result needs verify's extras).
    Logprobs (top / token-id ones too) are computed as steps-0 does (offlogprob.py), except with a watermark.
    Grammar: served where offgrammar.served() said so (the scheduler's grammar barrier, then SGLang's
    delayed sample: the vocab mask of an engine without speculation); else steps-0 builds the mask."""
    if getattr(batch, "return_logprob", False) and offlogprob.unsupported_reason(batch):
        return LOGPROB
    if getattr(batch, "has_grammar", False) and not grammar_served:
        return GRAMMAR
    if getattr(batch, "return_hidden_states", False):
        return "hidden states requested"
    spec = getattr(batch, "spec_info", None)
    if spec is None or getattr(spec, "bonus_tokens", None) is None:
        return "no bonus tokens from the previous step"
    return None


# SGLang names run() uses on every off batch, bound once by build() (an import statement per batch
# costs microseconds on the scheduler's hot path)
_sg: dict[str, Any] = {}


def build(worker: Any, names: FastOffInternals, with_hidden: bool = False) -> FastOff:
    """Capture the target's decode graphs (runs on every TP rank, after SGLang's own capture).
    names: the release's table (internals.MissingInternal, before anything is captured, if the engine
    lacks one of its names). with_hidden: capture them returning the target's hidden states (FULL), so
    that an off batch can also run the draft's extend and keep its KV in step with the target
    (draft "synced")."""
    check_live(names, worker)
    import torch
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardMode,
    )
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import (
        DecodeCudaGraphRunner,
    )
    from sglang.srt.speculative import eagle_worker_v2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.model_executor.runner import base_runner
    _sg.update(torch=torch, DECODE=ForwardMode.DECODE, NO_HIDDEN=CaptureHiddenMode.NULL,
               FULL_HIDDEN=CaptureHiddenMode.FULL, worker_module=eagle_worker_v2,
               Result=eagle_worker_v2.GenerationBatchResult, DraftInput=eagle_worker_v2.EagleDraftInput)

    runner = worker.target_worker.model_runner
    keep_workspace = runner.init_new_workspace
    try:
        backend = runner._get_attention_backend(init_new_workspace=True)
    finally:
        runner.init_new_workspace = keep_workspace
    graphs = None
    if isinstance(runner.decode_cuda_graph_runner, DecodeCudaGraphRunner):
        saved = runner.spec_algorithm, runner.attn_backend, runner.decode_cuda_graph_runner
        # The runner captures TARGET_VERIFY graphs whenever the engine speculates; for the
        # duration of the capture the target is told it does not, so it captures DECODE.
        runner.spec_algorithm = SpeculativeAlgorithm.NONE
        runner.attn_backend = backend
        hidden_mode = base_runner.get_server_return_hidden_states_mode
        if with_hidden:            # the runner sizes its hidden-state capture from the server's setting
            base_runner.get_server_return_hidden_states_mode = hidden_mode_full(names, CaptureHiddenMode.FULL)
        try:
            graphs = DecodeCudaGraphRunner(runner, attn_backend=backend, speculative_num_steps=0,
                                           speculative_num_draft_tokens=1)
        finally:
            base_runner.get_server_return_hidden_states_mode = hidden_mode
            runner.spec_algorithm, runner.attn_backend, runner.decode_cuda_graph_runner = saved
    log.info("spec-controller fast off path ready (%s%s)",
             f"decode CUDA graphs up to batch {graphs.max_bs}" if graphs else "eager decode",
             ", with hidden states for the draft" if with_hidden else "")
    return FastOff(backend, graphs, with_hidden, names)


def all_ranks_agree(ok: bool, reduce_min: Callable[[int], int] | None = None) -> bool:
    """True only if every TP rank built the fast path: a rank that decodes off batches one way while
    another takes SGLang's steps-0 path would issue different collectives and hang the group."""
    if reduce_min is None:
        reduce_min = _tp_min
    return bool(reduce_min(1 if ok else 0))


def _tp_min(value: int) -> int:
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return value
    from sglang.srt.distributed.parallel_state import get_tp_group
    group = get_tp_group()
    if group.world_size == 1:
        return value
    flag = torch.tensor([value], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group.cpu_group)   # gloo: no GPU work
    return int(flag.item())


def run(worker: Any, fast: FastOff, batch: Any, on_publish: Callable | None, sync_draft: bool = False,
        kv_writer: Any = None, grammar_barrier: Callable[[], None] | None = None, lean: bool = False,
        before_write: Callable[[], None] | None = None) -> Any:
    """One off decode batch as plain decode; returns a steps-0-shaped GenerationBatchResult.
    sync_draft (needs fast.with_hidden): the draft's extend runs on the new token too, as in SGLang's
    steps-0 state, so its KV holds every position when speculation resumes. kv_writer (a
    draftkv.DraftKVWriter, needs fast.with_hidden): instead, only the draft's KV for the decoded position
    is written (no draft forward). grammar_barrier: the scheduler's, for a grammar batch (offgrammar.py).
    lean: where offstubs.applies, the result points at per-engine stubs, keeps the sampler's tokens and the new
    lengths are published before the forward (an off step accepts exactly one token: they are known).
    before_write: called once the forward is queued, before kv_writer's write (a held prompt's rows go first)."""
    torch = _sg["torch"]
    runner = worker.target_worker.model_runner
    seq_lens, bonus, event = batch.seq_lens, batch.spec_info.bonus_tokens, fast.names.read_done_event
    # From 0.5.18 every verify graph replay leaves an event here that the scheduler never clears (it
    # reads the draft runner's): drop it, so that only one this forward publishes is handed over.
    setattr(runner, event, None)
    with_hidden = sync_draft or kv_writer is not None
    lean = lean and offstubs.applies(on_publish, sync_draft, getattr(batch, "return_logprob", False))
    new_seq_lens = seq_lens + 1        # the decode's lengths (this token included) and the published ones
    if lean:                           # the scheduler's next preparation may start while this forward runs
        on_publish(new_seq_lens)
    with offlogprob.keeping_logits(runner, batch) as kept:
        if getattr(batch, "has_grammar", False):        # (plain batches skip the context manager: per batch)
            with offgrammar.delaying_sample(worker.target_worker, batch):
                out, loc = _plain_decode(worker.target_worker, fast, batch, with_hidden, new_seq_lens)
            offgrammar.sample(out, batch, grammar_barrier)   # its mask after the FSM advanced
        else:
            out, loc = _plain_decode(worker.target_worker, fast, batch, with_hidden, new_seq_lens)
    # steps-0's int32 tokens; the lean step keeps the sampler's (the future map casts to its own int64 anyway)
    tokens = out.next_token_ids if lean else out.next_token_ids.to(torch.int32)
    if kept is not None:      # return_logprob: steps-0's logprobs and layout, by SGLang's own function
        offlogprob.fill(fast.names, batch, out.logits_output, kept, tokens, torch)
    if kv_writer is not None and not sync_draft:
        write_draft_kv(worker, fast, kv_writer, out, seq_lens.to(torch.int64), loc, before_write)
    if sync_draft:            # the draft's extend graph publishes the event the scheduler waits on
        setattr(runner, event, None)
    else:
        _hand_over_read_done_event(worker, runner, fast.names)

    if on_publish is not None and not lean:
        on_publish(new_seq_lens)
    if lean:
        accept_lens, extras = _stubs(worker.draft_worker, fast).fields(seq_lens.shape[0], tokens.device)
        fast.lean_batches += 1
    else:
        accept_lens, extras = torch.ones(seq_lens.shape[0], dtype=torch.int32, device=tokens.device), {}
    result = _sg["Result"](
        logits_output=out.logits_output,
        next_token_ids=tokens,
        can_run_cuda_graph=out.can_run_cuda_graph,
        speculative_num_draft_tokens=1,
        next_draft_input=_sg["DraftInput"](bonus_tokens=tokens, **extras),
        accept_lens=accept_lens,
        new_seq_lens=new_seq_lens,
        extra_keep_alive_refs=[loc, bonus],
    )
    if sync_draft:
        _draft_extend(worker, batch, result, fast)
    elif not lean:
        worker._stub_skipped_draft_extend(batch, result)   # zero draft extras the future map relays
    fast.batches += 1
    fast.graph_batches += bool(out.can_run_cuda_graph)
    return result


def write_draft_kv(worker: Any, fast: FastOff, kv_writer: Any, out: Any, positions: Any, loc: Any,
                   before_write: Callable[[], None] | None = None) -> None:
    """The draft's KV for the positions a plain decode forward (`out`, with hidden states) just wrote to slots `loc`
    (int64 both), in the draft's TP context (its embedding); before_write first (its CPU not counted as the write's)."""
    t0 = time.perf_counter_ns()
    with fast.names.draft_context.enter(worker.draft_worker):
        if before_write is not None:
            t1 = time.perf_counter_ns()
            before_write()
            t0 += time.perf_counter_ns() - t1
        kv_writer.write(out.logits_output.hidden_states, out.next_token_ids, positions, loc)
    fast.kv_ns += time.perf_counter_ns() - t0


def target_forward(target: Any, fast: FastOff, batch: Any, with_hidden: bool) -> Any:
    """The target's forward of a DECODE-mode batch through the fast path's backend and graphs (put back after it)."""
    runner = target.model_runner
    swapped = runner.attn_backend, runner.decode_cuda_graph_runner
    runner.attn_backend, runner.decode_cuda_graph_runner = fast.attn_backend, fast.graph_runner
    t0 = time.perf_counter_ns()
    try:
        return target.forward_batch_generation(batch, capture_hidden_mode=_sg["FULL_HIDDEN" if with_hidden else "NO_HIDDEN"])
    finally:
        fast.target_ns += time.perf_counter_ns() - t0
        runner.attn_backend, runner.decode_cuda_graph_runner = swapped


def _stubs(draft: Any, fast: FastOff) -> offstubs.OffStubs:
    if fast.stubs is None:
        fast.stubs = offstubs.OffStubs(_sg["torch"], draft,
                                       _sg["worker_module"].get_draft_recurrent_hidden_state_spec(draft.draft_runner))
    return fast.stubs


def _plain_decode(target: Any, fast: FastOff, batch: Any, with_hidden: bool, new_seq_lens: Any) -> tuple[Any, Any]:
    """The target's DECODE forward of the bonus tokens through the fast path's backend and graphs;
    the batch and the runner are restored after it. Returns (its output, the KV slots it wrote).

    Spec-v2 convention: batch.seq_lens is the length before this step, the previous step's
    token (the bonus token) is not in the KV cache yet and sits at position seq_lens. Given no
    kv_loc_plan (0.5.22+), the forward plans its own write window from out_cache_loc."""
    torch, runner = _sg["torch"], target.model_runner
    seq_lens = batch.seq_lens
    # the KV slot the scheduler reserved for this step's first token
    loc = runner.req_to_token_pool.req_to_token[batch.req_pool_indices, seq_lens].to(torch.int64)
    saved = (batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum, batch.spec_info, batch.forward_mode)
    batch.input_ids, batch.out_cache_loc = batch.spec_info.bonus_tokens, loc
    batch.forward_mode = _sg["DECODE"]
    batch.seq_lens = new_seq_lens                      # decode convention: length including this token
    if saved[1] is not None:
        batch.seq_lens_cpu = saved[1] + 1
    if saved[2] is not None:
        batch.seq_lens_sum = saved[2] + seq_lens.shape[0]
    batch.spec_info = None
    try:
        out = target_forward(target, fast, batch, with_hidden)
    finally:
        batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum, batch.spec_info, batch.forward_mode = saved
    return out, loc


def _draft_extend(worker: Any, batch: Any, result: Any, fast: FastOff) -> None:
    """SGLang's own draft extend of the steps-0 state (1 token per request, its CUDA graph), in the
    contexts EAGLEWorkerV2.forward_batch_generation gives it (the draft's TP context: the release's)."""
    w, draft = _sg["worker_module"], worker.draft_worker
    with fast.names.draft_context.enter(draft), w.speculative_moe_backend_context(), \
            w.speculative_moe_a2a_backend_context():
        draft._draft_extend_for_decode(batch, result)   # no kv_loc_plan (0.5.22+): as steps-0 passes


def stub_draft_input(draft_worker: Any, next_token_ids: Any, fast: FastOff | None = None) -> Any:
    """A shape-valid EagleDraftInput for requests whose draft forward was skipped (zeroed extras,
    as SGLang's _stub_skipped_draft_extend writes them); the bonus tokens are the real ones. With `fast` (where the
    lean off step's read-only stubs are safe: offstubs.for_prefill) the extras are slices of its zeros instead of
    three new zero-filled tensors, three allocations and fills fewer inside each lean prefill's CPU-bound launch."""
    from sglang.srt.speculative import eagle_worker_v2 as w
    if fast is not None:
        _, extras = _stubs(draft_worker, fast).fields(next_token_ids.shape[0], next_token_ids.device)
    else:
        import torch
        hidden_spec = w.get_draft_recurrent_hidden_state_spec(draft_worker.draft_runner)
        extras = offstubs.zero_extras(torch, next_token_ids.shape[0], draft_worker.topk, hidden_spec,
                                      next_token_ids.device)
    return w.EagleDraftInput(bonus_tokens=next_token_ids, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1,
                             **extras)


def _hand_over_read_done_event(worker: Any, target_runner: Any, names: FastOffInternals) -> None:
    """The scheduler's write-after-read barrier waits on the event of the runner that reads
    shared buffers last (the draft runner, in a speculative step). Here that is the target's
    decode graph: hand its event over, or the scheduler falls back to a whole-stream wait.
    The attribute names are the release's (checked at build time)."""
    event = getattr(target_runner, names.read_done_event)
    if event is None:             # an eager forward publishes none: the scheduler waits for the stream
        return
    setattr(target_runner, names.read_done_event, None)
    setattr(getattr(worker, names.last_reader), names.read_done_event, event)
