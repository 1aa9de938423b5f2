"""Bench-only SGLang plugin: the scheduler's timeline, iteration by iteration, in any engine (with or
without speculation), for issue 12's "where does the time go under arrivals".

Installed by bench/gpu/common.sh's `timeline_plugin` (a module and a dist-info with an
`sglang.srt.plugins` entry point in /tmp/site) and active only where SPEC_TIMELINE=PREFIX is set. Per
scheduler iteration it records, on the scheduler thread: the CPU span of run_batch (launch), of
process_batch_result, of get_next_batch_to_run and process_input_requests, and two CUDA events on the
forward stream around each run_batch, so that the GPU span of every batch and the GPU's idle gap before
it (the overlap broken or kept) can be read afterwards without a synchronisation on the hot path.
Rows go to PREFIX.PID.jsonl every 256 batches and whenever the scheduler finds nothing to run (events
already completed only):
  ["B", kind, bs, extend_tokens, cpu_t0_ns, cpu_t1_ns, gpu_t0_ms, gpu_t1_ms, span_ms, gap_ms, on_cpu_ns]   one batch:
  its events on one axis from the first (float32 milliseconds: coarse after minutes), and, exact, its span
  and the gap since the previous batch's end. The start event is recorded when run_batch is entered, before
  the launch: a launch slow enough to run the stream dry shows in the span, not in the gap.
  ["P"|"N"|"R", kind, cpu_t0_ns, cpu_t1_ns]   process_batch_result / get_next_batch_to_run / process_input_requests
  ["T"|"F", kind, cpu_t0_ns, cpu_t1_ns, batch, on_cpu_ns]   inside run_batch number `batch` (of that kind): the
  target worker's forward / the target model runner's (INNER)
on_cpu_ns: the scheduler thread's own CPU time in that span (time.thread_time_ns); the rest of the wall span it
waited (off the CPU: descheduled, a blocking call). 12-03f: the closed loop's throughput followed the extend
runner's wall time run by run (correlation -0.98), which moved 7-15 ms within one engine.
CPU times are time.perf_counter_ns() (CLOCK_MONOTONIC: comparable with time.monotonic() in the load
generator). bench/gpu/timeline_summary.py turns them into a table.
Sync hunting: while the file SPEC_SYNC_DEBUG names exists (checked at each flush), torch's sync debug mode
is on in that scheduler process: every CUDA-synchronising torch call (item, a blocking copy, nonzero...) is
printed to the engine's log once per call site, with its Python stack ("SYNC ..." lines); off again once
the file is gone.
A sync on the scheduler's hot path stalls the overlap: the CPU cannot launch the next batch early.
CPU hunting: while the file SPEC_CPROFILE names exists, cProfile runs around every decode batch's run_batch in that
scheduler process (SPEC_CPROFILE_KINDS=decode,extend: those kinds instead) (only there: the launch, the plugin's and spec-v2's Python included); once the file is gone, the
next flush prints the top functions by own time to the engine's log ("CPROFILE ..." lines) and saves the stats to
PREFIX.PID.prof. cProfile slows Python down: compare the engines' shares, not its absolute times.
Garbage collection: every collection in the scheduler process is a row
  ["C", kind, generation, cpu_t0_ns, cpu_t1_ns]   kind: the batch run_batch was launching, or "-" outside a launch
(12-03f: an extend's model runner took ~2.4 ms longer in the speculative engine with no code path to explain it;
its larger heap is one suspect). While the file SPEC_GC_FREEZE names exists (checked at each flush) the process's
objects are frozen out of collection (gc.freeze(), "GCFREEZE pid ..." printed); unfrozen once it is gone.
The CUDA caching allocator's counters at every flush: ["M", cpu_ns, alloc_retries, device_allocs, device_frees]
(cumulative; a cudaMalloc / cudaFree on the scheduler thread is a hidden stall that sync debug mode does not see).
CPU dose: while the JSON file SPEC_SPIN names exists, {"ENGINE": {"decode": US, "extend": US}} (ENGINE: the basename
of this engine's SPEC_TIMELINE prefix, nospec / off), every run_batch of that kind first spins US microseconds on
the scheduler thread (holding the GIL, as Python work does) before it launches anything ("SPIN pid ..." printed at
each change). Giving the no-spec engine the off engine's extra decode-launch CPU says whether that CPU is what
costs the off engine its tok/s under arrivals (12-04f: ~0.6 ms more a decode launch, closed 128 at ~0.95).
Process speed: while the file SPEC_CALIBRATE names exists, each look at the flags times a fixed pure-Python loop
("CALIBRATE pid ... us {variants}" and a "PROC pid {...}" report of threads, GC, hooks printed; procspeed.py): the
same loop slower in one engine means its whole process runs slower (12-03g: either engine ~1.6x slower in about half the looks).
"""
from __future__ import annotations

import cProfile
import gc
import io
import json
import os
import pstats
import sys
import time
import traceback
import warnings

import procspeed                        # beside this file: /tmp/site (common.sh) or bench/gpu (tests)

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
# CPU spans inside run_batch (the launch), both engines: the target worker's forward (batch preparation, the
# model runner, the sample's launch) and the model runner's forward alone; what the launch spends outside
# them is the speculative worker's and the plugin's own
# (the target's only: the draft worker and the draft runner are a TpModelWorker / ModelRunner too)
INNER = {"T": "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
         "F": "sglang.srt.model_executor.model_runner.ModelRunner.forward"}
FLUSH_EVERY = 256


def kind(batch) -> str:
    if batch is None:
        return "none"
    mode = batch.forward_mode
    if mode.is_idle():
        return "idle"
    if getattr(mode, "is_mixed", lambda: False)():
        return "mixed"
    return "extend" if mode.is_extend() else "decode"


class Timeline:
    def __init__(self, prefix: str):
        self.path = f"{prefix}.{os.getpid()}.jsonl"
        self.pending: list[list] = []     # batch rows whose events may not have completed yet
        self.rows: list[list] = []
        self.ref = None                   # the first start event: the GPU axis's zero
        self.last_end = None              # the previous batch's end event (its gap to the next start)
        self.sync_debug = False           # torch's sync debug mode is on (SPEC_SYNC_DEBUG)
        self.batches = 0                  # run_batch calls so far: the inner spans' batch number
        self.launching: tuple[str, int] | None = None   # (kind, number) of the batch run_batch is launching
        self.profile: cProfile.Profile | None = None     # on while SPEC_CPROFILE's file exists
        self.profiled_kinds = os.environ.get("SPEC_CPROFILE_KINDS", "decode").split(",")
        self.prefix = prefix
        self.gc_started: int | None = None   # the running collection's start (perf_counter_ns)
        self.gc_frozen = False               # gc.freeze() in force (SPEC_GC_FREEZE)
        self.flags_checked = 0               # perf_counter_ns of the last look at the flag files
        self.gc_watched = False              # on_gc registered (at the first batch: in a scheduler process)
        self.spin_ns: dict[str, int] = {}    # batch kind -> CPU spun before its launch (SPEC_SPIN)

    def on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks: one "C" row per collection, filed under the batch being launched (or "-")."""
        if phase == "start":
            self.gc_started = time.perf_counter_ns()
        elif self.gc_started is not None:
            where = self.launching[0] if self.launching is not None else "-"
            self.rows.append(["C", where, info.get("generation"), self.gc_started, time.perf_counter_ns()])
            self.gc_started = None

    def run_batch(self, original, sched, batch, *args, **kwargs):
        import torch
        if not self.gc_watched:          # here, not at load: plugins load in the HTTP process too, which never flushes
            gc.callbacks.append(self.on_gc)
            self.gc_watched = True
        stream = getattr(sched, "forward_stream", None) or torch.cuda.current_stream()
        k, bs = kind(batch), len(getattr(batch, "reqs", []) or [])
        ext = int(getattr(batch, "extend_num_tokens", 0) or 0) if k in ("extend", "mixed") else 0
        e0 = torch.cuda.Event(enable_timing=True)
        e0.record(stream)
        if self.ref is None:
            self.ref = e0
        self.batches += 1
        self.launching = (k, self.batches)
        profile = self.profile if k in self.profiled_kinds else None
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        if k in self.spin_ns:
            spin(self.spin_ns[k])
        if profile is not None:
            profile.enable()
        try:
            result = original(sched, batch, *args, **kwargs)
        finally:
            self.launching = None
            if profile is not None:
                profile.disable()
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        e1 = torch.cuda.Event(enable_timing=True)
        e1.record(stream)
        self.pending.append([k, bs, ext, t0, t1, e0, e1, c1 - c0])
        if len(self.pending) >= FLUSH_EVERY:
            self.flush()
        return result

    def span(self, tag: str):
        def hook(original, sched, *args, **kwargs):
            t0 = time.perf_counter_ns()
            result = original(sched, *args, **kwargs)
            if tag == "R":
                what = str(len(args[0]) if args and args[0] is not None else 0)
            else:
                what = kind(args[0] if tag == "P" else getattr(result, "batch_to_run", result))
            if what not in ("none", "0"):       # the idle loop spins: only iterations that did something
                self.rows.append([tag, what, t0, time.perf_counter_ns()])
            elif tag == "N" and self.pending:   # nothing to run: what ran so far is written (a run's end too)
                self.flush()
            elif tag == "N" and t0 - self.flags_checked > 1_000_000_000:   # idle: the flag files once a second
                self.check_flags()
            return result
        return hook

    def inner(self, tag: str):
        """A CPU span inside the launch (INNER): filed under the batch run_batch is launching (SGLang calls
        these with keywords only, and with batch=None for a verify), the draft's own calls left out."""
        def hook(original, owner, *args, **kwargs):
            launching = self.launching
            if launching is None or getattr(owner, "is_draft_worker", False):
                return original(owner, *args, **kwargs)
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            result = original(owner, *args, **kwargs)
            self.rows.append([tag, launching[0], t0, time.perf_counter_ns(), launching[1], time.thread_time_ns() - c0])
            return result
        return hook

    def check_flags(self) -> None:
        """Switch what the flag files ask for (sync debug, cProfile, GC freeze)."""
        self.flags_checked = time.perf_counter_ns()
        if flag_exists("SPEC_SYNC_DEBUG") != self.sync_debug:
            self.sync_debug = not self.sync_debug
            switch_sync_debug(self.sync_debug)
        self.profile = switch_cprofile(self.profile, flag_exists("SPEC_CPROFILE"), f"{self.prefix}.{os.getpid()}.prof")
        doses = spin_doses(os.environ.get("SPEC_SPIN"), os.path.basename(self.prefix))
        if doses != self.spin_ns:
            self.spin_ns = doses
            print(f"SPIN pid {os.getpid()} {json.dumps({k: ns // 1000 for k, ns in doses.items()})} us", flush=True)
        if flag_exists("SPEC_CALIBRATE"):
            speeds = procspeed.calibrate()       # field 4: the allocating loop, the reading since 12-03f
            print(f"CALIBRATE pid {os.getpid()} {speeds['alloc']:.1f} us {json.dumps(speeds)}", flush=True)
            print(f"PROC pid {os.getpid()} {json.dumps(procspeed.report())}", flush=True)
        if flag_exists("SPEC_GC_FREEZE") != self.gc_frozen:
            self.gc_frozen = not self.gc_frozen
            (gc.freeze if self.gc_frozen else gc.unfreeze)()
            print(f"GCFREEZE pid {os.getpid()} {'on' if self.gc_frozen else 'off'}: {gc.get_freeze_count()} objects frozen",
                  flush=True)

    def flush(self) -> None:
        self.check_flags()
        self.rows.append(["M", time.perf_counter_ns(), *allocator_counters()])
        n = 0
        for p in self.pending:                 # in order, up to the first still running (query() does not block)
            if not p[6].query():
                break
            n += 1
        done, self.pending = self.pending[:n], self.pending[n:]
        with open(self.path, "a") as f:
            for k, bs, ext, t0, t1, e0, e1, on_cpu in done:
                gap = self.last_end.elapsed_time(e0) if self.last_end is not None else 0.0
                f.write(json.dumps(["B", k, bs, ext, t0, t1, round(self.ref.elapsed_time(e0), 4),
                                    round(self.ref.elapsed_time(e1), 4), round(e0.elapsed_time(e1), 4),
                                    round(gap, 4), on_cpu]) + "\n")
                self.last_end = e1
            rows, self.rows = self.rows, []    # a collection while writing files its row in the new list
            for row in rows:
                f.write(json.dumps(row) + "\n")


def allocator_counters() -> list[int]:
    """The CUDA caching allocator's cumulative alloc retries, device allocations and frees (this process)."""
    import torch
    try:
        stats = torch.cuda.memory_stats()
    except Exception:        # a bench reading must never stop the scheduler: no counters then
        return []
    return [int(stats.get(k, 0)) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free")]


SPIN_ENGINES, SPIN_KINDS, MAX_SPIN_US = ("nospec", "off"), ("decode", "extend"), 20_000


def parse_doses(text: str) -> dict[str, dict[str, int]]:
    """SPEC_SPIN's JSON, {engine: {kind: us}} (engine: a timeline prefix's basename, SPIN_ENGINES; kind: SPIN_KINDS;
    0 < us <= MAX_SPIN_US), as ns per engine and kind; ValueError saying what is wrong (run_pair checks SPIN_DOSES
    with it before any engine starts, the engines read the file with it)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError("not an object naming an engine")
    out: dict[str, dict[str, int]] = {}
    for engine, kinds in data.items():
        if engine not in SPIN_ENGINES:
            raise ValueError(f"engine {engine!r}: one of {', '.join(SPIN_ENGINES)} (the timeline prefixes)")
        if not isinstance(kinds, dict) or not kinds:
            raise ValueError(f"{engine}: not an object of batch kind -> us")
        for kind, us in kinds.items():
            if kind not in SPIN_KINDS:
                raise ValueError(f"{engine}: batch kind {kind!r}: one of {', '.join(SPIN_KINDS)}")
            if isinstance(us, bool) or not isinstance(us, (int, float)) or not 0 < us <= MAX_SPIN_US:
                raise ValueError(f"{engine}.{kind}: {us!r} us, allowed above 0 up to {MAX_SPIN_US}")
            out.setdefault(engine, {})[kind] = int(us * 1000)
    return out


def spin_doses(path: str | None, engine: str) -> dict[str, int]:
    """This engine's CPU doses (batch kind -> ns) from SPEC_SPIN's file; none where the file is absent or not valid
    (a bench reading must never stop the scheduler: run_pair refuses a bad SPIN_DOSES before the engines start)."""
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return parse_doses(f.read()).get(engine, {})
    except (OSError, ValueError):
        return {}


def spin(ns: int) -> None:
    """Busy for ns on this thread, holding the GIL (as the launch's Python does)."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def flag_exists(variable: str) -> bool:
    flag = os.environ.get(variable)
    return bool(flag) and os.path.exists(flag)


def switch_cprofile(profile: cProfile.Profile | None, wanted: bool, path: str, top: int = 40) -> cProfile.Profile | None:
    """The profile to run from now on: a new one when wanted and none runs; when no longer wanted, the running one's
    stats printed (top functions by own time, "CPROFILE pid ..." lines) and saved to path, then none."""
    if wanted:
        return profile or cProfile.Profile()
    if profile is None:
        return None
    profile.dump_stats(path)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top)
    print(f"CPROFILE pid {os.getpid()} (run_batch of SPEC_CPROFILE_KINDS' batches; {path})\n" +
          "\n".join("CPROFILE " + line for line in text.getvalue().splitlines() if line.strip()), flush=True)
    return None


def switch_sync_debug(on: bool) -> None:
    """torch's sync debug mode on (each synchronising call site printed once, with its stack) or off."""
    import torch
    if not on:
        torch.cuda.set_sync_debug_mode("default")
        print(f"SYNC debug off in pid {os.getpid()}", flush=True)
        return
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if "synchronizing CUDA operation" not in str(message):
            return shown(message, category, filename, lineno, file, line)
        stack = "".join(traceback.format_stack(limit=14)[:-2]).replace("\n", "\n  ")
        print(f"SYNC pid {os.getpid()} at {filename}:{lineno}\n  {stack}", flush=True)

    if getattr(shown, "__name__", "") != "show":         # switched on again: one printer is enough
        warnings.showwarning = show
    warnings.filterwarnings("default", message=".*synchronizing CUDA operation.*")   # once per call site
    torch.cuda.set_sync_debug_mode("warn")
    print(f"SYNC debug on in pid {os.getpid()}", flush=True)


def main(argv: list[str]) -> int:
    """`timeline.py --check-spin JSON`: how many engines the doses name, or one line saying what is wrong (exit 2)."""
    if len(argv) != 2 or argv[0] != "--check-spin":
        print("usage: timeline.py --check-spin JSON", file=sys.stderr)
        return 2
    try:
        print(len(parse_doses(argv[1])))
    except ValueError as e:
        print(f"SPIN_DOSES: {e}", file=sys.stderr)
        return 2
    return 0


def load() -> None:
    prefix = os.environ.get("SPEC_TIMELINE")
    if not prefix:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    tl = Timeline(prefix)
    HookRegistry.register(f"{SCHEDULER}.run_batch", tl.run_batch, HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.process_batch_result", tl.span("P"), HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.get_next_batch_to_run", tl.span("N"), HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.process_input_requests", tl.span("R"), HookType.AROUND)
    for tag, target in INNER.items():
        HookRegistry.register(target, tl.inner(tag), HookType.AROUND)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
