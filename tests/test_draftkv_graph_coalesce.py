"""Coalesced draft-KV graph replays (draftkv_graph.GraphedKVWriter, batches > 1) with rows held when a run-time
switch flips or a launch fails, on CPU: the held rows are neither lost to a switch nor replayed twice after a failure,
and they reach the draft's pool before the next writer's (or SGLang's) own write."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from controller import contract
from controller.plugin import draftkv_graph, fastoff
from controller.plugin.draftkv_graph import PAD_SLOT
from controller.plugin.instance import Plugin
from tests.test_draftkv_graph import coalescing, dedupe_logged, one_row, sided, squeezed
from tests.test_plugin_cpu import decode_batch, routed_worker


def test_coalescing_switched_off_with_rows_held_replays_them_with_the_next_write_deduped():
    w, log, seen = coalescing(batches=4)
    w.write(*one_row(1, 40))
    w.write(*one_row(2, 41))
    w.use_coalesce(False)
    assert seen == [] and w.rows == 2                          # held until the next write (or a wait)
    w.write(*one_row(3, 40))                                   # slot 40 again: a reused slot, the later row wins
    assert seen == [([PAD_SLOT, 41, 40, PAD_SLOT], [1, 2, 3, 0])] and (w.launches, w.rows, w.held) == (1, 0, 0)


def test_the_side_stream_switch_with_rows_held_takes_effect_at_their_replay_dedupe_on_that_stream():
    w, log, seen = coalescing(batches=3, sizes=(1, 2, 4), side=True)
    w.dedupe = dedupe_logged(w, log)
    w.write(*one_row(1, 20))
    w.write(*one_row(2, 20))
    w.use_side(False)                                          # held rows replay in line now
    log.clear()
    w.wait()
    assert squeezed(log) == [("dedupe on", "forward"), "inputs", ("replay", 2)] and w.side_replays == 0
    assert seen == [([PAD_SLOT, 20], [1, 2])]
    w.write(*one_row(3, 21))
    w.write(*one_row(4, 21))
    w.use_side(True)                                           # ... and beside the next forward again
    log.clear()
    w.wait()
    assert squeezed(log) == [("ready", "on", "forward"), ("side", "waits", "ready"), ("dedupe on", "side"), "inputs",
                             ("replay", 2), ("done", "on", "side"), ("forward", "waits", "done")]
    assert seen[-1] == ([PAD_SLOT, 21], [3, 4]) and w.side_replays == 2


def test_a_failed_coalesced_replay_drops_its_rows_and_the_next_window_starts_at_row_0():
    w, log, seen = coalescing(batches=2)
    w.graphs[2] = type("G", (), {"replay": lambda self: 1 / 0})()
    w.write(*one_row(1, 30))
    with pytest.raises(ZeroDivisionError):
        w.write(*one_row(2, 31))
    assert (w.rows, w.held, w.launches, w.replays) == (0, 0, 0, 2)
    w.wait()                                                   # nothing held: the failed rows are not retried
    w.write(*one_row(3, 32))
    w.wait()
    assert seen == [([32], [3])] and w.launches == 1


def test_a_dedupe_failing_on_the_side_stream_leaves_the_replay_waited_for_before_the_next_refill():
    w, log, seen = coalescing(batches=2, sizes=(1, 2), side=True)
    w.dedupe = lambda loc: 1 / 0
    w.write(*one_row(1, 30))
    with pytest.raises(ZeroDivisionError):
        w.write(*one_row(2, 30))
    assert w.rows == 0 and w.side.pending and seen == [] and w.side.cuda.current == "forward"
    log.clear()
    w.write(*one_row(3, 31))
    assert squeezed(log)[:2] == [("forward", "waits", "done"), "inputs"]


def off_path_holding(monkeypatch, run):
    """A plugin whose off batches go to `run` (fastoff.run's arguments) with a coalescing graphed writer
    (4 writes a replay) and an eager writer that logs ("eager", slots)."""
    plug = Plugin({contract.ENV_DRAFT_KV_COALESCE: "4"})
    off = plug.off_path
    off.fast = SimpleNamespace(batches=0, graph_batches=0, cpu_ns=0, with_hidden=True, grammar=False)
    w, log, seen = coalescing(batches=4)
    eager = SimpleNamespace(write=lambda *a: log.append(("eager", a[3].tolist())))
    off.kv_graph, off.kv_writer, off.draft_kv = w, eager, True
    monkeypatch.setattr(fastoff, "run", run)
    plug.router.checked, plug.router.k, plug.router.threshold = True, 3, 8
    return plug, routed_worker(plug), log


def sglang(log):
    return lambda worker, batch, *a, **k: log.append("sglang") or "sglang-result"


def test_the_graphs_switched_off_with_rows_held_replay_them_before_the_eager_writers_first_write(monkeypatch):
    plug, worker, log = off_path_holding(monkeypatch,
                                         lambda worker, f, batch, *a, **k: a[2].write(*one_row(7, 70)) or "fast")
    plug.off_path.forward_batch_generation(sglang(log), worker, decode_batch(30), "pub")
    assert log == [] and plug.off_path.kv_graph.rows == 1
    plug.apply_own_keys({contract.DRAFT_KV_GRAPH_KEY: False})
    plug.off_path.forward_batch_generation(sglang(log), worker, decode_batch(30), "pub")
    assert log == [("replay", 1), ("eager", [70])]             # the same slot: the eager (later) row lands last


def test_a_fast_path_failure_replays_the_held_rows_with_its_own_before_sglangs_path(monkeypatch):
    calls = []

    def run(worker, f, batch, *a, **k):
        calls.append(batch)
        a[2].write(*one_row(len(calls), 80 + len(calls)))
        if len(calls) == 2:
            raise RuntimeError("boom")
        return "fast"
    plug, worker, log = off_path_holding(monkeypatch, run)
    for _ in range(2):
        plug.off_path.forward_batch_generation(sglang(log), worker, decode_batch(30), "pub")
    assert log == [("replay", 2), "sglang"] and plug.off_path.fast is None


def test_an_engine_that_cannot_coalesce_its_graphs_says_so_in_its_log(monkeypatch, caplog):
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: sided()[0])
    off = Plugin({contract.ENV_DRAFT_KV_COALESCE: "8"}).off_path
    off.kv_writer, off.tp_size = "eager", 1
    off.fast = SimpleNamespace(graph_runner=SimpleNamespace(capture_bs=[1, 2]))
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        off._capture_kv_graphs(SimpleNamespace(server_args=SimpleNamespace(enable_hierarchical_cache=True)))
    assert off.kv_graph.batches == 1
    assert [r.levelno for r in caplog.records if "not coalesced (the hierarchical cache" in r.getMessage()] == \
        [logging.WARNING]


def test_coalesced_graph_replays_leave_the_pool_as_per_batch_writes_do_on_torch():
    # what each graph holds is the eager write of its static inputs' first `size` rows; slots reused across the
    # writes a replay holds (a request finished, its slot went to another's next token), a prompt write among them,
    # and one write above every graph (chunked): the pool after the replays equals the pool after one write each
    torch = pytest.importorskip("torch")
    from tests.test_draftkv_coalesce import TorchPool
    direct, pool, sizes = TorchPool(torch, 32), TorchPool(torch, 32), (1, 2, 4, 8)
    w = draftkv_graph.GraphedKVWriter(pool, sizes, torch.zeros(8, 2), torch.zeros(8, dtype=torch.int64),
                                      torch.zeros(8, dtype=torch.int64), torch.zeros(8, dtype=torch.int64))
    w.graphs = {s: SimpleNamespace(replay=lambda s=s: pool.write(w.aux[:s], w.tokens[:s], w.positions[:s], w.loc[:s]))
                for s in sizes}
    w.coalesce_batches = 3
    w.use_coalesce(True)
    writes = [[1, 2, 3], [1, 4, 3], [5, 6, 7, 8, 9], [5, 4, 1], [2], [10, 11, 12, 13, 14, 15, 16, 17, 18, 2], [3, 19]]
    for i, slots in enumerate(writes):
        n = len(slots)
        args = (torch.arange(2 * n, dtype=torch.float32).reshape(n, 2) + 10 * i, torch.arange(n) + 10 * i,
                torch.arange(n) * 100 + i, torch.tensor(slots))
        direct.write(*args)
        w.write(*args)
    w.wait()
    assert torch.equal(direct.kv[1:], pool.kv[1:]) and w.launches < w.replays


def prefill_engine(monkeypatch, writer, env: dict, prompt_slot: int = 80):
    """A plugin whose off decode batches write one row at slot 70 with `writer` (the kv graphs) and whose lean
    prefills write one at prompt_slot through the writer in use; threshold 0, lean prefill on. (plugin, worker,
    an extend batch, the decode batch before it)."""
    from controller.plugin import draftkv
    from tests.test_plugin_cpu import Mode
    plug = Plugin(env)
    off = plug.off_path
    off.fast = SimpleNamespace(batches=0, graph_batches=0, cpu_ns=0, with_hidden=True, grammar=False)
    off.kv_graph, off.kv_writer, off.draft_kv, off.lean_prefill = writer, "eager", True, True
    monkeypatch.setattr(fastoff, "run", lambda worker, f, batch, *a, **k: a[2].write(*one_row(7, 70)) or "fast")
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: "stub")
    monkeypatch.setattr(draftkv, "write_prefill", lambda wr, *a: wr.write(*one_row(8, prompt_slot)) or True)
    plug.router.checked, plug.router.k, plug.router.threshold = True, 3, 0
    return plug, routed_worker(plug), decode_batch(1, extend_lens=[5], forward_mode=Mode("extend")), decode_batch(30)


def test_a_lean_prefill_joins_the_held_rows_and_a_prefill_running_the_draft_replays_them_first(monkeypatch):
    w, log, seen = coalescing(batches=4)
    plug, worker, prefill, decode = prefill_engine(monkeypatch, w, {contract.ENV_DRAFT_KV_COALESCE: "4"})
    off = plug.off_path
    drafted = []

    def extend(wk, batch, *args, **kwargs):      # SGLang's prefill: the target's forward, then the draft's pass
        draft = lambda *a, **k: drafted.append(w.rows) or "draft pass"
        return off.draft_extend_for_prefill(draft, "draft worker", batch, "hidden", [7])
    off.forward_batch_generation(lambda *a, **k: "sglang", worker, decode, "pub")
    assert off.forward_batch_generation(extend, worker, prefill) == "stub"
    assert seen == [] and w.rows == 2                          # the prompt's rows joined the decode batch's
    off.lean_prefill = False
    assert off.forward_batch_generation(extend, worker, prefill) == "draft pass"
    assert drafted == [0] and seen == [([70, 80], [7, 8])]    # replayed before the draft read its pool


def test_a_lean_prefill_written_by_another_writer_comes_after_the_held_rows(monkeypatch):
    w, log, seen = coalescing(batches=4)
    plug, worker, prefill, decode = prefill_engine(monkeypatch, w, {contract.ENV_DRAFT_KV_COALESCE: "4"}, 70)
    off = plug.off_path
    off.kv_writer = SimpleNamespace(write=lambda *a: log.append("eager write"))
    off.forward_batch_generation(lambda *a, **k: "sglang", worker, decode, "pub")
    plug.apply_own_keys({contract.DRAFT_KV_GRAPH_KEY: False})                       # the eager writer from now
    extend = lambda wk, batch, *a, **k: off.draft_extend_for_prefill(None, "draft worker", batch, "hidden", [7])
    assert off.forward_batch_generation(extend, worker, prefill)
    assert log == [("replay", 1), "eager write"]               # slot 70: the graph's older row first


def test_the_default_engine_waits_for_a_side_replay_after_a_prefills_target_forward_before_its_prompt_write(
        monkeypatch):
    # side stream on, no coalescing: the prefill's target forward may run beside the last decode batch's replay;
    # its prompt write refills the static inputs only after the forward stream waited for that replay
    w, log = sided()
    w.overlap = True
    plug, worker, prefill_batch, decode = prefill_engine(monkeypatch, w, {})
    off = plug.off_path
    off.forward_batch_generation(lambda *a, **k: "sglang", worker, decode, "pub")
    assert w.side.pending
    log.clear()

    def prefill(wk, batch, *a, **k):
        log.append("target forward")
        return off.draft_extend_for_prefill(None, "draft worker", batch, "hidden", [7])
    assert off.forward_batch_generation(prefill, worker, prefill_batch)
    assert squeezed(log)[:3] == ["target forward", ("forward", "waits", "done"), "inputs"]


def test_replays_around_the_row_cap_leave_the_pool_as_per_batch_writes_do_and_hold_one_write_above_it_on_torch():
    # an engine's sizes (decode graphs to 160, the prompt graphs above): batches around COALESCE_ROWS rising and
    # falling, small ones, prompts joining the held rows (some above every graph: chunked), slots reused, the switch
    # flipped: the pool equals one write each, and a replay above COALESCE_ROWS rows holds one write alone
    import random
    torch = pytest.importorskip("torch")
    from controller.plugin import draftkv, draftkv_coalesce
    from tests.test_draftkv_coalesce import TorchPool
    rnd, slots = random.Random(5), 6000
    sizes = draftkv_graph.sizes_to_capture([1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160])
    top = sizes[-1]
    direct, pool = TorchPool(torch, slots), TorchPool(torch, slots)
    w = draftkv_graph.GraphedKVWriter(pool, sizes, torch.zeros(top, 2), torch.zeros(top, dtype=torch.int64),
                                      torch.zeros(2 * top, dtype=torch.int64), torch.zeros(top, dtype=torch.int64))
    writes, replayed = [], []          # rows of each write (a chunk each above the largest graph); writes per replay

    def replay(s):
        replayed.append(w.replays)      # (the writes whose rows are in: _take launches before counting its own)
        pool.write(w.aux[:s], w.tokens[:s], w.positions[:s], w.loc[:s])
    w.graphs = {s: SimpleNamespace(replay=lambda s=s: replay(s)) for s in sizes}
    w.dedupe, w.coalesce_batches = draftkv_coalesce.last_write_wins, 8
    w.use_coalesce(True)
    for step in range(400):
        if rnd.random() < 0.02:
            w.use_coalesce(rnd.random() < 0.5)
        if rnd.random() < 0.1:             # a prompt: 1-3 requests, up to 2,100 tokens
            lens = [rnd.randint(1, 700) for _ in range(rnd.randint(1, 3))]
            n = sum(lens)
            rows = draftkv.PromptRows(torch.randint(0, 1000, (n,)), lens, [rnd.choice([0, 40]) for _ in lens],
                                      torch.randint(0, 1000, (len(lens),)), torch.rand(n, 2),
                                      torch.tensor(rnd.sample(range(1, slots), n)))
            for writer in (direct, w):
                draftkv.stage_prefill(writer, rows)
            writes += [min(top, n - s) for s in range(0, n, top)]
            continue
        n = rnd.choice([rnd.randint(1, 20), rnd.randint(40, 70), rnd.randint(100, 140), 128])
        args = (torch.rand(n, 2), torch.randint(0, 1000, (n,)), torch.randint(0, 1000, (n,)),
                torch.tensor(rnd.sample(range(1, 300), n)))          # slots reused within a replay's writes
        direct.write(*args)
        w.write(*args)
        writes.append(n)
    w.wait()
    assert torch.equal(direct.kv[1:], pool.kv[1:]) and w.replays == len(writes)
    held = [writes[a:b] for a, b in zip([0, *replayed], replayed)]
    assert sum(map(len, held)) == len(writes) and max(map(len, held)) > 1          # coalesced below the cap
    assert [h for h in held if sum(h) > draftkv_graph.COALESCE_ROWS and len(h) > 1] == []
