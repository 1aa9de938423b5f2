"""The draft's KV for positions decoded while speculation is off, written by the plugin (off path "kv").

Runs inside SGLang's scheduler process, on every off batch of an engine started with it: keep it lean.

An EAGLE3 draft layer's key and value at position p depend only on its inputs there: the embedding of
the token that follows p and the target's auxiliary hidden states at p (through fc). So while off, the
draft's KV can be kept exactly as SGLang's own draft extend would write it without running the draft:
the target's decode graph returns those hidden states (graphs captured "with hidden"), and this module
runs only the draft's input projections and its k, v projection + RoPE (SGLang's own modules; the rows of
qkv_proj's weight that make k and v where it is a plain bf16/fp16 linear, checked against
forward_prepare_native at start, else forward_prepare_native itself) and stores k, v in the draft's KV pool
at the target's slot for p (both pools share the slot mapping).
No attention, no MLP, no lm_head: a few kernels over one token per request. What it cannot give is the
draft's next proposal (topk and recurrent hidden state) for the first step after speculation resumes:
that step drafts from SGLang's zeroed stub, every later one from a complete KV.

Only for a one-layer EAGLE3 draft on a plain MHA pool (a deeper draft's later layers need the first
layer's attention output; sliding-window, context-parallel, quantised and unified-memory pools store differently):
unsupported_reason() says why not, and the engine then keeps SGLang's own draft extend ("synced") or
the fast path without the draft.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

EAGLE3_MODEL = "LlamaForCausalLMEagle3"
PLAIN_POOL = "MHATokenToKVPool"
PLAIN_LINEAR = "UnquantizedLinearMethod"
EAGLE3 = "sglang.srt.models.llama_eagle3"
# The SGLang names this module relies on, the same in 0.5.17 ... 0.5.23 (tests/test_draftkv_contract.py
# checks every wheel; build() re-checks the live objects): callables -> parameters (in this order),
# classes -> attributes, and quoted source facts (function, text, why).
CALLABLES = {
    "sglang.srt.models.llama.LlamaAttention.forward_prepare_native": ("self", "positions", "hidden_states"),
    "sglang.srt.speculative.eagle_utils._eagle_prefill_tail_tokens": ("batch", "next_token_ids"),
    f"sglang.srt.mem_cache.memory_pool.{PLAIN_POOL}.set_kv_buffer": ("self", "layer", "cache_k", "cache_v",
                                                                     "k_scale", "v_scale"),
}
ATTRIBUTES = {
    f"{EAGLE3}.LlamaModel": ("embed_tokens", "fc", "input_norm", "fc_norm", "num_aux_hidden_states", "layers",
                             "is_mrope_enabled"),
    f"{EAGLE3}.LlamaDecoderLayer": ("hidden_norm",),
    "sglang.srt.models.llama.LlamaDecoderLayer": ("input_layernorm", "self_attn"),
    "sglang.srt.layers.radix_attention.RadixAttention": ("tp_k_head_num", "qk_head_dim", "tp_v_head_num",
                                                         "v_head_dim", "k_scale", "v_scale"),
    "sglang.srt.models.llama.LlamaAttention": ("qkv_proj", "q_size", "kv_size", "rotary_emb"),
    "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding": ("head_size",),
    "sglang.srt.layers.linear.LinearBase": ("quant_method", "skip_bias_add"),
    "sglang.srt.managers.schedule_batch.ScheduleBatch": ("extend_lens", "prefix_lens", "input_ids",
                                                         "out_cache_loc", "forward_mode"),
}
FACTS = (
    (f"{EAGLE3}.LlamaModel.forward", "if hidden_states.shape[-1] != embeds.shape[-1]:",
     "the target's aux hidden states go through input_norm / fc_norm / fc when their width is not the draft's"),
    (f"{EAGLE3}.LlamaModel.forward", "hidden_states = self.fc(hidden_states)", "... fc"),
    (f"{EAGLE3}.LlamaDecoderLayer.forward", "embeds = self.input_layernorm(embeds)", "the layer's inputs: ..."),
    (f"{EAGLE3}.LlamaDecoderLayer.forward", "hidden_states = self.hidden_norm(hidden_states)", "..."),
    (f"{EAGLE3}.LlamaDecoderLayer.forward", "hidden_states = torch.cat([embeds, hidden_states], dim=-1)",
     "... concatenated, embeds first, into qkv"),
    ("sglang.srt.models.llama.LlamaAttention.forward_prepare_native",
     "q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)",
     "qkv_proj's output rows are q, then k, then v: sliced_kv's rows"),
    ("sglang.srt.models.llama.LlamaAttention.forward_prepare_native", "q, k = self.rotary_emb(positions, q, k)",
     "RoPE on q and k only: the rotary embedding takes (positions, q, k)"),
    ("sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply", "F.linear(x, layer.weight, bias)",
     "a plain linear is F.linear on its weight (the default backend)"),
    ("sglang.srt.models.llama.LlamaAttention.forward", "attn_output = self.attn(q, k, v, forward_batch)",
     "the attention stores exactly the k, v that forward_prepare_native returns"),
    ("sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill",
     "torch.cat((input_ids[1:], tail_tokens[i].reshape(1)))",
     "a prefill's draft input at each position is the next token, the tail token at the chunk's end"),
)


PAD_SLOT = 0        # the KV pools' padding slot: padded or superseded rows' dummy writes land there harmlessly


def fc_weight(writer: "DraftKVWriter", what: str) -> Any:
    """The draft's fc weight, whose input width is the target's aux hidden states' (EAGLE3: its aux layers
    concatenated): what sizes a buffer of them (`what`, for the ValueError when the draft has none)."""
    weight = getattr(getattr(writer.model, "fc", None), "weight", None)
    if weight is None or weight.dim() != 2:
        raise ValueError(f"the draft has no fc weight to size {what} by")
    return weight


def native_kv(attn: Any) -> Callable[[Any, Any], tuple[Any, Any]]:
    """k, v as SGLang's own draft forward computes them (q computed and dropped)."""
    def project(positions: Any, hidden: Any) -> tuple[Any, Any]:
        _, k, v = attn.forward_prepare_native(positions=positions, hidden_states=hidden)
        return k, v
    return project


def sliced_kv(attn: Any) -> Callable[[Any, Any], tuple[Any, Any]] | None:
    """k, v from the k and v rows of qkv_proj's weight alone, or None where that weight is not a plain one.
    Why: q is two thirds of the weight (hidden 4096: 4096 of 6144 rows), read and discarded on every off
    batch. RoPE gets a one-head stand-in for q (the rotary kernels take q and k heads independently)."""
    proj = getattr(attn, "qkv_proj", None)
    if type(getattr(proj, "quant_method", None)).__name__ != PLAIN_LINEAR or getattr(proj, "skip_bias_add", False):
        return None
    import torch
    weight = getattr(proj, "weight", None)
    q_size, kv_size = getattr(attn, "q_size", None), getattr(attn, "kv_size", None)
    if (not isinstance(weight, torch.Tensor) or weight.dtype not in (torch.bfloat16, torch.float16)
            or weight.dim() != 2 or q_size is None or kv_size is None or weight.shape[0] != q_size + 2 * kv_size):
        return None
    head_size = attn.rotary_emb.head_size

    def project(positions: Any, hidden: Any) -> tuple[Any, Any]:
        # rows k then v (contiguous views), taken per call: a weight update that swaps the parameter is followed
        kv_bias = proj.bias[q_size:] if proj.bias is not None else None
        kv = torch.nn.functional.linear(hidden, proj.weight[q_size:], kv_bias)
        k, v = kv.split([kv_size, kv_size], dim=-1)
        q = torch.empty((k.shape[0], head_size), dtype=k.dtype, device=k.device)
        _, k = attn.rotary_emb(positions, q, k)
        return k, v
    return project


def same_kv(attn: Any, project: Callable, rows: int = 8, seed: int = 0) -> bool:
    """Whether `project` gives forward_prepare_native's k, v (to bf16 rounding) on random inputs."""
    import torch
    weight = attn.qkv_proj.weight
    gen = torch.Generator(device=weight.device).manual_seed(seed)
    hidden = torch.randn((rows, weight.shape[1]), generator=gen, device=weight.device).to(weight.dtype)
    positions = torch.arange(rows, dtype=torch.int64, device=weight.device) * 97
    with torch.no_grad():
        want, got = native_kv(attn)(positions, hidden.clone()), project(positions, hidden.clone())
    return all(a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2 * float(a.abs().max()))
               for a, b in zip(want, got))


def kv_projection(attn: Any) -> tuple[Callable[[Any, Any], tuple[Any, Any]], str]:
    """The writer's k, v projection and what it is: "sliced" where the slice agrees with SGLang's, else
    "native (why)"."""
    project = sliced_kv(attn)
    if project is None:
        return native_kv(attn), "native (qkv_proj is not a plain bf16/fp16 linear)"
    try:
        if same_kv(attn, project):
            return project, "sliced"
        why = "the sliced k, v differ from forward_prepare_native's"
    except Exception as e:      # a rotary kernel that refuses the one-head q: SGLang's own path
        why = f"the sliced k, v failed: {type(e).__name__}: {e}"
    return native_kv(attn), f"native ({why})"


@dataclass(frozen=True)
class DraftKVWriter:
    model: Any          # the draft's inner model (embed_tokens, fc, input_norm, fc_norm, layers)
    layer: Any          # its one decoder layer
    pool: Any           # the draft's token-to-KV pool
    project: Callable[[Any, Any], tuple[Any, Any]]  # (positions, layer input) -> k, v (kv_projection)
    projection: str = "native"

    def write(self, aux_hidden: Any, next_tokens: Any, positions: Any, loc: Any) -> None:
        """Store the draft's k, v for each request at positions (int64, the decoded token's position),
        slots loc, from the target's aux hidden states there and the token it produced."""
        m, layer, attn = self.model, self.layer, self.layer.self_attn
        embeds = m.embed_tokens(next_tokens)
        hidden = aux_hidden
        if hidden.shape[-1] != embeds.shape[-1]:       # as LlamaModel.forward: target features go through fc
            if m.input_norm is not None:
                hidden = m.input_norm(hidden)
            if m.fc_norm is not None:
                chunks = hidden.chunk(m.num_aux_hidden_states, dim=-1)
                hidden = _cat([norm(c) for norm, c in zip(m.fc_norm, chunks)])
            hidden = m.fc(hidden)
        hidden = layer.hidden_norm(hidden)
        embeds = layer.input_layernorm(embeds)
        k, v = self.project(positions, _cat([embeds, hidden]))
        radix = attn.attn
        k = k.view(-1, radix.tp_k_head_num, radix.qk_head_dim)
        v = v.view(-1, radix.tp_v_head_num, radix.v_head_dim)
        if radix.k_scale is None and radix.v_scale is None:
            self.pool.set_kv_buffer(radix, loc, k, v)
        else:
            self.pool.set_kv_buffer(radix, loc, k, v, radix.k_scale, radix.v_scale)


def prompt_rows(extend_lens: Any, prefix_lens: Any, out: Any = None, offset: int = 0) -> Any:
    """A prefill's draft-KV rows computed on the host (the lengths are Python lists there), so that they
    cross to the GPU as one copy instead of a dozen index kernels: int64 [n + R], the position of each of
    the n extend tokens (request r's token t sits at prefix_r + t) followed by each of the R requests' last row
    (where the tail token goes) counted from `offset`. Written into `out` (an int64 array of at least n + R: a pinned
    buffer's view) where given. A loop over the requests: an extend holds one or two under chat traffic, where
    numpy's vectorised form took 6x as long (13.5 against 2.3 us on the development CPU)."""
    import numpy as np
    if len(extend_lens) != len(prefix_lens):
        raise ValueError(f"{len(extend_lens)} extend lengths but {len(prefix_lens)} prefix lengths")
    n, start = sum(extend_lens), 0
    out = np.empty(n + len(extend_lens), dtype=np.int64) if out is None else out[:n + len(extend_lens)]
    for r, (length, prefix) in enumerate(zip(extend_lens, prefix_lens)):
        out[start:start + length] = np.arange(prefix, prefix + length)
        start += length
        out[n + r] = offset + start - 1
    return out


@dataclass
class PromptRows:
    """What a prefill's draft-KV write needs, taken from its batch (write_prefill now, or later: promptkv)."""
    ids: Any            # the extend's input ids [n]
    extend_lens: list   # per request (host lists)
    prefix_lens: list
    tail: Any           # each request's tail token (its first output, or the next chunk's first prompt token) [R]
    aux: Any            # the target's auxiliary hidden states [n, 3 x hidden]
    loc: Any            # the KV slots of the n tokens


def prompt_rows_of(batch: Any, aux_hidden: Any, next_token_ids: Any, keep: bool = False) -> PromptRows | None:
    """A prefill's rows, None for an idle batch. keep: copies of the device tensors, for a write after later batches
    (the target's output may sit in a buffer that its next forward reuses; the batch's tensors are SGLang's)."""
    if batch.forward_mode.is_idle():
        return None
    from sglang.srt.speculative.eagle_utils import _eagle_prefill_tail_tokens
    ids, loc = batch.input_ids, batch.out_cache_loc
    tail = _eagle_prefill_tail_tokens(batch, next_token_ids).to(ids.dtype)
    if keep:
        ids, loc, tail, aux_hidden = ids.clone(), loc.clone(), tail.clone(), aux_hidden.clone()
    return PromptRows(ids, list(batch.extend_lens), list(batch.prefix_lens), tail, aux_hidden, loc)


def stage_prefill(writer: DraftKVWriter, rows: PromptRows) -> None:
    """The rows into the writer: at each prompt position the following token (the chunk's last position: its tail
    token), vectorised instead of SGLang's loop over requests."""
    import torch
    ids = rows.ids
    n, tokens = ids.numel(), sum(rows.extend_lens)
    if tokens != n or len(rows.extend_lens) != len(rows.prefix_lens):
        raise ValueError(f"the extend lengths sum to {tokens} over {len(rows.extend_lens)} requests, the batch holds "
                         f"{n} tokens and {len(rows.prefix_lens)} prefix lengths")
    direct = getattr(writer, "write_prompt", None)       # the graphed writer: straight into its static inputs
    if direct is not None and direct(rows.aux, ids, rows.tail, rows.extend_lens, rows.prefix_lens, rows.loc):
        return
    staged = torch.from_numpy(prompt_rows(rows.extend_lens, rows.prefix_lens))
    if ids.is_cuda:      # pinned (the caching host allocator reuses a block once its copy has run): asynchronous
        staged = staged.pin_memory().to(ids.device, non_blocking=True)
    positions, ends = staged[:n], staged[n:]
    shifted = torch.empty_like(ids)
    shifted[:-1] = ids[1:]
    shifted[ends] = rows.tail
    writer.write(rows.aux, shifted, positions, rows.loc)


def write_prefill(writer: DraftKVWriter, batch: Any, aux_hidden: Any, next_token_ids: Any) -> bool:
    """A prefill's draft KV, as SGLang's draft prefill would write it (EagleDraftWorker._draft_extend_for_prefill).
    False for an idle batch (nothing to write)."""
    rows = prompt_rows_of(batch, aux_hidden, next_token_ids)
    if rows is None:
        return False
    stage_prefill(writer, rows)
    return True


def _cat(parts: list) -> Any:
    import torch
    return torch.cat(parts, dim=-1)


def unsupported_reason(draft_runner: Any) -> str | None:
    """Why the plugin cannot write this draft's KV itself, or None."""
    model = getattr(draft_runner, "model", None)
    if type(model).__name__ != EAGLE3_MODEL:
        return f"the draft is {type(model).__name__}, not {EAGLE3_MODEL}"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or len(layers) != 1:
        return f"the draft has {len(layers) if layers is not None else 'no'} layers (one is supported)"
    for name in ("embed_tokens", "fc", "input_norm", "fc_norm", "num_aux_hidden_states"):
        if not hasattr(inner, name):
            return f"the draft model has no {name}"
    layer = layers[0]
    attn = getattr(layer, "self_attn", None)
    for owner, name in ((layer, "hidden_norm"), (layer, "input_layernorm"), (attn, "forward_prepare_native"),
                        (attn, "attn")):
        if not hasattr(owner, name):
            return f"the draft layer has no {name}"
    if getattr(inner, "is_mrope_enabled", False):
        return "the draft uses multimodal RoPE"
    pool = getattr(draft_runner, "token_to_kv_pool", None)
    if getattr(pool, "requires_physical_write_loc", False):    # 0.5.22+: UnifiedDraftKVPool subclasses the plain pool
        return (f"the draft's KV pool ({type(pool).__name__}) takes physical slot ids only: SGLang's unified memory "
                "pool, whose compaction moves the draft's KV between batches")
    if type(pool).__name__ != PLAIN_POOL:
        return f"the draft's KV pool is {type(pool).__name__}, not {PLAIN_POOL}"
    if getattr(pool, "is_quantized_kv_cache", False):
        return "the draft's KV cache is quantised"
    if (getattr(draft_runner, "dcp_size", 1) or 1) > 1:
        return "decode context parallelism shards the KV cache"
    return None


def build(draft_runner: Any) -> DraftKVWriter:
    """The writer for this draft (ValueError with the reason if unsupported)."""
    why = unsupported_reason(draft_runner)
    if why is not None:
        raise ValueError(why)
    inner = draft_runner.model.model
    project, name = kv_projection(inner.layers[0].self_attn)
    return DraftKVWriter(inner, inner.layers[0], draft_runner.token_to_kv_pool, project, name)
