"""Issue 12 item 3: does a request that lives through off -> on draft exactly as one that was always on?

    python3 bench/gpu/draft_consistency.py --port 30000 --pp /tmp/pp/spec --maxbs 32 \
        --offon 'fast={"spec_controller_sync_draft": false, "spec_controller_draft_kv": false}' \
        --offon 'kv={"spec_controller_sync_draft": false, "spec_controller_draft_kv": true}' --out c.json

Against one server with the plugin and the proposals recorder (bench/gpu/proposals.py, SPEC_PROPOSALS=PREFIX),
one request at a time (batch size 1), --prompts random prompts (ids 3 .. vocab-1: "w<id>" in mkmodel's
word-level tokenizer; sent as input_ids, so no BOS or tokenizer in between), greedy, ignore_eos, rid
"<mode>-<i>". Per prompt i, in this order:
  always-i        threshold --maxbs (every batch speculates)
  always1-i       the same, prompt + always's first output token, one token fewer: its verifies sit one
                  position after always's. A draft that is right accepts the same length every step (the
                  crafted lookback model: 2), so `always` verifies only at every other position; always1
                  supplies the reference at the positions in between (whichever parity an off -> on switch
                  lands on). Off: --no-shift.
  offon-NAME-i    for each --offon NAME=JSON: JSON's switches and threshold 0, the request streamed, threshold
                  --maxbs once --off-tokens tokens have arrived (speculation resumes mid-request), threshold 0
                  (a JSON key "off_tokens" sets that mode's own: a mode that loses its first on-step to the
                  stub lands one position off one that does not, so each can meet the references' positions)
                  after it.
Every set_internal_state answer must say updated, else one ERROR line and exit 2.

Analysis (a pure function over the recorder's rows, `analyse`): per offon request the switch position s
(its first verify with steps > 0) and, over its on-steps in the ranges first = [s], window = [s, s + W),
window_after_first = (s, s + W), after = [s + W, end):
  match: of the steps with a counterpart (a verify of the reference runs of the same prompt at the same
  seq_len), the share that proposed the identical draft (bonus + chain); first_match the same for the first
  drafted token alone; match_all: matched / all steps; counterparts: how many had one;
  accept vs ref_accept: mean accept length, and that of the always-on runs' (always, always1) verifies at
  the same positions.
One CONSIST line per mode, a table, and --out JSON (per mode, per request, greedy equality of the outputs).

--churn N: N more requests in flight beside the measured one the whole run (prompts of --churn-prompt-len tokens,
outputs of --churn-tokens A-B, greedy; rids "churn-<n>", never analysed). Each one that finishes frees its KV slots;
SGLang's allocator (0.5.17 mem_cache/allocator/token.py) hands freed slots out again only after every slot ahead
of them in its free list, so on a pool barely larger than what runs (--max-total-tokens) a slot comes back to the
measured request within a few batches, while the coalesced draft-KV writes still hold the finished request's row
for it: the last-write-wins dedupe decides that request's draft KV there.
"""
from __future__ import annotations

import argparse
import glob
import itertools
import json
import random
import re
import sys
import threading
import time
import urllib.request

from greedy import post, prompts, updated   # the same server calls and prompts as the greedy check

THRESHOLD = "speculative_disable_batch_threshold"
OFF_TOKENS = "off_tokens"     # in an --offon JSON: this mode's --off-tokens (not sent to the engine)
REFERENCE, SHIFTED = "always", "always1"
RANGES = ("first", "window", "window_after_first", "after")
CHURN = "churn"               # the rids' mode of the requests run beside (--churn): not analysed


# --- the server ---------------------------------------------------------------------------------
class NotUpdated(RuntimeError):
    pass


def set_state(port: int, values: dict) -> None:
    answer = post(port, "/set_internal_state", {"server_args": values}, 30)
    if not updated(answer):
        raise NotUpdated(f"set_internal_state {json.dumps(values)} not updated: {json.dumps(answer)[:400]}")


def stream(port: int, rid: str, ids: list[int], new_tokens: int, switch_after: int | None = None,
           on_switch=None, timeout: float = 300) -> dict:
    """One streamed greedy request. Once switch_after tokens have arrived, on_switch() runs (the stream waits in
    the socket meanwhile). Its output ids, and at how many tokens the switch was sent."""
    body = {"rid": rid, "input_ids": ids, "stream": True, "sampling_params": {
        "temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out: list[int] = []
    meta: dict = {}
    switched_at = None
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"{rid}: {chunk['error']}")
            meta = chunk.get("meta_info", meta)
            ids_ = chunk.get("output_ids") or []
            n = meta.get("completion_tokens")
            if n is not None and len(ids_) == n:     # cumulative (SGLang's default stream)
                out = list(ids_)
            else:                                    # incremental_streaming_output: deltas
                out.extend(ids_)
            if switch_after is not None and switched_at is None and len(out) >= switch_after:
                switched_at = len(out)
                on_switch()
    return {"output_ids": out, "switched_at": switched_at,
            "accept_length": meta.get("spec_accept_length")}


class ChurnFailed(RuntimeError):
    pass


class Churn:
    """n short greedy requests kept in flight (one thread each) while the block runs; the first error stops them
    and is raised on leaving the block (ChurnFailed)."""

    def __init__(self, port: int, n: int, tokens: tuple[int, int], prompt_len: int, vocab: int, seed: int,
                 tag: str = ""):
        self.port, self.n, self.tokens, self.prompt_len, self.vocab, self.seed, self.tag = (
            port, n, tokens, prompt_len, vocab, seed, tag)
        self.stop, self.errors, self.lock, self.done = threading.Event(), [], threading.Lock(), 0
        self.ids = itertools.count()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> "Churn":
        self.threads = [threading.Thread(target=self._loop, args=(k,), daemon=True) for k in range(self.n)]
        for t in self.threads:
            t.start()
        return self

    def _loop(self, k: int) -> None:
        rnd = random.Random(self.seed * 1000 + k)
        while not self.stop.is_set():
            ids = [rnd.randrange(3, self.vocab) for _ in range(self.prompt_len)]
            try:
                stream(self.port, f"{self.tag}{CHURN}-{next(self.ids)}", ids, rnd.randint(*self.tokens))
                with self.lock:         # (+= on a shared int is not atomic across threads)
                    self.done += 1
            except Exception as e:      # (an HTTP error, a server that refused it): stops every churn thread
                self.errors.append(f"{type(e).__name__}: {e}")
                self.stop.set()

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)
        if self.errors and exc[0] is None:
            raise ChurnFailed(f"churn request failed: {self.errors[0][:300]}")


def run(args, offon: list[tuple[str, dict]]) -> dict:
    """Every prompt through every mode; {mode: [output ids per prompt]}, {rid: switched_at}."""
    batch = prompts(args.prompts, args.prompt_len, args.vocab, args.seed)
    outputs: dict[str, list] = {REFERENCE: []}
    if not args.no_shift:
        outputs[SHIFTED] = []
    for name, _ in offon:
        outputs[f"offon-{name}"] = []
    switched: dict[str, int | None] = {}
    t0 = time.time()
    on = {THRESHOLD: args.maxbs}
    churn = Churn(args.port, args.churn, args.churn_tokens, args.churn_prompt_len, args.vocab, args.seed, args.tag)
    with churn:
        _measure(args, offon, batch, outputs, switched, on, t0)
    return {"outputs": outputs, "switched_at": switched, "wall_s": round(time.time() - t0, 2),
            "churn_requests": churn.done}


def _measure(args, offon: list[tuple[str, dict]], batch: list, outputs: dict, switched: dict, on: dict,
             t0: float) -> None:
    for i, ids in enumerate(batch):
        if args.deadline_s and time.time() - t0 > args.deadline_s:
            print(f"deadline: stopped after {i} of {len(batch)} prompts", flush=True)
            break
        set_state(args.port, on)
        ref = stream(args.port, f"{args.tag}{REFERENCE}-{i}", ids, args.output_len)["output_ids"]
        outputs[REFERENCE].append(ref)
        if not args.no_shift:
            shifted = stream(args.port, f"{args.tag}{SHIFTED}-{i}", ids + ref[:1], args.output_len - 1)
            outputs[SHIFTED].append(shifted["output_ids"])
        for name, switches in offon:
            mode = f"offon-{name}"
            switches = dict(switches)
            off_tokens = switches.pop(OFF_TOKENS, args.off_tokens)
            set_state(args.port, {**switches, THRESHOLD: 0})
            got = stream(args.port, f"{args.tag}{mode}-{i}", ids, args.output_len, off_tokens,
                         lambda: set_state(args.port, on))
            set_state(args.port, {THRESHOLD: 0})
            outputs[mode].append(got["output_ids"])
            switched[f"{mode}-{i}"] = got["switched_at"]
        print(f"prompt {i} done ({time.time() - t0:.1f} s)", flush=True)


# --- the analysis (pure) ------------------------------------------------------------------------
RID = re.compile(r"^(?P<mode>.+)-(?P<i>\d+)$")


def by_request(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(mode, prompt index) -> that request's rows, in the recorder's order."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        m = RID.match(str(r.get("rid")))
        if m:
            out.setdefault((m["mode"], int(m["i"])), []).append(r)
    return out


def on_steps(rows: list[dict]) -> list[dict]:
    return sorted((r for r in rows if (r.get("steps") or 0) > 0 and r.get("seq_len") is not None),
                  key=lambda r: r["seq_len"])


def positions(rows: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in on_steps(rows):
        out.setdefault(r["seq_len"], r)
    return out


def _mean(xs: list) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def range_stats(steps: list[dict], ref: dict[int, dict], shifted: dict[int, dict], lo: int, hi: float) -> dict:
    """The on-steps with lo <= seq_len < hi against the references' verifies at the same seq_len."""
    sel = [r for r in steps if lo <= r["seq_len"] < hi]
    cp = matched = first = from_shifted = 0
    for r in sel:
        other = ref.get(r["seq_len"])
        if other is None:
            other = shifted.get(r["seq_len"])
            from_shifted += other is not None
        if other is None:
            continue
        cp += 1
        matched += r["draft"] == other["draft"]
        first += r["draft"][1:2] == other["draft"][1:2]
    ref_accept = [r["accept"] for table in (ref, shifted) for p, r in table.items()
                  if lo <= p < hi and r.get("accept") is not None]
    return {"steps": len(sel), "counterparts": cp, "counterparts_shifted": from_shifted, "matched": matched,
            "first_matched": first, "accept_sum": sum(r["accept"] or 0 for r in sel),
            "ref_steps": len(ref_accept), "ref_accept_sum": sum(ref_accept)}


def finish(s: dict) -> dict:
    """Counts -> rates (pooled over the requests summed into s)."""
    out = dict(s)
    cp, n = s["counterparts"], s["steps"]
    out["match"] = round(s["matched"] / cp, 4) if cp else None
    out["first_match"] = round(s["first_matched"] / cp, 4) if cp else None
    out["match_all"] = round(s["matched"] / n, 4) if n else None
    out["accept"] = round(s["accept_sum"] / n, 4) if n else None
    out["ref_accept"] = round(s["ref_accept_sum"] / s["ref_steps"], 4) if s["ref_steps"] else None
    return out


def bounds(s: int, window: int) -> dict[str, tuple[int, float]]:
    return {"first": (s, s + 1), "window": (s, s + window), "window_after_first": (s + 1, s + window),
            "after": (s + window, float("inf"))}


def analyse(rows: list[dict], window: int = 96, prompt_len: int | None = None) -> dict:
    """Per offon mode (rids "offon-NAME-i"): per request the switch position and the RANGES' counts, and the
    same pooled over the mode's requests. References: "always-i" (and "always1-i", one position later)."""
    req = by_request(rows)
    refs = {i: positions(r) for (m, i), r in req.items() if m == REFERENCE}
    shifted = {i: positions(r) for (m, i), r in req.items() if m == SHIFTED}
    modes: dict[str, dict] = {}
    for (mode, i), rr in sorted(req.items()):
        if mode in (REFERENCE, SHIFTED, CHURN):
            continue
        steps = on_steps(rr)
        entry = modes.setdefault(mode, {"mode": mode, "requests": [], "no_switch": 0})
        if not steps:
            entry["no_switch"] += 1
            entry["requests"].append({"i": i, "switch_seq_len": None})
            continue
        s = steps[0]["seq_len"]
        one = {"i": i, "switch_seq_len": s, "steps0_rows": sum((r.get("steps") or 0) == 0 for r in rr),
               "has_reference": i in refs}
        if prompt_len is not None:
            one["off_tokens"] = s - prompt_len + 1       # tokens out before the first on-step (the bonus at s)
        for name, (lo, hi) in bounds(s, window).items():
            one[name] = range_stats(steps, refs.get(i, {}), shifted.get(i, {}), lo, hi)
        entry["requests"].append(one)
    for entry in modes.values():
        done = [r for r in entry["requests"] if r["switch_seq_len"] is not None]
        for name in RANGES:
            pooled = {}
            for r in done:
                for k, v in r[name].items():
                    pooled[k] = pooled.get(k, 0) + v
            entry[name] = finish(pooled) if pooled else None
            for r in done:
                r[name] = finish(r[name])
        entry["switch_seq_lens"] = [r["switch_seq_len"] for r in entry["requests"]]
        if prompt_len is not None:
            entry["off_tokens"] = [r.get("off_tokens") for r in entry["requests"]]
    reference = {}
    for name, table in ((REFERENCE, refs), (SHIFTED, shifted)):
        accepts = [r["accept"] for pos in table.values() for r in pos.values() if r.get("accept") is not None]
        reference[name] = {"requests": len(table), "steps": len(accepts), "accept": _mean(accepts)}
    both = [(a, shifted[i][p]) for i, pos in refs.items() for p, a in pos.items() if p in shifted.get(i, {})]
    reference["overlap"] = {"steps": len(both), "matched": sum(a["draft"] == b["draft"] for a, b in both)}
    return {"window": window, "modes": modes, "reference": reference}


def greedy(outputs: dict[str, list]) -> dict:
    """Every mode's outputs against `always`'s, prompt by prompt (always1: against always's from token 1)."""
    ref = outputs.get(REFERENCE, [])
    out = {}
    for mode, outs in outputs.items():
        if mode == REFERENCE:
            continue
        bad, first = 0, None
        for i, got in enumerate(outs):
            want = ref[i][1:] if mode == SHIFTED else ref[i]
            if got != want:
                bad += 1
                if first is None:
                    pos = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    first = {"prompt": i, "position": pos, "got": got[pos:pos + 4], "expected": want[pos:pos + 4]}
        out[mode] = {"prompts": len(outs), "mismatching": bad, "first_mismatch": first}
    return out


def read_rows(prefix: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(f"{prefix}.*.jsonl")):
        with open(path) as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def _fmt(x, digits=3) -> str:
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def table(result: dict, eq: dict | None = None) -> str:
    head = (f"{'mode':<18} {'reqs':>4} {'win match':>9} {'(cp/n)':>9} {'ex-1st':>7} {'1st':>5} {'after':>6} "
            f"{'acc win':>7} {'ref':>5} {'acc aft':>7} {'ref':>5} {'greedy':>7}")
    lines = [head]
    for mode, m in result["modes"].items():
        w, x, a, f = m["window"] or {}, m["window_after_first"] or {}, m["after"] or {}, m["first"] or {}
        g = (eq or {}).get(mode)
        lines.append(f"{mode:<18} {len(m['requests']):>4} {_fmt(w.get('match')):>9} "
                     f"{str(w.get('counterparts', '-')) + '/' + str(w.get('steps', '-')):>9} "
                     f"{_fmt(x.get('match')):>7} {_fmt(f.get('match'), 2):>5} {_fmt(a.get('match')):>6} "
                     f"{_fmt(w.get('accept'), 2):>7} {_fmt(w.get('ref_accept'), 2):>5} "
                     f"{_fmt(a.get('accept'), 2):>7} {_fmt(a.get('ref_accept'), 2):>5} "
                     f"{('ok' if not g['mismatching'] else str(g['mismatching']) + ' bad') if g else '-':>7}")
    for mode, m in result["modes"].items():     # a "0.000" that measured nothing must not read as a failure
        x = m["window_after_first"] or {}
        if x.get("steps") and 10 * x["counterparts"] < x["steps"]:     # under a tenth
            lines.append(f"NOTE {mode}: proposals compared at {x['counterparts']} of its {x['steps']} on-steps after "
                         f"the first (the references verified other positions): identity not measured, compare "
                         f"the accept columns")
    ref = result["reference"]
    lines.append(f"reference: always {ref[REFERENCE]['steps']} steps accept {_fmt(ref[REFERENCE]['accept'], 2)}; "
                 f"always1 {ref[SHIFTED]['steps']} steps accept {_fmt(ref[SHIFTED]['accept'], 2)}; "
                 f"same seq_len in both: {ref['overlap']['matched']}/{ref['overlap']['steps']} identical")
    return "\n".join(lines)


def span(text: str) -> tuple[int, int]:
    """'A-B' (1 <= A <= B) for argparse."""
    a, sep, b = text.partition("-")
    if not (sep and a.isdigit() and b.isdigit() and 1 <= int(a) <= int(b)):
        raise argparse.ArgumentTypeError(f"expected A-B with 1 <= A <= B, got {text!r}")
    return int(a), int(b)


def parse_offon(specs: list[str]) -> list[tuple[str, dict]]:
    out = []
    for spec in specs:
        name, sep, js = spec.partition("=")
        if not sep or not name:
            raise SystemExit(f"ERROR --offon {spec!r}: expected NAME=JSON")
        values = json.loads(js)
        if not isinstance(values, dict):
            raise SystemExit(f"ERROR --offon {spec!r}: the JSON must be an object")
        off = values.get(OFF_TOKENS)
        if off is not None and (not isinstance(off, int) or isinstance(off, bool) or off < 1):
            raise SystemExit(f"ERROR --offon {spec!r}: {OFF_TOKENS} must be an integer >= 1")
        out.append((name, values))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--pp", required=True, help="the recorder's prefix (SPEC_PROPOSALS): reads PREFIX.*.jsonl")
    ap.add_argument("--maxbs", type=int, default=128, help="the threshold for 'on' (every batch speculates)")
    ap.add_argument("--offon", action="append", default=[], metavar="NAME=JSON")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--prompt-len", type=int, default=160)
    ap.add_argument("--output-len", type=int, default=320)
    ap.add_argument("--off-tokens", type=int, default=128)
    ap.add_argument("--window", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--no-shift", action="store_true", help="no always1 reference (one position later)")
    ap.add_argument("--deadline-s", type=float, default=0, help="start no prompt after this many seconds")
    ap.add_argument("--analyse-only", action="store_true", help="no requests: the rows already recorded")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", default="", help="a prefix for this run's rids: several runs share one recorder file")
    ap.add_argument("--churn", type=int, default=0, help="requests kept in flight beside the measured one")
    ap.add_argument("--churn-tokens", type=span, default=(2, 12), metavar="A-B", help="their output lengths")
    ap.add_argument("--churn-prompt-len", type=int, default=16)
    args = ap.parse_args()
    offon = parse_offon(args.offon)
    ran = None
    if not args.analyse_only:
        try:
            ran = run(args, offon)
        except (NotUpdated, ChurnFailed) as e:
            print(f"ERROR {e}", flush=True)
            raise SystemExit(2)
        time.sleep(0.5)                      # the last verify's row is written before its tokens are sent
    rows = [{**r, "rid": str(r.get("rid"))[len(args.tag):]} for r in read_rows(args.pp)
            if str(r.get("rid")).startswith(args.tag)]
    if args.tag == "":                       # untagged: leave out the rows of tagged runs (rids "<tag>:...")
        rows = [r for r in rows if ":" not in r["rid"]]
    result = analyse(rows, args.window, args.prompt_len)
    eq = greedy(ran["outputs"]) if ran else None
    for mode, m in result["modes"].items():
        line = {"mode": mode, "requests": len(m["requests"]), "no_switch": m["no_switch"],
                "off_tokens": m.get("off_tokens"), **{k: m[k] for k in RANGES},
                "greedy": eq.get(mode) if eq else None}
        print("CONSIST " + json.dumps(line), flush=True)
    print("CONSIST " + json.dumps({"mode": "reference", **result["reference"],
                                   "greedy": eq.get(SHIFTED) if eq else None}), flush=True)
    print(table(result, eq), flush=True)
    config = {k: getattr(args, k) for k in ("maxbs", "prompts", "prompt_len", "output_len", "off_tokens", "window",
                                            "seed", "no_shift", "churn", "churn_tokens", "churn_prompt_len")}
    if ran and args.churn:
        print(f"churn: {ran['churn_requests']} requests finished beside the measured ones", flush=True)
    with open(args.out, "w") as f:
        json.dump({"config": config, "offon": dict(offon), **result, "greedy": eq,
                   "switched_at_tokens": ran["switched_at"] if ran else None,
                   "wall_s": ran["wall_s"] if ran else None,
                   "churn_requests": ran["churn_requests"] if ran else None}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
