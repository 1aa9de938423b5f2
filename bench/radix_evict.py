"""What one SGLang radix-cache eviction costs on the CPU as the KV pool grows (bench/gpu/common.sh POOL_TOKENS).

    SGLANG_PYTHON -m bench.radix_evict [--pools 230610,259627,340592,367169] [--seq 432] [--rounds 300] [--repeats 3]

Run by an interpreter with SGLang (0.5.17 here: /tmp/tvenv); no GPU. SGLang's own RadixCache (create_simulated, an
allocator that frees nothing) is filled with requests of --seq random tokens until it holds the pool, as a full
pool in a closed loop is; then each round inserts one request and evicts one request's worth (what a new prefill
does once the pool is full), timing evict() alone. One row per pool: its evictable leaves and the median of the
repeats' mean evict time. The pools are those SGLang gave the engines of the GPU pairs until 12-05 (the engine
started second always the larger one)."""
from __future__ import annotations

import argparse
import random
import statistics
import time


def evict_us(pool: int, seq: int, rounds: int, seed: int) -> tuple[float, int]:
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    class KeepAll:                      # the allocator: evict() hands it the freed slots
        device = "cpu"

        def free_segment(self, value, start_pos=0):
            pass

        def free(self, value):
            pass
    rng = random.Random(seed)
    cache = RadixCache.create_simulated(mock_allocator=KeepAll())

    def insert() -> None:
        tokens = [rng.randrange(3, 32000) for _ in range(seq)]       # bench/gpu/loads.py's prompts: random ids
        cache.insert(InsertParams(key=RadixKey(tokens), value=torch.arange(seq)))
    for _ in range(pool // seq):
        insert()
    spent = 0.0
    for _ in range(rounds):
        insert()
        t0 = time.perf_counter()
        cache.evict(EvictParams(num_tokens=seq))
        spent += time.perf_counter() - t0
    return spent / rounds * 1e6, len(cache.evictable_leaves)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", default="230610,259627,340592,367169")
    ap.add_argument("--seq", type=int, default=432, help="tokens a request holds (closed loop: 144 + 288 on average)")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import sglang
    print(f"SGLang {sglang.__version__}, {args.seq}-token requests, {args.rounds} evictions a run, "
          f"{args.repeats} runs (seeds 0..{args.repeats - 1})")
    print("| KV pool, tokens | evictable leaves | evict, us (median of runs) | runs' range, us |")
    print("|---|---|---|---|")
    for pool in (int(p) for p in args.pools.split(",")):
        runs = [evict_us(pool, args.seq, args.rounds, seed) for seed in range(args.repeats)]
        times = [us for us, _ in runs]
        print(f"| {pool:,} | {runs[0][1]} | {statistics.median(times):.0f} | {min(times):.0f}-{max(times):.0f} |")


if __name__ == "__main__":
    main()
