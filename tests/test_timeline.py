"""The GPU timeline (bench/gpu/timeline.py, a bench-only SGLang plugin) and its arithmetic
(bench/gpu/timeline_summary.py), on synthetic rows and fake CUDA events: the prefill cost it hands the
simulator's profile, run cutting, and the per-kind table of issue 12's "where the time goes"."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
from timeline_summary import prefill_cost, read, runs_of, summarise  # noqa: E402

TOKENS = (200, 400, 600)


def batches(n_cycles: int, *, decode_ms=5.0, base_ms=20.0, per_token_ms=0.01, idle_before_extend=1.0,
            idle_after=2.0, extra_after=1.0, decodes_per_cycle=6, t0=0.0, outlier_every=0) -> list[list]:
    """Rows ["B", kind, bs, tokens, cpu0, cpu1, gpu0, gpu1] (the older form, without exact span and gap):
    cycles of one extend and some decodes; every outlier_every-th extend follows an idle engine (500 ms)."""
    rows, t = [], t0
    for i in range(n_cycles):
        tokens = TOKENS[i % len(TOKENS)]
        t += 500.0 if outlier_every and i % outlier_every == outlier_every - 1 else idle_before_extend
        g = base_ms + per_token_ms * tokens
        rows.append(["B", "extend", 1, tokens, 0, 0, t, t + g])
        t += g + idle_after
        rows.append(["B", "decode", 30, 0, 0, 0, t, t + decode_ms + extra_after])
        t += decode_ms + extra_after
        for _ in range(decodes_per_cycle - 1):
            rows.append(["B", "decode", 30, 0, 0, 0, t, t + decode_ms])
            t += decode_ms
    return rows


def test_prefill_cost_per_event_and_per_token_leaves_out_extends_after_an_idle_engine():
    got = prefill_cost(batches(150, outlier_every=10))
    assert got["extends"] == 149 - 15                # the first has no gap to read; 15 follow an idle engine
    # per event: the span at 0 tokens + the idle before it and before the next decode + that decode's extra
    assert got["prefill_s"] == pytest.approx((20.0 + 1.0 + 2.0 + 1.0) / 1e3, rel=1e-6)
    assert got["prefill_s_per_token"] == pytest.approx(0.01 / 1e3, rel=1e-6)
    assert got["extend_gpu_ms_fit"] == [pytest.approx(20.0), pytest.approx(0.01)]


def test_prefill_cost_needs_enough_extends():
    assert prefill_cost(batches(50)) is None
    assert prefill_cost(batches(150)) is not None


def test_runs_are_cut_where_the_gpu_idled_for_more_than_a_second():
    one = batches(10)
    end = one[-1][7]
    assert [len(r) for r in runs_of(one + batches(10, t0=end + 999.0 - 1.0))] == [140]   # 999 ms: one run
    assert [len(r) for r in runs_of(one + batches(10, t0=end + 1001.0 - 1.0))] == [70, 70]


def test_summary_reads_only_the_window_and_tables_each_kind():
    rows = batches(150, decodes_per_cycle=4)
    cpu = 0
    for r in rows:                                   # a 1 ms launch every 2 ms of CPU time
        r[4], r[5] = cpu, cpu + 1_000_000
        cpu += 2_000_000
    outside = [["B", "decode", 99, 0, cpu + 10_000_000, cpu + 11_000_000, 1e9, 1e9 + 50.0]]
    spans = [["P", "decode", 0, 3_000_000], ["P", "extend", 0, 500_000], ["N", "decode", 0, 250_000],
             ["T", "decode", 0, 700_000, 1], ["F", "decode", 0, 400_000, 1], ["T", "extend", 0, 5_000_000, 2],
             ["T", "extend", 0, 4_000_000, 2],                                   # two target calls in batch 2
             ["P", "decode", cpu + 10_000_000, cpu + 99_000_000]]             # the last: outside the window
    out = summarise(rows + outside + spans, 0, cpu)
    ext, dec = out["kinds"]["extend"], out["kinds"]["decode"]
    assert ext["n"] == 150 and dec["n"] == 600 and dec["bs"] == 30   # the batch of 99 is outside
    assert ext["gpu_ms"] == pytest.approx(20.0 + 0.01 * 400) and dec["gpu_ms"] == pytest.approx(5.25)
    assert ext["idle_before_ms"] == pytest.approx(149 / 150 * 1.0, abs=1e-3) and dec["idle_before_ms"] == pytest.approx(0.5)
    assert dec["launch_cpu_ms"] == pytest.approx(1.0)
    assert dec["process_cpu_ms"] == pytest.approx(3.0) and ext["process_cpu_ms"] == pytest.approx(0.5)
    assert dec["schedule_cpu_ms"] == pytest.approx(0.25)
    assert dec["target_cpu_ms"] == pytest.approx(0.7) and dec["runner_cpu_ms"] == pytest.approx(0.4)
    assert ext["target_cpu_ms"] == pytest.approx(9.0) and ext["runner_cpu_ms"] is None   # per batch: summed
    # decodes by the batch before them: the one after each extend carries the idle and the extra
    after = out["decode_after"]
    assert after["extend"]["n"] == 150 and after["decode"]["n"] == 450
    assert after["extend"]["gpu_ms"] == pytest.approx(6.0) and after["extend"]["idle_before_ms"] == pytest.approx(2.0)
    assert after["decode"]["gpu_ms"] == pytest.approx(5.0) and after["decode"]["idle_before_ms"] == pytest.approx(0.0)
    assert after["extend"]["launch_cpu_ms"] == pytest.approx(1.0)
    # a decode after an idle spell (the engine waited for arrivals) is not a decode after its predecessor's cost
    late = rows[-1][7] + 400.0
    waited = summarise(rows + [["B", "decode", 30, 0, cpu - 1, cpu - 1, late, late + 5.0]], 0, cpu)["decode_after"]
    assert waited["decode"]["n"] == 450 and waited["decode"]["idle_before_ms"] == pytest.approx(0.0)
    cycle = 1.0 + 24.0 + 2.0 + 6.0 + 3 * 5.0
    assert dec["gpu_share"] + ext["gpu_share"] + dec["idle_share"] + ext["idle_share"] == pytest.approx(1.0, abs=0.01)
    assert ext["gpu_share"] == pytest.approx(24.0 / cycle, rel=0.01)
    # a running request waits 5 ms between its decodes, but 24 + 1 + 2 + 6 ms across an extend
    assert out["decode_interval_ms_median"] == pytest.approx(5.0)
    assert out["decode_interval_ms_mean"] == pytest.approx(cycle / 4, rel=0.01)


class FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=True):
        self.t, self.done = None, True

    def record(self, stream=None):
        self.t = self.clock[0]

    def query(self):
        return self.done

    def elapsed_time(self, other):
        return other.t - self.t


class Mode:
    def __init__(self, kind):
        self.kind = kind

    def is_idle(self):
        return False

    def is_mixed(self):
        return False

    def is_extend(self):
        return self.kind == "extend"


def fake_torch(**cuda) -> types.SimpleNamespace:
    """torch as timeline.py uses it: events, the current stream, the caching allocator's counters."""
    stats = {"num_alloc_retries": 0, "num_device_alloc": 3, "num_device_free": 1}
    return types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=FakeEvent, current_stream=lambda: None, memory_stats=lambda: dict(stats), stats=stats, **cuda))


def test_plugin_writes_exact_spans_and_gaps_and_flushes_when_the_scheduler_idles(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    tl = timeline.Timeline(str(tmp_path / "tl"))
    sched = types.SimpleNamespace(forward_stream=None)

    def forward(ms):
        def run(s, batch):
            FakeEvent.clock[0] += ms               # the batch's GPU time
        return run
    batch = lambda kind: types.SimpleNamespace(forward_mode=Mode(kind), reqs=[1, 2], extend_num_tokens=300)
    tl.run_batch(forward(20.0), sched, batch("extend"))
    FakeEvent.clock[0] += 3.0                      # the GPU idles 3 ms
    tl.run_batch(forward(5.0), sched, batch("decode"))
    tl.pending[-1][6].done = False                 # still running: held back
    schedule = tl.span("N")
    schedule(lambda s: types.SimpleNamespace(batch_to_run=None), sched)   # nothing to run: a flush
    rows = [json.loads(line) for line in open(tl.path)]
    assert [r[:4] for r in rows if r[0] == "B"] == [["B", "extend", 2, 300]]
    assert rows[0][8] == pytest.approx(20.0) and rows[0][9] == 0.0
    assert [r[0] for r in rows] == ["B", "M"] and rows[1][2:] == [0, 3, 1]     # the allocator's counters per flush
    tl.pending[-1][6].done = True
    schedule(lambda s: types.SimpleNamespace(batch_to_run=None), sched)
    rows = [json.loads(line) for line in open(tl.path) if line.startswith('["B"')]
    assert [r[1] for r in rows] == ["extend", "decode"]
    assert rows[1][8] == pytest.approx(5.0) and rows[1][9] == pytest.approx(3.0)
    assert [r for r in read(str(tmp_path / "tl")) if r[0] == "B"] == rows   # the summary reads the file with them


def test_inner_spans_are_filed_under_the_batch_being_launched_keywords_only_and_not_the_drafts(tmp_path, monkeypatch):
    """SGLang's verify calls TpModelWorker.forward_batch_generation(batch=None, forward_batch=..., is_verify=True):
    keywords only (a hook reading args[0] crashed the scheduler); the draft worker is a TpModelWorker too."""
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    tl = timeline.Timeline(str(tmp_path / "tl"))
    target_hook, runner_hook = tl.inner("T"), tl.inner("F")
    target = types.SimpleNamespace(is_draft_worker=False)
    draft = types.SimpleNamespace(is_draft_worker=True)
    calls = []

    def worker_forward(owner, **kw):
        calls.append(kw)
        return "result"

    def launch(s, b):                               # what the speculative worker does inside run_batch
        assert target_hook(worker_forward, target, batch=None, forward_batch="fb", is_verify=True) == "result"
        target_hook(worker_forward, draft, forward_batch="draft-fb")
        runner_hook(lambda owner, fb: None, target, "fb")
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None),
                 types.SimpleNamespace(forward_mode=Mode("decode"), reqs=[1], extend_num_tokens=0))
    assert calls == [{"batch": None, "forward_batch": "fb", "is_verify": True}, {"forward_batch": "draft-fb"}]
    assert [r[0:2] + r[4:5] for r in tl.rows] == [["T", "decode", 1], ["F", "decode", 1]]   # the draft's left out
    assert all(isinstance(r[5], int) and r[5] >= 0 for r in tl.rows)          # the thread's own CPU in the span
    assert target_hook(worker_forward, target, batch="b") == "result" and len(tl.rows) == 2   # outside a launch: none


def test_sync_debug_goes_on_once_its_flag_file_exists_and_prints_each_sync_site_with_its_stack(
        tmp_path, monkeypatch, capsys):
    modes = []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(set_sync_debug_mode=modes.append))
    import warnings
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)   # the plugin replaces both
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    import timeline
    flag = tmp_path / "flag"
    monkeypatch.setenv("SPEC_SYNC_DEBUG", str(flag))
    tl = timeline.Timeline(str(tmp_path / "tl"))
    tl.flush()
    assert not tl.sync_debug and modes == []       # no flag file: nothing switched
    flag.touch()
    tl.flush()
    tl.flush()
    assert tl.sync_debug and modes == ["warn"]     # switched on once
    warnings.warn_explicit("called a synchronizing CUDA operation", UserWarning, "x.py", 7)
    out = capsys.readouterr().out
    assert "SYNC pid" in out and "x.py:7" in out and "test_timeline.py" in out   # the site and its stack
    flag.unlink()
    tl.flush()
    tl.flush()
    assert not tl.sync_debug and modes == ["warn", "default"]   # off again once the flag is gone


def test_cprofile_runs_while_its_flag_exists_and_prints_and_saves_its_stats_when_it_goes(tmp_path, capsys):
    import timeline

    def launch_work():                       # a function the profile must name
        return sum(range(2000))
    profile = timeline.switch_cprofile(None, True, str(tmp_path / "p.prof"))
    assert timeline.switch_cprofile(profile, True, str(tmp_path / "p.prof")) is profile   # kept while wanted
    profile.enable()
    launch_work()
    profile.disable()
    assert timeline.switch_cprofile(profile, False, str(tmp_path / "p.prof")) is None
    out = capsys.readouterr().out
    assert "CPROFILE pid" in out and any("launch_work" in line for line in out.splitlines() if line.startswith("CPROFILE"))
    assert (tmp_path / "p.prof").stat().st_size > 0
    assert timeline.switch_cprofile(None, False, str(tmp_path / "p.prof")) is None and capsys.readouterr().out == ""


def test_run_batch_profiles_decode_batches_only(tmp_path, monkeypatch):
    import cProfile
    import pstats
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    tl = timeline.Timeline(str(tmp_path / "tl"))
    tl.profile = cProfile.Profile()

    def decode_launch(s, b):
        return None

    def extend_launch(s, b):
        return None
    batch = lambda kind: types.SimpleNamespace(forward_mode=Mode(kind), reqs=[1], extend_num_tokens=10)
    tl.run_batch(decode_launch, types.SimpleNamespace(forward_stream=None), batch("decode"))
    tl.run_batch(extend_launch, types.SimpleNamespace(forward_stream=None), batch("extend"))
    names = {fn for (_, _, fn) in pstats.Stats(tl.profile).stats}
    assert "decode_launch" in names and "extend_launch" not in names


def test_collections_are_filed_under_the_launch_they_interrupt_and_summed_per_kind(tmp_path, monkeypatch):
    """A garbage collection inside an extend's launch counts against extends, one between launches against none."""
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    tl = timeline.Timeline(str(tmp_path / "tl"))

    def collecting(s, b):                     # what gc.callbacks does when a collection runs inside the launch
        tl.on_gc("start", {"generation": 2})
        tl.on_gc("stop", {"generation": 2, "collected": 0})
        FakeEvent.clock[0] += 10.0

    def decoding(s, b):
        FakeEvent.clock[0] += 5.0
    batch = lambda kind: types.SimpleNamespace(forward_mode=Mode(kind), reqs=[1], extend_num_tokens=16)
    tl.run_batch(collecting, types.SimpleNamespace(forward_stream=None), batch("extend"))
    tl.on_gc("start", {"generation": 0})
    tl.on_gc("stop", {"generation": 0})
    tl.run_batch(decoding, types.SimpleNamespace(forward_stream=None), batch("decode"))
    tl.run_batch(decoding, types.SimpleNamespace(forward_stream=None), batch("decode"))
    assert [r[:3] for r in tl.rows] == [["C", "extend", 2], ["C", "-", 0]]
    tl.rows[0][3:5] = [tl.pending[0][3], tl.pending[0][3] + 4_000_000]     # 4 ms inside the extend's launch
    tl.rows[1][3:5] = [tl.pending[1][3], tl.pending[1][3] + 1_000_000]
    tl.flush()
    out = summarise(read(str(tmp_path / "tl")), 0, 2**62)
    assert out["kinds"]["extend"]["gc_ms"] == pytest.approx(4.0) and out["kinds"]["decode"]["gc_ms"] == 0.0
    assert out["gc_ms_total"] == pytest.approx(5.0)


def test_gc_freezes_while_its_flag_file_exists(tmp_path, monkeypatch, capsys):
    import gc
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    # the timeline's clock, moved by hand: 'less than a second since the last look' held only while the lines below
    # ran within a second of the flush (a loaded host's stalled file system call failed it; helper-159)
    now = [10**12]
    monkeypatch.setattr(timeline, "time", types.SimpleNamespace(perf_counter_ns=lambda: now[0],
                                                                 thread_time_ns=lambda: 0))
    flag = tmp_path / "gcflag"
    monkeypatch.setenv("SPEC_GC_FREEZE", str(flag))
    tl = timeline.Timeline(str(tmp_path / "tl"))
    tl.flush()
    assert calls == []
    flag.touch()
    tl.flush()
    tl.flush()
    assert calls == ["freeze"] and "GCFREEZE pid" in capsys.readouterr().out
    flag.unlink()
    tl.flush()
    assert calls == ["freeze", "unfreeze"] and not tl.gc_frozen
    flag.touch()                              # an idle scheduler with nothing to write still looks, once a second
    idle = tl.span("N")
    idle(lambda sched: types.SimpleNamespace(batch_to_run=None), None)
    now[0] += 999_000_000
    idle(lambda sched: types.SimpleNamespace(batch_to_run=None), None)
    assert calls == ["freeze", "unfreeze"]    # the flush above looked less than a second ago
    now[0] += 2_000_000_000
    idle(lambda sched: types.SimpleNamespace(batch_to_run=None), None)
    idle(lambda sched: types.SimpleNamespace(batch_to_run=None), None)
    assert calls == ["freeze", "unfreeze", "freeze"] and tl.pending == []


def test_the_gc_callback_is_registered_at_the_first_batch_once(tmp_path, monkeypatch):
    """Plugins load in SGLang's HTTP process too, which never flushes: only a process that launches batches
    (a scheduler) watches its collections."""
    import gc
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    monkeypatch.setattr(gc, "callbacks", [])
    import timeline
    tl = timeline.Timeline(str(tmp_path / "tl"))
    assert gc.callbacks == []
    batch = types.SimpleNamespace(forward_mode=Mode("decode"), reqs=[1], extend_num_tokens=0)
    tl.run_batch(lambda s, b: None, types.SimpleNamespace(forward_stream=None), batch)
    tl.run_batch(lambda s, b: None, types.SimpleNamespace(forward_stream=None), batch)
    assert gc.callbacks == [tl.on_gc]


def test_the_allocators_device_calls_in_a_window_and_the_calibration_loop(tmp_path, monkeypatch, capsys):
    torch = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    import timeline

    def launch(s, b):
        FakeEvent.clock[0] += 5.0
    tl = timeline.Timeline(str(tmp_path / "tl"))
    batch = types.SimpleNamespace(forward_mode=Mode("decode"), reqs=[1], extend_num_tokens=0)
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch)
    tl.flush()
    torch.cuda.stats.update(num_device_alloc=7, num_device_free=4, num_alloc_retries=1)   # cudaMalloc x4, cudaFree x3
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch)
    tl.flush()
    out = summarise(read(str(tmp_path / "tl")), 0, 2**62)
    assert out["allocator"] == {"alloc_retries": 1, "device_allocs": 4, "device_frees": 3}
    flag = tmp_path / "calibrate"
    monkeypatch.setenv("SPEC_CALIBRATE", str(flag))
    tl.check_flags()
    assert "CALIBRATE" not in capsys.readouterr().out
    flag.touch()
    tl.check_flags()
    calib, proc = capsys.readouterr().out.splitlines()
    assert calib.startswith("CALIBRATE pid") and float(calib.split()[3]) > 0
    speeds = json.loads(calib.split(" us ", 1)[1])
    assert {"alloc", "alloc_nogc", "loop", "calls"} <= set(speeds) and min(speeds[k] for k in ("alloc", "loop")) > 0
    assert speeds["cpu"] in os.sched_getaffinity(0) and speeds["cpu_after"] in os.sched_getaffinity(0)
    report = json.loads(proc.split(" ", 3)[3])
    assert report["gc"][0] is True and any(name for name, ticks, cpu in report["threads"] if ticks >= 0 and cpu >= 0)


def test_the_summary_splits_wall_time_into_the_threads_own_cpu_and_waiting(tmp_path):
    """A launch (and its runner span) that took 10 ms of wall time with 4 ms on the CPU waited 6 ms: the summary
    reports both, per kind."""
    ms = 1_000_000
    rows = [["B", "extend", 1, 16, 0, 10 * ms, 0.0, 10.0, 10.0, 0.0, 4 * ms],
            ["F", "extend", 1 * ms, 9 * ms, 1, 3 * ms],
            ["B", "decode", 8, 0, 11 * ms, 12 * ms, 10.0, 15.0, 5.0, 0.0, 1 * ms],
            ["B", "decode", 8, 0, 16 * ms, 17 * ms, 15.0, 20.0, 5.0, 0.0, 1 * ms]]
    out = summarise(rows, 0, 2**62)["kinds"]
    assert out["extend"]["launch_cpu_ms"] == 10.0 and out["extend"]["launch_oncpu_ms"] == 4.0
    assert out["extend"]["runner_cpu_ms"] == 8.0 and out["extend"]["runner_oncpu_ms"] == 3.0
    assert out["decode"]["launch_oncpu_ms"] == 1.0 and out["decode"]["runner_oncpu_ms"] is None


def test_the_calibration_summary_lists_every_look_per_variant():
    """run_pair's calibrate line (procspeed.looks): each variant's value in every look, "-" where a look lacks it,
    from the engines' CALIBRATE lines (other lines ignored)."""
    import procspeed
    lines = ['CALIBRATE pid 7 503.4 us {"alloc": 503.4, "loop": 663.6}',
             "PROC pid 7 {}",
             'CALIBRATE pid 7 901.0 us {"alloc": 901.0, "loop": 1245.3, "calls_nohook": 88.0}']
    assert procspeed.looks(lines) == "alloc 503.4,901.0 loop 663.6,1245.3 calls_nohook -,88.0"
    assert procspeed.looks([]) == "none"


def test_pairs_set_each_run_against_the_nospec_run_of_its_shape_level_and_repeat():
    from timeline_summary import pair_lines

    def run(label, repeat, interval, gpu, runner, level=48, shape="closed", t=0.0):
        return {"label": label, "shape": shape, "level": level, "repeat": repeat, "t_start": t,
                "decode_interval_ms_median": interval,
                "kinds": {"decode": {"gpu_ms": gpu}, "extend": {"runner_cpu_ms": runner}}}
    rows = [run("nospec", 0, 5.0, 5.5, 9.0, t=0), run("off", 0, 5.1, 5.6, 8.0, t=1),
            run("off", 1, 5.05, 5.58, 11.0, t=2), run("nospec", 1, 4.0, 5.5, 10.0, t=3),
            run("off", 2, 6.0, 6.0, 1.0, t=4),                                   # repeat 2: no nospec run, no pair
            run("nospec", 0, 7.0, 7.0, 7.0, level=128),                          # another level: alone
            # steady decode at the same level: its own pairs, not closed's
            run("nospec", 0, 2.0, 2.0, 3.0, shape="steady", t=10), run("off", 0, 2.2, 2.1, 3.0, shape="steady", t=11),
            # a second closed block of the same seeds (e.g. closedfast's): the nearest no-spec run in time
            run("nospec", 0, 10.0, 9.0, 1.0, t=20), run("fast", 0, 11.0, 9.5, 2.0, t=21)]
    rows[8]["kinds"].pop("extend")                                               # a run without extends: '-'
    for r, (span, idle) in zip(rows[:4], ((6.0, 0.5), (6.3, 0.9), (6.0, 0.4), (6.1, 0.6))):   # decodes after extends
        r["decode_after"] = {"extend": {"gpu_ms": span, "idle_before_ms": idle}}
    assert pair_lines(rows) == ["| closed | 48 | fast | 1.100 | +500 | - | 2.0 / - |",
                                "| closed | 48 | off | 1.020, 1.262 | +100, +80 | +700, -300 | 8.0 / 9.0; 11.0 / 10.0 |",
                                "| steady | 48 | off | 1.100 | +100 | - | 3.0 / 3.0 |"]


def test_the_cpu_dose_spins_only_this_engines_named_kinds_before_the_launch_while_its_file_says_so(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    import timeline
    spun, order = [], []
    monkeypatch.setattr(timeline, "spin", lambda ns: (spun.append(ns), order.append("spin")))
    doses = tmp_path / "spin.json"
    monkeypatch.setenv("SPEC_SPIN", str(doses))
    tl = timeline.Timeline(str(tmp_path / "nospec"))
    batch = lambda kind: types.SimpleNamespace(forward_mode=Mode(kind), reqs=[1], extend_num_tokens=4)
    launch = lambda s, b: order.append("launch")
    tl.check_flags()
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch("decode"))
    assert spun == [] and "SPIN" not in capsys.readouterr().out            # no file: no dose
    doses.write_text(json.dumps({"nospec": {"decode": 400}, "off": {"decode": 900, "extend": 50}}))
    tl.check_flags()
    assert "SPIN pid" in capsys.readouterr().out
    order.clear()
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch("decode"))
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch("extend"))
    assert spun == [400_000] and order == ["spin", "launch", "launch"]     # this engine's decodes, before the launch
    doses.write_text("{not json")                                          # unreadable: no dose, the scheduler runs on
    tl.check_flags()
    tl.run_batch(launch, types.SimpleNamespace(forward_stream=None), batch("decode"))
    assert spun == [400_000] and tl.spin_ns == {}
    assert timeline.spin_doses(str(doses), "off") == {} and timeline.spin_doses(None, "off") == {}
    doses.write_text(json.dumps({"off": {"decode": 900, "extend": 0.5}}))
    assert timeline.spin_doses(str(doses), "off") == {"decode": 900_000, "extend": 500}
    doses.write_text('{"off": {"decode": 1e400}}')             # infinite: refused, not an overflow in the scheduler
    assert timeline.spin_doses(str(doses), "off") == {}


@pytest.mark.parametrize("text, says", [
    ("{nope", "not JSON"), ("[]", "not an object"), ("{}", "not an object"),
    ('{"daemon": {"decode": 1000}}', "engine 'daemon': one of nospec, off"),
    ('{"nospec": {"verify": 10}}', "batch kind 'verify'"), ('{"nospec": []}', "not an object of batch kind"),
    ('{"nospec": {"decode": 0}}', "nospec.decode: 0 us"), ('{"nospec": {"decode": -5}}', "-5 us"),
    ('{"nospec": {"decode": 20001}}', "allowed above 0 up to 20000"), ('{"nospec": {"decode": true}}', "True us"),
    ('{"nospec": {"decode": "100"}}', "'100' us"), ('{"off": {"extend": NaN}}', "nan us"),
])
def test_a_dose_that_is_not_valid_is_named_in_one_line(text, says):
    import timeline
    with pytest.raises(ValueError, match=".*") as e:
        timeline.parse_doses(text)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert timeline.parse_doses('{"nospec": {"decode": 20000}, "off": {"extend": 1}}') == {
        "nospec": {"decode": 20_000_000}, "off": {"extend": 1000}}


def test_the_dose_check_prints_how_many_engines_it_names_or_why_not(capsys):
    import timeline
    assert timeline.main(["--check-spin", '{"nospec": {"decode": 1000}, "off": {"decode": 5}}']) == 0
    assert capsys.readouterr().out.strip() == "2"
    assert timeline.main(["--check-spin", '{"off": {"decode": -1}}']) == 2
    assert capsys.readouterr().err.strip() == "SPIN_DOSES: off.decode: -1 us, allowed above 0 up to 20000"
    assert timeline.main([]) == 2


def test_the_cpu_before_the_target_forward_per_kind_and_for_the_decode_after_an_extend():
    """pretarget_cpu_ms: from the launch's start to its first target-worker span (what a drained GPU waits for);
    a span outside every launch, or of another kind, counts for none."""
    ms = 1_000_000
    rows = [["B", "extend", 1, 100, 0, 9 * ms, 0.0, 8.0, 8.0, 0.0],
            ["B", "decode", 30, 0, 10 * ms, 12 * ms, 9.0, 16.0, 7.0, 1.0],
            ["B", "decode", 30, 0, 20 * ms, 21 * ms, 16.0, 23.0, 7.0, 0.0],
            ["T", "extend", 1 * ms, 8 * ms, 1], ["T", "extend", int(8.5 * ms), 9 * ms, 1],    # two: the first counts
            ["T", "decode", int(10.9 * ms), int(11.5 * ms), 2], ["T", "decode", int(20.3 * ms), int(20.8 * ms), 3],
            ["T", "decode", 15 * ms, 16 * ms, 9],                                         # between launches: none
            ["T", "extend", int(20.5 * ms), int(20.6 * ms), 9]]                           # another kind: none
    out = summarise(rows, 0, 2**62)
    assert out["kinds"]["extend"]["pretarget_cpu_ms"] == pytest.approx(1.0)
    assert out["kinds"]["decode"]["pretarget_cpu_ms"] == pytest.approx((0.9 + 0.3) / 2)
    assert out["decode_after"]["extend"]["pretarget_cpu_ms"] == pytest.approx(0.9)
    assert out["decode_after"]["decode"]["pretarget_cpu_ms"] == pytest.approx(0.3)
    assert out["transitions"] == {"decode>decode": 1, "extend>decode": 1}
    two = summarise(rows[:1] + [["B", "extend", 1, 50, 9 * ms, 10 * ms, 8.0, 9.0, 1.0, 0.0]] + rows[1:], 0, 2**62)
    assert two["transitions"] == {"decode>decode": 1, "extend>decode": 1, "extend>extend": 1}


def test_decode_cost_is_each_labels_median_decode_per_shape_and_level():
    from timeline_summary import decode_cost_lines

    def run(label, pretarget, gpu, level=128, shape="closed", **more):
        return {"label": label, "shape": shape, "level": level,
                "kinds": {"decode": {"pretarget_cpu_ms": pretarget, "launch_cpu_ms": 1.0, "process_cpu_ms": 3.0,
                                     "gpu_ms": gpu, **more}, "extend": {"gpu_ms": 99.0}}}
    rows = [run("off", 0.5, 7.5), run("off", 0.6, 7.7), run("off", 0.4, 7.6), run("nospec", 0.2, 7.4),
            run("nospec", 0.3, 7.4, idle_before_ms=0.5), run("off", 9.0, 9.0, level=48),
            {"label": "off", "shape": "closed", "level": 16, "kinds": {"extend": {"gpu_ms": 1.0}}}]   # no decodes
    assert decode_cost_lines(rows) == ["| closed | 48 | off | 1 | 9.000 | 1.000 | 3.000 | 9.000 | - |",
                                       "| closed | 128 | nospec | 2 | 0.250 | 1.000 | 3.000 | 7.400 | 0.500 |",
                                       "| closed | 128 | off | 3 | 0.500 | 1.000 | 3.000 | 7.600 | - |"]


@pytest.mark.parametrize("b_first", [False, True])
def test_a_load_rows_b_first_reaches_the_timeline_row(tmp_path, b_first):
    tl = tmp_path / "tl.jsonl"
    tl.write_text("".join(json.dumps(["B", "decode", 4, 0, int(t * 1e9), int(t * 1e9) + 1000, t * 1e3, t * 1e3 + 5]) + "\n"
                          for t in (1.0, 1.5, 2.0)))
    row = {"label": "off", "shape": "closed", "level": 16, "repeat": 0, "mono_start": 0.0, "tok_s": 1.0,
           **({"b_first": True} if b_first else {})}
    out = tmp_path / "o.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench/gpu/timeline_summary.py"), str(tl), "--load-row", json.dumps(row),
                    "--skip", "0", "--seconds", "3", "--json", str(out)], check=True, capture_output=True)
    got = json.loads(out.read_text().splitlines()[-1])
    assert got["label"] == "off" and ("b_first" in got) is b_first and got.get("b_first", True) is True
    from host_adjusted import runs_of as fitted_runs
    assert fitted_runs([str(out)])[0]["second"] is not b_first     # host_adjusted reads it back: off second unless b_first
