"""Pre-pays, once at engine start, the Triton JIT that SGLang's speculative decode preparation otherwise pays on the
first decode batch of each new batch-size range (on by default; SPEC_CONTROLLER_WARM_SIZES=0 leaves it out).

Runs inside SGLang's scheduler process, once per rank, after the CUDA graphs are captured: not hot. Why: on the
H200 the first run at each new batch size cost ~130 ms more in the scheduling step (bench/results/h200-2026-12-03
section 3), whatever the batch's mode, and an engine without speculation did not. Reading 0.5.17's source
(docs/sglang.md#the-first-batch-at-a-new-size), spec-v2's prepare_for_decode writes req_to_token with the Triton
kernel assign_req_to_token_pool, specialised on next_power_of_2(batch size) (a constexpr) and on whether
out_cache_loc, a slice of the allocator's free list, is 16-byte aligned: up to two compiles per power-of-two range
(SGLang's allocator kernel documents ~100 ms per variant and avoids it with do_not_specialize; this one does not);
plain decoding writes req_to_token with torch indexing. Launching the kernel for every range and both alignments
with start == end (no iteration: it writes nothing) makes those variants before the first request. Measured on the
H200 (bench/results/h200-2026-12-03d call 2, TP 1, 16 launches, 21 ms at start): the first steady run at batch 48 ran
at its median (before: -6 %), at batch 16 -5 % (before: -11 %; what is left there is not this kernel)."""
from __future__ import annotations

from typing import Any

from ..envwords import WARM_SIZES_ENV

ENV = WARM_SIZES_ENV
ALLOCATION = "sglang.srt.mem_cache.allocation"
# What warm() calls and reads (tests/test_warmsizes_contract.py checks them against the wheels that have them)
CALLABLES = {f"{ALLOCATION}.assign_req_to_token_pool_func": ("req_pool_indices", "req_to_token", "start_offset",
                                                              "end_offset", "out_cache_loc", "batch_size")}
FACTS = (
    (f"{ALLOCATION}.assign_req_to_token_pool_func", "next_power_of_2(batch_size)",
     "one compiled variant per power-of-two range of the batch size"),
    (f"{ALLOCATION}.assign_req_to_token_pool", "num_loop = tl.cdiv(kv_end - kv_start, BLOCK_SIZE)",
     "start == end: no iteration, nothing written"),
    ("sglang.srt.speculative.eagle_utils.eagle_prepare_for_decode",
     "cur_kv_lens_cpu = torch.tensor(cur_kv_lens, dtype=torch.int32", "the offsets are int32 (the variants' dtypes)"),
)


def unsupported_reason() -> str | None:
    """Why this SGLang has nothing to warm (0.5.14-0.5.15 write req_to_token otherwise), or None."""
    try:
        from sglang.srt.mem_cache.allocation import assign_req_to_token_pool_func  # noqa: F401
    except ImportError as e:
        return f"no {ALLOCATION}.assign_req_to_token_pool_func in this SGLang ({e})"
    return None


def max_batch_size(worker: Any) -> int:
    """The largest decode batch: the server's max_running_requests, else the request pool's size (what SGLang
    derives it from), else 256."""
    configured = getattr(getattr(worker, "server_args", None), "max_running_requests", None)
    return int(configured or getattr(request_pool(worker), "size", None) or 256)


def request_pool(worker: Any) -> Any:
    """The target's ReqToTokenPool (None where the worker has none)."""
    return getattr(getattr(getattr(worker, "target_worker", None), "model_runner", None), "req_to_token_pool", None)


def ranges(max_batch_size: int) -> list[int]:
    """One batch size per power-of-two range up to max_batch_size: 1, 2, 4, ... (the last one covers it)."""
    out = [1]
    while out[-1] < max_batch_size:
        out.append(out[-1] * 2)
    return out


def warm(worker: Any, max_batch_size: int) -> int:
    """Launch assign_req_to_token_pool for every range and both alignments of out_cache_loc; the launches made."""
    import torch
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool_func

    req_to_token = request_pool(worker).req_to_token
    device = req_to_token.device
    scratch = torch.zeros(64, dtype=torch.int64, device=device)
    launches = 0
    with torch.cuda.device(device):      # the pool's device, whatever this thread's current one
        for bs in ranges(max_batch_size):
            # spec-v2's dtypes (FACTS): the pool rows int64, the offsets int32, out_cache_loc int64
            pool_rows = torch.zeros(bs, dtype=torch.int64, device=device)
            offsets = torch.zeros(bs, dtype=torch.int32, device=device)
            for out_cache_loc in (scratch, scratch[1:]):            # 16-byte aligned, and 8 bytes off
                assign_req_to_token_pool_func(pool_rows, req_to_token, offsets, offsets.clone(), out_cache_loc, bs)
                launches += 1
        torch.cuda.synchronize(device)
    return launches
