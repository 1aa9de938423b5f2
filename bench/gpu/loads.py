"""The project's three load shapes against a running SGLang server (one JSON line per measurement).

    python3 bench/gpu/loads.py --port 30000 --label off --shape steady --levels 1,16,48,128 --out r.jsonl
    python3 bench/gpu/loads.py --port 30000 --label off --shape closed --levels 16,48,128 --seconds 12 --out r.jsonl
    python3 bench/gpu/loads.py --port 30000 --label off --shape open --rates 4,12,24 --seconds 15 \
        --tokenizer DIR --out r.jsonl
    python3 bench/gpu/loads.py --port 30000 --shape closed --configs 'synced={"spec_controller_sync_draft": true};
        lean={"spec_controller_sync_draft": false, "spec_controller_lean_prefill": true}' --out r.jsonl
    python3 bench/gpu/loads.py --show r.jsonl              # the table (median of repeats, spread), then each label / nospec

--configs: several set_internal_state bodies (or '@threshold pin N' / '@policy set bandit && threshold unpin':
specctl commands to the daemon at --socket, run in order) measured in one engine, interleaved inside each level (order reversed in odd repeats and rotated every two, so
drift between runs does not decide a ranking); --flush empties the radix cache before each measurement (the
seeded prompts repeat across configs and repeats).

steady: C requests start together (prompt 16, output --steady-len tokens): decode at batch size C
  as one batched /generate, which SGLang admits in one go (--no-steady-batched: C separate requests).
closed: C clients, each re-issuing at once, prompt 32-256 and output 64-512 tokens (uniform, seeded;
  --logprob-share S: that share asks for logprobs; --grammar-share S: that share carries the regex
  --grammar-regex (sampling_params "regex"; the engines need a grammar backend: common.sh GRAMMAR_BACKEND));
  throughput = output tokens generated inside [warm-up, warm-up + seconds], each request's tokens spread
  evenly over its life (non-streaming requests: the window edges are estimated, the same for every engine).
open: `sglang.bench_serving --request-rate R` (Poisson), prompts ~100-512 and outputs ~77-384 tokens
  (random-ids, range ratio 0.2), --seconds x R requests; output throughput, median TPOT, median E2E.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cpusets
import traffic_table
from greedy import post, updated
from jsonl import emit, rows as read_rows
from proccpu import parse_groups, snapshot, usage


# The crafted model's tokenizer (mkmodel.py) is word-level, "w3" ... "w31999", so a regex over digits and
# spaces ("[0-9 ]{8,400}") matches no token at all: the regex is over the concatenated token strings. This
# one lets any token through but every fourth, which must be one of w10 ... w19 (none is a prefix of another
# token the regex allows), and never ends: the request runs its max_new_tokens as the others do.
GRAMMAR_REGEX = "((w[0-9]+){3}w1[0-9])+"


def body(ids: list[int], n: int, logprob: bool = False, regex: str | None = None) -> dict:
    out = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    if logprob:              # output logprobs
        out["return_logprob"] = True
    if regex is not None:    # grammar-constrained (SGLang's sampling_params "regex")
        out["sampling_params"]["regex"] = regex
    return out


def steady(port: int, c: int, output_len: int, seed: int, batched: bool = False) -> dict:
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(3, 32000) for _ in range(16)] for _ in range(c)]
    if batched:
        return steady_batched(port, prompts, output_len)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(c) as pool:
        done = list(pool.map(lambda ids: (post(port, "/generate", body(ids, output_len)), time.perf_counter()),
                             prompts))
    wall = time.perf_counter() - t0
    ends = [t for _, t in done]
    # all C decoding together end within a step or two; prefills spread between decode steps (12-03i: one run
    # at 128 decoded at a mean batch of 94) end apart, and that run is not steady decode (traffic_table flags it)
    return {"tok_s": round(sum(len(o["output_ids"]) for o, _ in done) / wall, 1),
            "end_spread_ms": round((max(ends) - min(ends)) * 1e3, 1), "wall_ms": round(wall * 1e3, 1)}


def steady_batched(port: int, prompts: list[list[int]], output_len: int) -> dict:
    """The C prompts as one batched /generate: pre-tokenized, SGLang's tokenizer manager hands them to the scheduler
    as one message (0.5.17 _handle_batch_request -> _send_batch_request), so they are admitted together. C separate
    HTTP requests reached it over up to ~70 decode steps in 1 run of ~6 (h100-2026-12-06, -06b: mean batch 92-105 of
    128), which read that pair 0.78-0.82 or 1.2 either way. The end spread is the spread of SGLang's e2e_latency."""
    t0 = time.perf_counter()
    outs = post(port, "/generate", {"input_ids": prompts, "sampling_params": body([], output_len)["sampling_params"]})
    wall = time.perf_counter() - t0
    if not isinstance(outs, list) or len(outs) != len(prompts):
        raise ValueError(f"a batched /generate of {len(prompts)} prompts answered {type(outs).__name__} "
                         f"{len(outs) if isinstance(outs, list) else ''}".rstrip())
    e2e = [o.get("meta_info", {}).get("e2e_latency") for o in outs]
    spread = round((max(e2e) - min(e2e)) * 1e3, 1) if all(isinstance(x, (int, float)) for x in e2e) else None
    return {"tok_s": round(sum(len(o["output_ids"]) for o in outs) / wall, 1), "end_spread_ms": spread,
            "wall_ms": round(wall * 1e3, 1), "batched": True}


def closed(port: int, c: int, seconds: float, warmup: float, seed: int, logprob_share: float = 0.0,
           grammar_share: float = 0.0, regex: str = GRAMMAR_REGEX) -> dict:
    """C clients re-issuing at once; tokens inside the window, spread over each request's life.
    logprob_share / grammar_share: that share of the requests asks for logprobs / carries `regex` (each its
    own random stream: the prompts and lengths are those of a run without)."""
    stop = time.perf_counter() + warmup + seconds
    w0, w1 = stop - seconds, stop
    done: list[tuple[float, float, int]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        rnd, coin = random.Random(seed * 1000 + i), random.Random(seed * 1000 + i + 7_000_000)
        grammar_coin = random.Random(seed * 1000 + i + 9_000_000)
        while time.perf_counter() < stop:
            ids = [rnd.randrange(3, 32000) for _ in range(rnd.randint(32, 256))]
            n = rnd.randint(64, 512)
            constrained = grammar_coin.random() < grammar_share
            t0 = time.perf_counter()
            out = post(port, "/generate", body(ids, n, coin.random() < logprob_share, regex if constrained else None))
            with lock:
                done.append((t0, time.perf_counter(), len(out["output_ids"])))

    with ThreadPoolExecutor(c) as pool:
        list(pool.map(client, range(c)))
    inside = sum(n * max(0.0, min(e, w1) - max(s, w0)) / (e - s) for s, e, n in done if e > s)
    return {"tok_s": round(inside / seconds, 1), "requests": len(done)}


def open_loop(port: int, rate: float, seconds: float, tokenizer: str, seed: int) -> dict:
    from sglang.benchmark.serving import cli_main      # imported by measure() before its clock starts
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as tmp:
        path = tmp.name
    sys.argv = ["bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(port),
                "--dataset-name", "random-ids", "--random-input-len", "512", "--random-output-len", "384",
                "--random-range-ratio", "0.2", "--num-prompts", str(max(8, int(rate * seconds))),
                "--request-rate", str(rate), "--tokenizer", tokenizer, "--model", tokenizer,
                "--output-file", path, "--disable-tqdm", "--seed", str(seed)]
    try:
        cli_main()
        with open(path) as f:
            res = json.loads(f.read().strip().splitlines()[-1])
    finally:
        os.unlink(path)
    return {"tok_s": round(res["output_throughput"], 1), "tpot_ms": round(res["median_tpot_ms"], 2),
            "e2e_ms": round(res["median_e2e_latency_ms"], 1), "tpot_mean_ms": round(res["mean_tpot_ms"], 2),
            "e2e_mean_ms": round(res["mean_e2e_latency_ms"], 1), "completed": res.get("completed")}


def apply(args: argparse.Namespace, state: dict | str, port: int | None = None) -> None:
    """A set_internal_state body (to port, else --port), or specctl command lines for the daemon ("policy set
    fixed && threshold pin 0")."""
    if isinstance(state, str):
        import subprocess
        for command in state.split("&&"):
            done = subprocess.run([sys.executable, "-m", "controller.cli", "--socket", args.socket, *command.split()],
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"specctl {command.strip()} refused: {(done.stderr or done.stdout).strip()}")
        return
    answer = post(port or args.port, "/set_internal_state", {"server_args": state}, 30)
    if not updated(answer):
        raise SystemExit(f"set_internal_state {state} refused: {answer}")


def flush(port: int) -> bool:
    """Empty the radix cache (SGLang answers in plain text; it refuses while requests still run)."""
    import urllib.request
    for _ in range(10):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/flush_cache", timeout=10) as resp:
                if resp.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.3)
    return False


def parse_configs(text: str | None, label: str | None, port: int | None,
                  engines: str | None = None) -> list[tuple[str, dict | str | None, int | None]]:
    """(label, state to apply or None, port): --configs in one engine, or --engines 'a=PORT,b=PORT'
    (several engines resident on the machine, measured alternately with the same seeds); an engine entry
    'label=PORT:JSON' (entries then separated by ';') is that engine switched to the set_internal_state
    body JSON before each of its runs: two states of one engine and a third engine inside one rotation, so
    that drift of the host between phases cannot decide which state looks faster; 'label=PORT:@threshold pin 128'
    is that engine's daemon told so (specctl at --socket) instead: always-on and the bandit beside no-spec."""
    if engines:
        out = []
        for entry in engines.split(";" if ";" in engines else ","):
            name, _, rest = entry.strip().partition("=")
            port, _, state = rest.partition(":")
            state = state.strip()
            out.append((name.strip(), None if not state else state[1:].strip() if state.startswith("@")
                        else json.loads(state), int(port)))
        return out
    if not text:
        return [(label, None, port)]
    out = []
    for part in text.split(";"):
        name, _, body = part.strip().partition("=")
        body = body.strip()
        out.append((name.strip(), body[1:].strip() if body.startswith("@") else json.loads(body), port))
    return out


def show(path: str) -> None:
    """The table per label (median of repeats, spread), then each label against `nospec` of the same file:
    the ratio of medians and each repeat's own pair (same seed, nearest in time), whose spread says how far
    one run's noise moves the verdict."""
    rows = read_rows(path)
    groups = traffic_table.grouped(rows)
    print("| shape | level | label | tok/s (median) | spread | repeats | TPOT ms | E2E ms |")
    print("|---|---|---|---|---|---|---|---|")
    for (shape, level, label), rs in traffic_table.in_order(groups):
        t = [r["tok_s"] for r in rs]
        tpot, e2e = traffic_table.med(rs, "tpot_ms"), traffic_table.med(rs, "e2e_ms")
        print(f"| {shape} | {level} | {label} | {statistics.median(t):,.0f} | {min(t):,.0f}-{max(t):,.0f} | {len(t)} "
              f"| {'-' if tpot is None else tpot} | {'-' if e2e is None else e2e} |")
    table(ratio_lines(groups), "shape | level | label / nospec | tok/s ratio of medians | per pair | "
          "median of pairs [interval, coverage] | TPOT ratio | E2E ratio")
    table(scheduler_lines(groups), "shape | level | label | scheduler CPU s | preempted | minor faults",
          "  (medians over the runs, the serving engine's scheduler process: its main thread's involuntary switches)")


def table(rows: list[str], header: str, note: str = "") -> None:
    """A markdown table after a blank line (none without rows)."""
    if rows:
        print(f"\n| {header} |{note}")
        print("|---" * (header.count("|") + 1) + "|")
        print("\n".join(rows))


SCHEDULER = "sglang::schedul"    # SGLang's scheduler process name as /proc/PID/stat has it (15 characters)


def serving_group(row: dict) -> str | None:
    """The process group (run_pair's LOAD_CPU_GROUPS label) of the engine a row measured: no-spec rows are the
    `nospec` group's, every other label the other group's (the daemon's engine or the A/A's twin)."""
    named = list(row.get("cpu_s", {}).get("preempted", {}))
    if row["label"].startswith("nospec"):
        return "nospec" if "nospec" in named else None
    others = [g for g in named if g != "nospec"]
    return others[0] if len(others) == 1 else None


def scheduler_lines(groups: dict[tuple, list[dict]]) -> list[str]:
    """One markdown row per (shape, level, label) whose runs counted their processes (proccpu: preempted, minflt):
    the serving engine's scheduler CPU seconds, main-thread preemptions and minor faults, medians over the runs."""
    out = []
    for (shape, level, label), rs in traffic_table.in_order(groups):
        vals = []
        for r in rs:
            group, cpu = serving_group(r), r.get("cpu_s", {})
            if group is None:
                continue
            vals.append([sum(v for comm, v in (cpu.get(what, {}) if what else cpu).get(group, {}).items()
                             if comm.startswith(SCHEDULER)) for what in (None, "preempted", "minflt")])
        if vals:
            mid = [statistics.median(v[i] for v in vals) for i in range(3)]
            out.append(f"| {shape} | {level} | {label} | {mid[0]:.2f} | {mid[1]:,.0f} | {mid[2]:,.0f} |")
    return out


def pairs_median(ratios: list[float]) -> str:
    """The pairs' median and its distribution-free interval (traffic_table.median_interval): what a verdict such as
    ">= 0.97" can rest on, given how many pairs there are."""
    if not ratios:
        return "-"
    mid, lo, hi, cover = traffic_table.median_interval(ratios)
    return f"{mid:.3f} [{lo:.3f}-{hi:.3f}, {cover:.0%}]"


def ratio_lines(groups: dict[tuple, list[dict]]) -> list[str]:
    """One markdown row per (shape, level, label) with no-spec runs beside it: tok/s, TPOT and E2E as ratios of
    medians against the no-spec runs it pairs with (traffic_table.beside, as offpath-traffic.json records them),
    and each repeat's own tok/s pair."""
    out = []
    for key, rs in traffic_table.in_order(groups):
        shape, level, label = key
        if label == "nospec":      # (nospec-spin, nospec-gcf: against nospec, what the phase did to that engine)
            continue
        pairs, base = traffic_table.beside(groups, key)
        if not base:
            continue

        def of_medians(name: str) -> str:
            a, b = traffic_table.med(rs, name), traffic_table.med(base, name)
            return f"{a / b:.3f}" if a and b else "-"
        per_pair = traffic_table.paired_ratios(pairs, ["tok_s"])["pair_ratios_tok_s"]
        out.append(f"| {shape} | {level} | {label} | {of_medians('tok_s')} | {', '.join(f'{x:.3f}' for x in per_pair) or '-'} "
                   f"| {pairs_median(per_pair)} | {of_medians('tpot_ms')} | {of_medians('e2e_ms')} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int)
    ap.add_argument("--label")
    ap.add_argument("--shape", choices=["steady", "closed", "open"])
    ap.add_argument("--levels", default="1,16,48,128")
    ap.add_argument("--rates", default="4,12,24")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--steady-len", type=int, default=256)
    # batched since h100-2026-12-06c: every pair held the whole batch (0.971-0.993 against 0.82-1.21 one by one)
    ap.add_argument("--steady-batched", action=argparse.BooleanOptionalAction,
                    default=os.environ.get("LOAD_STEADY_BATCHED", "1") != "0",
                    help="steady: the C prompts as one batched /generate, admitted together (default: yes unless "
                    "$LOAD_STEADY_BATCHED=0; --no-steady-batched: C separate requests)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--repeat-index", type=int, default=0, help="seed offset when repeats run in separate calls")
    ap.add_argument("--tokenizer")
    ap.add_argument("--configs", help="label=JSON;label=JSON: set_internal_state bodies interleaved per level")
    ap.add_argument("--flush", action="store_true", help="GET /flush_cache before each measurement")
    ap.add_argument("--logprob-share", type=float, default=0.0,
                    help="closed: this share of the requests asks for logprobs (rows: shape closed-logprobS)")
    ap.add_argument("--grammar-share", type=float, default=0.0,
                    help="closed: this share of the requests carries --grammar-regex (rows: shape closed-grammarS)")
    ap.add_argument("--grammar-regex", default=GRAMMAR_REGEX)
    ap.add_argument("--engines", help="label=PORT,label=PORT: resident engines measured alternately per level "
                    "(label=PORT:JSON;...: that engine switched to the set_internal_state body first)")
    ap.add_argument("--socket", help="the daemon's control socket, for configs written '@threshold pin N'")
    ap.add_argument("--cpu-groups", default=os.environ.get("LOAD_CPU_GROUPS"),
                    help="label=PGID,...: each row's cpu_s, those process groups' CPU seconds per process name "
                    "during the run, and the host's busy share (default $LOAD_CPU_GROUPS)")
    ap.add_argument("--b-first", action="store_true", default=os.environ.get("LOAD_B_FIRST") == "1",
                    help="the engine beside no-spec was started first (run_pair's B_FIRST=1, $LOAD_B_FIRST): each row "
                    "says so (b_first), for host_adjusted.py's start-order term")
    ap.add_argument("--pin-rotate", default=os.environ.get("LOAD_PIN_ROTATE"),
                    help="label=PGID:CPULIST;...: before each repeat, those process groups pinned to the core sets "
                    "shifted by the repeat (cpusets.rotated; a multiple of 4 repeats separates core set from order), "
                    "back to repeat 0's at the end; each row's `cpus_by_group` says where those groups ran "
                    "(default $LOAD_PIN_ROTATE)")
    ap.add_argument("--out")
    ap.add_argument("--show", metavar="FILE")
    args = ap.parse_args()
    if args.show:
        if not os.path.isfile(args.show):     # (run_pair's call whose phases all skipped writes no rows)
            sys.exit(f"loads.py --show: {args.show}: no such file (no run wrote a row)")
        return show(args.show)
    levels = [float(x) for x in (args.rates if args.shape == "open" else args.levels).split(",")]
    configs = parse_configs(args.configs, args.label, args.port, args.engines)
    if not args.socket and any(isinstance(state, str) for _, state, _ in configs):
        sys.exit("loads.py: a state written '@...' is specctl commands to a daemon: give its --socket")
    try:
        args.cpu_groups = parse_groups(args.cpu_groups)
        pins = cpusets.parse_rotation(args.pin_rotate)
    except ValueError as e:
        sys.exit(str(e))
    if args.shape == "open":
        import sglang.benchmark.serving  # noqa: F401  (seconds of imports, outside every run's clock)
    try:
        for level in levels:                  # a level's repeats and configs complete before the next level
            for rep in range(args.repeats):
                cpus = repin(pins, rep + args.repeat_index) if pins else {}
                for label, state, port in run_order(configs, rep + args.repeat_index):
                    if state is not None:
                        apply(args, state, port)
                    if args.flush and not flush(port):
                        print("LOAD flush refused", flush=True)
                    measure(args, label, level, rep, port, cpus)
    finally:
        if pins:          # back to the sets as given: later phases (profile, checks) run where the script said
            repin(pins, 0)


def repin(pins: list, rep: int) -> dict[str, str]:
    """Repeat rep's core sets applied (cpusets.rotated); group label -> "cpu,cpu,..." for the rows, only for groups
    pinned whole. A failure says so in one LOAD line and the runs go on (on the pins as they are)."""
    out = {}
    for label, pgid, cpus in cpusets.rotated(pins, rep):
        listed = ",".join(map(str, cpus))
        try:
            pinned, refused = cpusets.pin_group(pgid, cpus)
            problem = None if pinned and not refused else f"{pinned} threads pinned, {refused} refused"
        except (OSError, ValueError) as e:
            problem = f"{type(e).__name__}: {e}"
        if problem is None:
            out[label] = listed
            print(f"LOAD pinned {label} ({pinned} threads) on {listed}", flush=True)
        else:
            print(f"LOAD pin failed: {label} (group {pgid}) on {listed}: {problem}", flush=True)
    return out


def run_order(configs: list, rep: int) -> list:
    """The configs' order in repeat rep: rotated by rep // 2, reversed in odd repeats, so that each pair of repeats
    runs every config both before and after every other one (12-03i: with rotation alone one state of three always
    ran right after another, and an order effect could not be told from theirs). Two configs: a b, b a, b a, a b."""
    k = (rep // 2) % len(configs)
    order = configs[k:] + configs[:k]
    return order[::-1] if rep % 2 else order


def measure(args: argparse.Namespace, label: str, level: float, rep: int, port: int,
            cpus_by_group: dict[str, str]) -> None:
    seed = 100 * (rep + args.repeat_index) + int(level)
    cpu0 = snapshot(args.cpu_groups)
    t0, m0 = time.time(), time.monotonic()
    try:
        if args.shape == "steady":
            res = steady(port, int(level), args.steady_len, seed, args.steady_batched)
        elif args.shape == "closed":
            res = closed(port, int(level), args.seconds, args.warmup, seed, args.logprob_share, args.grammar_share,
                         args.grammar_regex)
        else:
            res = open_loop(port, level, args.seconds, args.tokenizer, seed)
    except Exception as e:          # one failed level must not lose the others
        res = {"error": f"{type(e).__name__}: {e}"}
    cpu = usage(cpu0, snapshot(args.cpu_groups))
    shape = args.shape + (f"-logprob{args.logprob_share:g}" if args.logprob_share else "") + \
        (f"-grammar{args.grammar_share:g}" if args.grammar_share else "")
    row = {"label": label, "shape": shape, "level": level if args.shape == "open" else int(level),
           "repeat": rep + args.repeat_index, "t_start": t0, "t_end": time.time(),
           "mono_start": m0, "mono_end": time.monotonic(), **({"engines_resident": True} if args.engines else {}),
           **({"b_first": True} if args.b_first else {}), **pool_tokens(), "cpu_s": cpu,
           **({"cpus_by_group": cpus_by_group} if cpus_by_group else {}), **res}
    emit("LOAD", row, args.out)


def pool_tokens(env: dict | None = None) -> dict:
    """{"pool_tokens": N} where both engines' KV pools were capped at N (run_pair's POOL_TOKENS; from 12-06 on), else
    {}: the pools as SGLang sized them (the engine started second's larger). Read back by host_adjusted.py."""
    raw = (os.environ if env is None else env).get("POOL_TOKENS", "0")
    return {"pool_tokens": int(raw)} if raw.isdigit() and int(raw) > 0 else {}


if __name__ == "__main__":
    main()
