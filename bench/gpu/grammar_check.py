"""Grammar-constrained outputs of two running SGLang servers, against each other and against the sequence
the constraint forces (stdlib only).

    python3 bench/gpu/grammar_check.py --port-a 30001 --port-b 30000 --chain M/target/next.json \
        [--prompts 48] [--concurrency 16] [--output-len 64] [--every 4] [--no-logprobs] [--temperatures 0,0.8] [--out grammar.jsonl]

--port-a: an engine without speculation (the reference); --port-b: the speculative engine with the plugin's
threshold pinned at 0 (every decode batch off: the fast off path). Both need a grammar backend
(common.sh GRAMMAR_BACKEND=xgrammar).

--chain (mkmodel.py --crafted's successor table): the crafted target predicts NEXT[last token] by ~55 logits.
Two of every three requests carry a regex (sampling_params "regex") over the tokenizer's word tokens
("w3" ... "w31999", concatenated): every --every-th output token is a forced literal among w10 ... w29 (no
other token is a prefix of one of them, so the mask allows that token alone), chosen unlike the chain's next
token; the others are `w[0-9]+` (any token: the chain's wins by its margin); the regex never ends. The output
is then known in advance: the chain, with a jump at each forced position. A vocab mask built one step late
(from an FSM that has not yet accepted the previous token) allows the chain's token at a forced position (the
FSM then refuses it: the request is aborted) and forces the literal one step later: either way the output
leaves the expected sequence. The third request of each three is unconstrained (the chain alone), so that
off batches mix grammar and plain requests; every other constrained one also asks for logprobs (those of the
chosen tokens are compared between the engines; --no-logprobs: none does, so that off batches are eligible for
the lean off step, which a batch holding one logprob request does not take). Temperature 0 is greedy; any other is sampled with a fixed
sampling_seed (the margins and the single allowed token make it follow the same sequence).

One line per temperature:
    GRAMMAR temp=0 prompts=48 constrained=32 forced=512 tokens=3072 expected_mismatch_a=0 expected_mismatch_b=0
            ab_mismatch=0 first_divergence=- errors_a=0 errors_b=0 logprob_compared=1024 max_abs_diff_logprob=0
Exit status 0 when both engines produce the expected sequences and agree; 3 when engine A (the reference)
does not follow the constraint (no grammar backend, another tokenizer: the check proves nothing); 1 when
engine B differs; 2 on a malformed reply.
"""
from __future__ import annotations

import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor

from greedy import post, prompts
from logprob_check import Malformed, pair_check_parser

FORCED = tuple(range(10, 30))       # "w10" ... "w29": no token of the vocabulary is a proper prefix of these
FREE = "w[0-9]+"


def constrained(i: int) -> bool:
    """Two of every three requests carry a regex; the third runs unconstrained in the same batches."""
    return i % 3 != 2


def expected(last: int, nxt: list[int], length: int, every: int, i: int) -> tuple[list[int], list[bool]]:
    """(the output the constraint forces, which positions are forced): the chain from `last`, with position
    k (k + 1 a multiple of `every`: never the prefill's first token) replaced by a literal of FORCED unlike the
    chain's token there; the chain goes on from it."""
    out, forced, u = [], [], last
    for k in range(length):
        if constrained(i) and (k + 1) % every == 0:
            j = (i + k) % len(FORCED)
            t = FORCED[j] if FORCED[j] != nxt[u] else FORCED[(j + 1) % len(FORCED)]
        else:
            t = nxt[u]
        out.append(t)
        forced.append(constrained(i) and (k + 1) % every == 0)
        u = t
    return out, forced


def regex(tokens: list[int], forced: list[bool]) -> str:
    """Forced positions as their literal, the others any token; then any number of further tokens."""
    return "".join(f"w{t}" if f else FREE for t, f in zip(tokens, forced)) + f"({FREE})*"


def request(ids: list[int], i: int, tokens: list[int], forced: list[bool], temperature: float, seed: int,
            logprobs: bool = True) -> dict:
    params = {"temperature": temperature, "max_new_tokens": len(tokens), "ignore_eos": True}
    if temperature > 0:
        params["sampling_seed"] = seed + i
    out = {"input_ids": ids, "sampling_params": params}
    if constrained(i):
        params["regex"] = regex(tokens, forced)
        if logprobs and i % 2 == 0:
            out["return_logprob"] = True
    return out


def parse(reply, n: int, logprob: bool) -> tuple[list[int], list[float] | None]:
    """(output ids, the chosen tokens' logprobs or None); Malformed if the reply is not that."""
    if not isinstance(reply, dict) or not isinstance(reply.get("output_ids"), list):
        raise Malformed(f"reply without output_ids: {str(reply)[:300]}")
    ids = reply["output_ids"]
    if not logprob:
        return ids, None
    entries = (reply.get("meta_info") or {}).get("output_token_logprobs")
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise Malformed(f"{len(ids)} ids but logprobs {str(entries)[:200]}")
    values = []
    for k, (tok, entry) in enumerate(zip(ids, entries)):
        if not (isinstance(entry, (list, tuple)) and len(entry) >= 2 and entry[1] == tok):
            raise Malformed(f"position {k}: logprob entry {entry!r} is not for output token {tok}")
        if not isinstance(entry[0], (int, float)) or not math.isfinite(entry[0]) or entry[0] > 1e-4:
            raise Malformed(f"position {k}: logprob {entry[0]!r}")
        values.append(float(entry[0]))
    return ids, values


def run_all(port: int, jobs: list[tuple], temperature: float, seed: int, concurrency: int,
            logprobs: bool = True) -> list:
    """Per request (ids, logprobs) or the error text of a failed one (an aborted request, an HTTP error)."""
    def one(job):
        i, ids, tokens, forced = job
        body = request(ids, i, tokens, forced, temperature, seed, logprobs)
        try:
            reply = post(port, "/generate", body)
        except Exception as e:            # e.g. HTTP 400: the engine refused the regex
            return f"{type(e).__name__}: {e}"
        finish = ((reply.get("meta_info") or {}).get("finish_reason") or {}) if isinstance(reply, dict) else {}
        if isinstance(finish, dict) and finish.get("type") == "abort":
            return f"aborted: {finish.get('message', '')}"[:200]
        return parse(reply, len(tokens), "return_logprob" in body)
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, jobs))


def compare(jobs: list[tuple], a: list, b: list) -> dict:
    out = dict(prompts=len(jobs), constrained=sum(constrained(j[0]) for j in jobs),
               forced=sum(sum(j[3]) for j in jobs), tokens=sum(len(j[2]) for j in jobs), expected_mismatch_a=0,
               expected_mismatch_b=0, ab_mismatch=0, first_divergence=None, errors_a=0, errors_b=0,
               logprob_compared=0, max_abs_diff_logprob=0.0)
    for (i, _, tokens, _), ra, rb in zip(jobs, a, b):
        for side, r in (("a", ra), ("b", rb)):
            if isinstance(r, str):
                out[f"errors_{side}"] += 1
            elif r[0] != tokens:
                out[f"expected_mismatch_{side}"] += 1
        if isinstance(ra, str) or isinstance(rb, str):
            continue
        if ra[0] != rb[0]:
            out["ab_mismatch"] += 1
            if out["first_divergence"] is None:
                k = next((k for k, (x, y) in enumerate(zip(ra[0], rb[0])) if x != y), min(len(ra[0]), len(rb[0])))
                out["first_divergence"] = f"prompt{i}@{k}"
        elif ra[1] is not None and rb[1] is not None:
            out["logprob_compared"] += len(ra[1])
            diffs = [abs(x - y) for x, y in zip(ra[1], rb[1])]
            out["max_abs_diff_logprob"] = max([out["max_abs_diff_logprob"], *diffs])
    return out


def status(rows: list[dict]) -> int:
    if any(r["expected_mismatch_a"] or r["errors_a"] for r in rows):
        return 3
    return 1 if any(r["expected_mismatch_b"] or r["errors_b"] or r["ab_mismatch"] for r in rows) else 0


def jobs_for(batch: list[list[int]], nxt: list[int], length: int, every: int) -> list[tuple]:
    return [(i, ids, *expected(ids[-1], nxt, length, every, i)) for i, ids in enumerate(batch)]


def main() -> int:
    ap = pair_check_parser(__doc__, prompts=48, seed=11)
    ap.add_argument("--chain", required=True, help="the crafted model's next.json (mkmodel.py --crafted)")
    ap.add_argument("--every", type=int, default=4, help="every this many output tokens one is forced")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--no-logprobs", dest="logprobs", action="store_false",
                    help="no request asks for logprobs (the off batches stay eligible for the lean step)")
    args = ap.parse_args()
    nxt = json.load(open(args.chain))
    jobs = jobs_for(prompts(args.prompts, args.input_len, args.vocab, args.seed), nxt, args.output_len, args.every)
    rows = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        try:
            a = run_all(args.port_a, jobs, temperature, args.seed * 1000, args.concurrency, args.logprobs)
            b = run_all(args.port_b, jobs, temperature, args.seed * 1000, args.concurrency, args.logprobs)
        except Malformed as e:
            print(f"GRAMMAR temp={temperature:g} MALFORMED {e}", flush=True)
            return 2
        rows.append({"check": "grammar", "temp": temperature, **compare(jobs, a, b), "every": args.every,
                     "logprobs": args.logprobs})
        errors = [r for r in a + b if isinstance(r, str)][:1]
        print("GRAMMAR " + " ".join(f"{k}={'-' if v is None else (f'{v:.3g}' if isinstance(v, float) else v)}"
                                    for k, v in rows[-1].items() if k != "check")
              + (f" first_error={errors[0]!r}" if errors else ""), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    code = status(rows)
    if code == 3:
        print("GRAMMAR VACUOUS: engine A did not follow the constraint (grammar backend? tokenizer?)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
