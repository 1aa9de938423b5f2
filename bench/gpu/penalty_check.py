"""Outputs and logprobs of two running SGLang servers for requests WITH sampling penalties (stdlib only).

    python3 bench/gpu/penalty_check.py --port-a 30001 --port-b 30000 [--chain M/target/next.json] \
        [--prompts 48] [--batch 16] [--output-len 64] [--temperatures 0,0.8] [--out logprob.jsonl]

--port-a: an engine without speculation (the reference); --port-b: the speculative engine with the
plugin's threshold pinned at 0 (every decode batch off: the fast off path). Every request carries
frequency_penalty 0.5, presence_penalty 0.5, repetition_penalty 1.2 and min_new_tokens 8 and asks for
return_logprob with the top 5 (--top); every other request also gets logit_bias +100 on the EOS id
(--eos) and stops at EOS, so that min_new_tokens alone sets its length (the step at which the
penalizer's count of output tokens reaches it). Temperature 0 is greedy; any other is sampled with a
fixed sampling_seed per request.

--chain (mkmodel.py --crafted's successor table): the crafted target predicts NEXT[last token] by ~55
logits whatever the context, and 64 tokens of a random chain never repeat, so penalties on output tokens
would show nowhere. The prompts then end on tokens of the chain's shortest cycles: the output goes round
its cycle, each lap penalizes the winner again, and the top logprobs (the others against the penalized
winner) carry the penalizer's counts at every position.

Requests go in groups of --batch, each group one batched /generate call, one group after another. SGLang
counts a request's output token into its penalizer when the next decode batch is prepared, from the
results processed by then: under overlap scheduling that is the token of two iterations back, and an
iteration that prefills other requests in between leaves one token uncounted and counts the next twice.
A group sent at once is prefilled in one batch and decodes in lockstep, so both engines count the same
tokens; clients arriving on their own would let the engines differ by where prefills fall.

Control: engine A answers the same requests with neutral penalties (0, 0, 1, min_new_tokens 0; logit bias
kept): effect_prompts counts the prompts whose reply they changed. None changed: the comparison proves
nothing, exit status 3. Exit 2 on a malformed reply, 1 with --fail-above X if a max difference exceeds X.
One line per temperature (the fields of logprob_check.py's, plus length_mismatch_prompts, effect_prompts).
"""
from __future__ import annotations

import json
import sys

from greedy import post, prompts
from logprob_check import Malformed, compare, pair_check_parser, parse

PENALTIES = {"frequency_penalty": 0.5, "presence_penalty": 0.5, "repetition_penalty": 1.2, "min_new_tokens": 8}
NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0}
EOS_BIAS = 100.0


def cycles(nxt: list[int], first: int = 3) -> list[list[int]]:
    """The cycles of the successor map from the ids >= first (the ordinary ones), shortest first."""
    state: dict[int, int] = {}                       # 1: on the current walk, 2: done
    found = []
    for start in range(first, len(nxt)):
        walk, u = [], start
        while u not in state:
            state[u] = 1
            walk.append(u)
            u = nxt[u]
        if state[u] == 1:                            # the walk closed on itself: a new cycle
            found.append(walk[walk.index(u):])
        for v in walk:
            state[v] = 2
    return sorted(found, key=lambda c: (len(c), c[0]))


def cycle_prompts(batch: list[list[int]], found: list[list[int]], output_len: int, use: int = 4) -> list[list[int]]:
    """Each prompt with its last token replaced by a token of one of the `use` shortest cycles that the
    output laps at least twice (the shortest cycle if none is that short); starts spread along the cycle."""
    short = [c for c in found if 2 * len(c) <= output_len][:use] or found[:1]
    if not short:
        return batch
    return [ids[:-1] + [short[i % len(short)][(i // len(short)) % len(short[i % len(short)])]]
            for i, ids in enumerate(batch)]


def params(i: int, new_tokens: int, temperature: float, seed: int, penalties: dict, eos: int) -> dict:
    """Request i's sampling params: odd ones stop at a biased EOS, so that min_new_tokens sets their length."""
    out = {"temperature": temperature, "max_new_tokens": new_tokens, **penalties}
    if temperature > 0:
        out["sampling_seed"] = seed + i
    if i % 2:
        out.update(logit_bias={str(eos): EOS_BIAS}, ignore_eos=False)
    else:
        out["ignore_eos"] = True
    return out


def body(ids: list[list[int]], first: int, new_tokens: int, temperature: float, seed: int, penalties: dict,
         eos: int, top: int) -> dict:
    """One batched /generate call for the group whose first request is number `first`."""
    return {"input_ids": ids, "sampling_params": [params(first + j, new_tokens, temperature, seed, penalties, eos)
                                                  for j in range(len(ids))],
            "return_logprob": True, "top_logprobs_num": top}


def parse_reply(reply: dict, i: int, new_tokens: int, top: int) -> tuple:
    """logprob_check.parse, for a request that may stop early (odd i) at any length from 1 to new_tokens."""
    n = new_tokens
    if i % 2:
        n = len(reply.get("output_ids") or []) if isinstance(reply, dict) else 0
        if not 1 <= n <= new_tokens:
            raise Malformed(f"request {i}: {n} output tokens, 1 ... {new_tokens} expected")
    return parse(reply, n, top)


def run_all(port: int, batch: list[list[int]], group: int, new_tokens: int, temperature: float, seed: int,
            penalties: dict, eos: int, top: int) -> list[tuple]:
    out = []
    for first in range(0, len(batch), group):
        ids = batch[first:first + group]
        replies = post(port, "/generate", body(ids, first, new_tokens, temperature, seed, penalties, eos, top))
        if not isinstance(replies, list) or len(replies) != len(ids):
            raise Malformed(f"a batched call of {len(ids)} answered {str(replies)[:200]}")
        out += [parse_reply(r, first + j, new_tokens, top) for j, r in enumerate(replies)]
    return out


def common(a: list[tuple], b: list[tuple]) -> tuple[list[tuple], list[tuple], int]:
    """Both runs cut to each prompt's common length, and the number of prompts whose lengths differ."""
    cut_a, cut_b, differ = [], [], 0
    for x, y in zip(a, b):
        n = min(len(x[0]), len(y[0]))
        differ += len(x[0]) != len(y[0])
        cut_a.append(tuple(part[:n] for part in x))
        cut_b.append(tuple(part[:n] for part in y))
    return cut_a, cut_b, differ


def effect(penalized: list[tuple], neutral: list[tuple], tol: float = 1e-3) -> int:
    """Prompts whose reply the penalties changed: other tokens or lengths, or a logprob moved by > tol."""
    changed = 0
    for (ids_p, lp_p, top_p), (ids_n, lp_n, top_n) in zip(penalized, neutral):
        changed += (ids_p != ids_n or any(abs(x - y) > tol for x, y in zip(lp_p, lp_n))
                    or any(set(p) != set(n) or any(abs(p[t] - n[t]) > tol for t in p) for p, n in zip(top_p, top_n)))
    return changed


def row(temperature: float, a: list[tuple], b: list[tuple], control: list[tuple]) -> dict:
    cut_a, cut_b, differ = common(a, b)
    out = {"check": "penalty", "temp": temperature, "prompts": len(a), **compare(cut_a, cut_b)}
    out["tokens"] = sum(len(x[0]) for x in a)
    return {**out, "length_mismatch_prompts": differ, "effect_prompts": effect(a, control)}


def status(rows: list[dict], fail_above: float | None) -> int:
    if any(r["effect_prompts"] == 0 for r in rows):
        return 3
    worst = max((max(r["max_abs_diff"], r["max_abs_diff_top"]) for r in rows), default=0.0)
    mismatch = any(r["token_mismatch_prompts"] or r["length_mismatch_prompts"] for r in rows)
    return 1 if fail_above is not None and (worst > fail_above or mismatch) else 0


def main() -> int:
    ap = pair_check_parser(__doc__, prompts=48, seed=5)
    ap.add_argument("--chain", default=None, help="the crafted model's next.json: prompts end on its short cycles")
    ap.add_argument("--batch", type=int, default=16, help="requests per batched call (one lockstep group)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--eos", type=int, default=2, help="the EOS id the odd requests bias and stop at")
    ap.add_argument("--fail-above", type=float, default=None)
    args = ap.parse_args()
    batch = prompts(args.prompts, args.input_len, args.vocab, args.seed)
    found = []
    if args.chain:
        with open(args.chain) as f:
            found = cycles(json.load(f))
        batch = cycle_prompts(batch, found, args.output_len)
    rows = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        runs = []
        try:
            for port, penalties in ((args.port_a, PENALTIES), (args.port_b, PENALTIES), (args.port_a, NEUTRAL)):
                runs.append(run_all(port, batch, args.batch, args.output_len, temperature, args.seed * 1000,
                                    penalties, args.eos, args.top))
        except Malformed as e:
            print(f"PENALTY temp={temperature:g} MALFORMED {e}", flush=True)
            return 2
        last = {ids[-1] for ids in batch}            # the lengths of the cycles the prompts end on
        rows.append({**row(temperature, *runs), "batch": args.batch,
                     "cycles": sorted({len(c) for c in found if set(c) & last})})
        print("PENALTY " + " ".join(f"{k}={'-' if v is None else (f'{v:.3g}' if isinstance(v, float) else v)}"
                                    for k, v in rows[-1].items() if k != "check"), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    code = status(rows, args.fail_above)
    if code == 3:
        print("PENALTY VACUOUS: the penalties changed no reply of engine A at some temperature", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
