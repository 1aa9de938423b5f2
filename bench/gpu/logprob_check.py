"""Output logprobs of two running SGLang servers, compared token by token (stdlib only).

    python3 bench/gpu/logprob_check.py --port-a 30000 --port-b 30001 --prompts 64 --concurrency 16 \
        [--temperatures 0,0.8] [--seed 3] [--vocab 32000] [--out results.jsonl]

--port-a: an engine without speculation (the reference); --port-b: the speculative engine with the
plugin's threshold pinned at 0, so that every decode batch is off (the fast off path's logprobs;
--pin-b sets speculative_disable_batch_threshold to that value first). Every prompt asks for
return_logprob with top_logprobs_num 5 (--top). Temperature 0 is the greedy run; any other
temperature is a sampled run with a fixed per-request sampling_seed (SGLang's sampling params), which
seeds the plain decode's sampler on both engines (no top-p / top-k, so its seeded path is taken).

One line per temperature:
    LOGPROB temp=0 prompts=64 tokens=4096 compared=4096 token_mismatch_prompts=0 top_id_mismatch=0
            max_abs_diff=1.9e-06 max_abs_diff_decode=1.9e-06 max_abs_diff_top=2.4e-06 first_divergence=-
Positions are compared up to a prompt's first differing token (after it the contexts differ);
max_abs_diff_decode leaves out each reply's first token (the prefill's, not the off path's).
top_id_mismatch: compared positions whose top-k ids differ as sets (ties may reorder them).
Exit status 2 on a malformed reply (missing or mis-sized logprob fields, a token id that is not the
output's, a logprob above 0 or not finite); 1 with --fail-above X if a max difference exceeds X.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor

from greedy import post, prompts, set_threshold   # the same server call and prompts as the greedy check


class Malformed(Exception):
    pass


def request(ids: list[int], new_tokens: int, temperature: float, seed: int, top: int) -> dict:
    params = {"temperature": temperature, "max_new_tokens": new_tokens, "ignore_eos": True}
    if temperature > 0:
        params["sampling_seed"] = seed
    return {"input_ids": ids, "sampling_params": params, "return_logprob": True, "top_logprobs_num": top}


def parse(reply: dict, new_tokens: int, top: int) -> tuple[list[int], list[float], list[dict[int, float]]]:
    """(output ids, their logprobs, per position {top id: logprob}); Malformed if the reply is not that."""
    try:
        ids, meta = reply["output_ids"], reply["meta_info"]
        token_lp, top_lp = meta["output_token_logprobs"], meta["output_top_logprobs"]
    except (KeyError, TypeError) as e:
        raise Malformed(f"reply lacks {e}: {str(reply)[:300]}") from None
    if not (len(ids) == len(token_lp) == len(top_lp) == new_tokens):
        raise Malformed(f"lengths: {len(ids)} ids, {len(token_lp)} logprobs, {len(top_lp)} top rows, "
                        f"{new_tokens} asked")
    values, tops = [], []
    for k, (tok, entry, row) in enumerate(zip(ids, token_lp, top_lp)):
        if not (isinstance(entry, (list, tuple)) and len(entry) >= 2 and entry[1] == tok):
            raise Malformed(f"position {k}: logprob entry {entry!r} is not for output token {tok}")
        if not isinstance(row, (list, tuple)) or len(row) != top:
            raise Malformed(f"position {k}: {len(row) if isinstance(row, (list, tuple)) else row!r} top "
                            f"logprobs, {top} asked")
        row_map = {}
        for item in [entry] + list(row):
            value = item[0] if isinstance(item, (list, tuple)) and item else None
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value > 1e-4:
                raise Malformed(f"position {k}: logprob {value!r}")
        for item in row:
            row_map[item[1]] = float(item[0])
        values.append(float(entry[0]))
        tops.append(row_map)
    return ids, values, tops


def run_all(port: int, batch: list[list[int]], new_tokens: int, temperature: float, seed: int, top: int,
            concurrency: int) -> list[tuple]:
    def one(job):
        i, ids = job
        return parse(post(port, "/generate", request(ids, new_tokens, temperature, seed + i, top)), new_tokens, top)
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, enumerate(batch)))


def compare(a: list[tuple], b: list[tuple]) -> dict:
    out = dict(tokens=0, compared=0, token_mismatch_prompts=0, top_id_mismatch=0, max_abs_diff=0.0,
               max_abs_diff_decode=0.0, max_abs_diff_top=0.0, first_divergence=None)
    for p, ((ids_a, lp_a, top_a), (ids_b, lp_b, top_b)) in enumerate(zip(a, b)):
        out["tokens"] += len(ids_a)
        for k in range(len(ids_a)):
            if ids_a[k] != ids_b[k]:
                out["token_mismatch_prompts"] += 1
                if out["first_divergence"] is None:
                    out["first_divergence"] = f"prompt{p}@{k}"
                break
            out["compared"] += 1
            diff = abs(lp_a[k] - lp_b[k])
            out["max_abs_diff"] = max(out["max_abs_diff"], diff)
            if k > 0:
                out["max_abs_diff_decode"] = max(out["max_abs_diff_decode"], diff)
            if set(top_a[k]) != set(top_b[k]):
                out["top_id_mismatch"] += 1
            for tok in set(top_a[k]) & set(top_b[k]):
                out["max_abs_diff_top"] = max(out["max_abs_diff_top"], abs(top_a[k][tok] - top_b[k][tok]))
    return out


def pair_check_parser(doc: str | None, prompts: int, seed: int) -> argparse.ArgumentParser:
    """The options every check of engine B against engine A shares (logprob, penalty, grammar checks)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port-a", type=int, required=True, help="engine without speculation (reference)")
    ap.add_argument("--port-b", type=int, required=True, help="speculative engine, threshold pinned at 0")
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--temperatures", default="0,0.8")
    ap.add_argument("--out", default=None, help="append one JSON line per temperature")
    return ap


def main() -> int:
    ap = pair_check_parser(__doc__, prompts=64, seed=3)
    ap.add_argument("--pin-b", type=int, default=None, help="set port B's threshold to this value first")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--fail-above", type=float, default=None)
    args = ap.parse_args()
    if args.pin_b is not None and not set_threshold(args.port_b, args.pin_b):   # else B would not be what is compared
        print(f"port {args.port_b} refused threshold {args.pin_b} (plugin inactive?)", file=sys.stderr)
        return 2
    batch = prompts(args.prompts, args.input_len, args.vocab, args.seed)
    status = 0
    for temperature in (float(t) for t in args.temperatures.split(",")):
        try:
            a = run_all(args.port_a, batch, args.output_len, temperature, args.seed * 1000, args.top, args.concurrency)
            b = run_all(args.port_b, batch, args.output_len, temperature, args.seed * 1000, args.top, args.concurrency)
        except Malformed as e:
            print(f"LOGPROB temp={temperature:g} MALFORMED {e}", flush=True)
            return 2
        row = {"temp": temperature, "prompts": len(batch), **compare(a, b)}
        print("LOGPROB " + " ".join(f"{k}={'-' if v is None else (f'{v:.3g}' if isinstance(v, float) else v)}"
                                    for k, v in row.items()), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        worst = max(row["max_abs_diff"], row["max_abs_diff_top"])
        if args.fail_above is not None and worst > args.fail_above:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
