"""controller/plugin/draftkv_graph.py on CPU: which graph a batch replays, what its padded rows write, when the
eager writer takes over, and the plugin's switch for it (the capture itself needs a GPU: bench/gpu)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from controller import contract
from controller.plugin import draftkv_graph
from controller.plugin.draftkv_graph import PAD_SLOT, GraphedKVWriter, graph_size, sizes_to_capture
from controller.plugin.instance import Plugin


class T(np.ndarray):
    """Enough of a torch tensor for write(): slices are views, copy_ and fill_ write through."""

    def copy_(self, src):
        self[...] = np.asarray(src)
        return self

    def fill_(self, value):
        self[...] = value
        return self


def t(values, dtype=np.int64) -> T:
    return np.asarray(values, dtype=dtype).view(T)


class Recording:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def replay(self):
        self.log.append(self.name)

    def write(self, *args):
        self.log.append(("eager", args[2].shape[0]))


def graphed(sizes=(1, 2, 4, 8), width=3):
    log: list = []
    top = max(sizes)
    w = GraphedKVWriter(Recording(log, "eager"), tuple(sizes), t(np.zeros((top, width)), np.float32),
                        t(np.zeros(top)), t(np.zeros(top)), t(np.full(top, 77)))
    w.graphs = {s: Recording(log, s) for s in sizes}
    return w, log


@pytest.mark.parametrize("n, size", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, None)])
def test_graph_size_is_the_smallest_captured_size_that_holds_the_batch(n, size):
    assert graph_size((1, 2, 4, 8), n) == size


def test_prompt_sizes_are_captured_above_the_largest_decode_graph_only():
    assert sizes_to_capture([4, 1, 2, 160]) == (1, 2, 4, 160, 256, 512, 1024, 2048)
    assert sizes_to_capture([1, 300, 1024]) == (1, 300, 1024, 2048)
    assert sizes_to_capture([8, 4096]) == (8, 4096)


def test_a_batch_replays_its_graph_with_its_rows_copied_and_the_padding_pointed_at_the_pad_slot():
    w, log = graphed()
    aux = t(np.arange(9).reshape(3, 3), np.float32)
    w.write(aux, t([11, 12, 13]), t([100, 101, 102]), t([5, 6, 7]))
    assert log == [4] and w.replays == 1
    assert w.loc[:4].tolist() == [5, 6, 7, PAD_SLOT]            # row 3 of graph 4 writes the padding slot
    assert w.loc[4:].tolist() == [77] * 4                       # rows past the graph are not its business
    assert w.tokens[:3].tolist() == [11, 12, 13] and w.positions[:3].tolist() == [100, 101, 102]
    assert (w.aux[:3] == aux).all()
    w.write(aux[:2], t([1, 2]), t([3, 4]), t([9, 9]))           # exactly a captured size: nothing padded
    assert log == [4, 2] and w.loc[:4].tolist() == [9, 9, 7, PAD_SLOT]


def test_hidden_states_of_another_width_are_written_eagerly():
    w, log = graphed(sizes=(1, 2))
    w.write(t(np.zeros((2, 5)), np.float32), t([1, 2]), t([0, 1]), t([4, 5]))
    assert log == [("eager", 2)] and w.replays == 0
    assert w.loc.tolist() == [77, 77]                            # the static inputs untouched


def test_a_batch_larger_than_every_graph_replays_the_largest_chunk_by_chunk():
    w, log = graphed(sizes=(1, 2, 4))
    seen = []
    for size in (2, 4):              # what each replay finds in the static inputs
        w.graphs[size] = type("G", (), {"replay": lambda self, s=size: (log.append(s), seen.append(
            (w.tokens[:s].tolist(), w.positions[:s].tolist(), w.loc[:s].tolist(), w.aux[:s, 0].tolist())))})()
    n = 10
    w.write(t(np.arange(n * 3).reshape(n, 3), np.float32), t(range(100, 100 + n)), t(range(n)), t(range(50, 50 + n)))
    assert log == [4, 4, 2] and w.replays == 3                   # 4 + 4 + 2 rows: every row written once
    assert [row for chunk in seen for row in chunk[0]] == list(range(100, 110))
    assert [row for chunk in seen for row in chunk[1]] == list(range(10))
    assert [row for chunk in seen for row in chunk[2]] == list(range(50, 60))
    assert [row for chunk in seen for row in chunk[3]] == [3.0 * i for i in range(10)]   # each row its own aux


def test_the_plugin_uses_the_graphs_only_when_captured_and_switched_on():
    plug = Plugin({contract.ENV_DRAFT_KV_GRAPH: "1"})
    off = plug.off_path
    assert off.want_kv_graph and off.use_kv_graph
    off.fast, off.kv_writer, off.draft_kv = object(), "eager", True
    plug.router.checked, plug.router.k = True, 3
    assert off.active_writer() == "eager"                              # nothing captured: the eager writer
    problem = plug.validate_own_keys({contract.DRAFT_KV_GRAPH_KEY: True})
    assert "no draft KV graphs were captured" in problem and contract.ENV_DRAFT_KV_GRAPH in problem
    off.kv_graph = "graphs"
    assert off.active_writer() == "graphs" and plug.validate_own_keys({contract.DRAFT_KV_GRAPH_KEY: False}) is None
    plug.apply_own_keys({contract.DRAFT_KV_GRAPH_KEY: False})
    assert off.active_writer() == "eager"
    plug.apply_own_keys({contract.DRAFT_KV_GRAPH_KEY: True})
    off.kv_writer = None                                         # a writer failure drops the graphs with it
    assert off.active_writer() is None
    assert Plugin({}).off_path.want_kv_graph                     # on by default (2026-12-02e)
    assert not Plugin({contract.ENV_DRAFT_KV_GRAPH: "0"}).off_path.want_kv_graph


def test_no_graphs_at_tp_above_1_or_without_decode_graphs(monkeypatch):
    captured, graphs = [], sided()[0]
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: captured.append(a) or graphs)
    off = Plugin({contract.ENV_DRAFT_KV_GRAPH: "1"}).off_path
    off.kv_writer = "eager"
    for tp, runner in ((2, object()), (1, None)):
        off.tp_size, off.fast = tp, type("F", (), {"graph_runner": runner})()
        off._capture_kv_graphs(None)
        assert off.kv_graph is None
    off.tp_size, off.fast = 1, type("F", (), {"graph_runner": type("G", (), {"capture_bs": [1, 2]})()})()
    off._capture_kv_graphs(None)
    assert off.kv_graph is graphs and captured[0][:2] == ("eager", (1, 2, 256, 512, 1024, 2048))
    assert graphs.overlap                                        # the default: beside the next forward


COALESCE8, NO_GRAPHS = {contract.ENV_DRAFT_KV_COALESCE: "8"}, {contract.ENV_DRAFT_KV_GRAPH: "0"}
PER_WRITE = {contract.ENV_DRAFT_KV_COALESCE: "1"}


@pytest.mark.parametrize("env, captured, built", [({}, True, ["graphs"]), (COALESCE8, True, ["graphs"]),
                                                  (COALESCE8, False, ["graphs", "coalesced"]),
                                                  ({**COALESCE8, **NO_GRAPHS}, False, ["coalesced"]),
                                                  (NO_GRAPHS, False, []),
                                                  ({}, False, ["graphs"]),     # none captured (TP > 1): eager, per write
                                                  (PER_WRITE, True, ["graphs"]), (PER_WRITE, False, ["graphs"]),
                                                  ({**PER_WRITE, **NO_GRAPHS}, False, [])])   # "1": never the eager one
def test_the_default_engine_captures_graphs_and_coalesces_eagerly_only_without_them(monkeypatch, env, captured, built):
    from controller.plugin import draftkv
    from controller.plugin.offpath import OffPath
    monkeypatch.setattr(draftkv, "build", lambda runner: SimpleNamespace(projection="p"))
    log: list = []
    monkeypatch.setattr(OffPath, "_capture_kv_graphs",
                        lambda self, worker: log.append("graphs") or setattr(self, "kv_graph", "g" if captured else None))
    monkeypatch.setattr(OffPath, "_build_coalesced", lambda self, worker: log.append("coalesced"))
    off = Plugin(env).off_path
    off._build_writer(type("W", (), {"draft_worker": type("D", (), {"draft_runner": None})()})())
    assert off.kv_writer.projection == "p" and log == built


def test_the_graphs_sglang_names_hold_in_every_fast_wheel():
    from controller.contract import parse_version
    from controller.plugin import internals
    from tests.sglang_wheels import VERSIONS, name_problems, source
    fast = [v for v in VERSIONS if internals.for_version(parse_version(v))]
    assert fast
    for version in fast:
        assert name_problems(source(version), {}, draftkv_graph.ATTRIBUTES, facts=draftkv_graph.FACTS) == [], version
    wrong = ((draftkv_graph.FACTS[0][0], ".out_cache_loc.fill_(1)", "x"),)
    assert len(name_problems(source(fast[0]), {}, draftkv_graph.ATTRIBUTES, facts=wrong)) == 1


class FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_event(self, event):
        self.log.append((self.name, "waits", event.name))


class FakeEvent:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def record(self, stream):
        self.log.append((self.name, "on", stream.name))


class FakeCuda:
    """torch.cuda's streams and events as a log: which stream each operation was issued on."""

    def __init__(self, log):
        self.log, self.current = log, "forward"

    def current_stream(self, device=None):
        assert device == 3, "the streams' device index, not torch's lookup of the current device"
        return FakeStream(self.log, self.current)

    def set_stream(self, s):
        self.current = s.name


class Logged(T):
    """A static input that logs each fill ("inputs"): when it is refilled against the streams' events."""

    def __array_finalize__(self, obj):
        self.log = getattr(obj, "log", None)

    def copy_(self, src):
        self.log.append("inputs")
        return super().copy_(src)

    def fill_(self, value):
        self.log.append("inputs")
        return super().fill_(value)


def logged(array, log) -> Logged:
    out = array.view(Logged)
    out.log = log
    return out


def squeezed(log) -> list:
    """The log with each run of "inputs" as one."""
    return [e for i, e in enumerate(log) if not (e == "inputs" and i and log[i - 1] == "inputs")]


def sided(sizes=(1, 2, 4)):
    w, log = graphed(sizes)
    w.aux, w.tokens, w.positions, w.loc = (logged(a, log) for a in (w.aux, w.tokens, w.positions, w.loc))
    cuda = FakeCuda(log)
    w.side = draftkv_graph.SideStream(cuda, FakeStream(log, "side"), FakeEvent(log, "ready"), FakeEvent(log, "done"),
                                      device=3)
    w.graphs = {s: type("G", (), {"replay": lambda self, s=s: log.append((s, "replayed on", cuda.current))})()
                for s in sizes}
    return w, log


def test_with_the_side_stream_on_a_replay_runs_there_after_its_inputs_and_the_next_write_waits_for_it():
    w, log = sided()
    w.overlap = True
    aux = t(np.ones((3, 3)), np.float32)
    w.write(aux, t([1, 2, 3]), t([0, 1, 2]), t([5, 6, 7]))
    assert squeezed(log) == ["inputs", ("ready", "on", "forward"), ("side", "waits", "ready"),
                             (4, "replayed on", "side"), ("done", "on", "side")]     # ready once they are filled
    assert w.side.pending and w.replays == 1 and w.side_replays == 1
    log.clear()
    w.write(aux[:1], t([4]), t([3]), t([8]))
    assert squeezed(log) == [("forward", "waits", "done"),   # the static inputs refilled only after the last replay
                             "inputs", ("ready", "on", "forward"), ("side", "waits", "ready"),
                             (1, "replayed on", "side"), ("done", "on", "side")]
    log.clear()
    w.wait()
    w.wait()                                                # once waited for, nothing more to wait for
    assert log == [("forward", "waits", "done")] and not w.side.pending


def test_with_the_side_stream_off_replays_stay_in_line_after_a_pending_one_and_eager_writes_wait_too():
    w, log = sided(sizes=(1, 2))
    w.overlap = True
    w.write(t(np.ones((2, 3)), np.float32), t([1, 2]), t([0, 1]), t([5, 6]))
    w.overlap = False                                       # switched at run time with a replay pending
    log.clear()
    w.write(t(np.ones((1, 3)), np.float32), t([1]), t([0]), t([5]))
    assert squeezed(log) == [("forward", "waits", "done"), "inputs", (1, "replayed on", "forward")]
    assert w.side_replays == 1
    w.overlap = True
    w.write(t(np.ones((1, 3)), np.float32), t([1]), t([0]), t([5]))
    log.clear()
    w.write(t(np.zeros((2, 5)), np.float32), t([1, 2]), t([0, 1]), t([4, 5]))   # another width: the eager writer
    assert log == [("forward", "waits", "done"), ("eager", 2)]


def test_each_chunk_of_a_batch_larger_than_every_graph_waits_for_the_one_before_on_the_side_stream():
    w, log = sided(sizes=(1, 2))
    w.overlap = True
    w.write(t(np.ones((5, 3)), np.float32), t(range(5)), t(range(5)), t(range(10, 15)))
    one = lambda size: ["inputs", ("ready", "on", "forward"), ("side", "waits", "ready"),
                        (size, "replayed on", "side"), ("done", "on", "side")]
    wait = [("forward", "waits", "done")]
    assert squeezed(log) == one(2) + wait + one(2) + wait + one(1)


def test_a_replay_that_fails_to_launch_is_still_waited_for():
    w, log = sided(sizes=(1,))
    w.overlap = True
    w.graphs[1] = type("G", (), {"replay": lambda self: 1 / 0})()
    with pytest.raises(ZeroDivisionError):
        w.write(t(np.ones((1, 3)), np.float32), t([1]), t([0]), t([5]))
    log.clear()
    w.wait()
    assert log == [("forward", "waits", "done")]


@pytest.mark.parametrize("args, why", [(dict(enable_hierarchical_cache=True), "hierarchical cache"),
                                       (dict(enable_unified_cache_external_linker=True), "external cache linker"),
                                       (dict(disaggregation_mode="decode"), "disaggregation")])
def test_engines_whose_draft_pool_has_outside_readers_replay_in_line(monkeypatch, args, why):
    from types import SimpleNamespace
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: sided()[0])
    plug = Plugin({})
    off = plug.off_path
    off.kv_writer, off.tp_size, off.draft_kv = "eager", 1, True
    off.fast = type("F", (), {"graph_runner": type("G", (), {"capture_bs": [1, 2]})()})()
    off._capture_kv_graphs(SimpleNamespace(server_args=SimpleNamespace(**args)))
    assert off.kv_graph is not None and not off.kv_graph.overlap and why in off.kv_graph.side_why
    plug.apply_own_keys({contract.DRAFT_KV_SIDE_KEY: True})
    assert not off.kv_graph.overlap
    plug.router.checked, plug.router.k = True, 3
    assert why in plug.validate_own_keys({contract.DRAFT_KV_SIDE_KEY: True})
    assert plug.validate_own_keys({contract.DRAFT_KV_SIDE_KEY: False}) is None


def test_the_side_streams_switch_reaches_the_graphs_and_needs_them():
    plug = Plugin({})
    off = plug.off_path
    assert off.kv_side and not Plugin({contract.ENV_DRAFT_KV_SIDE: "0"}).off_path.kv_side   # on by default (12-03i)
    off.fast, off.kv_writer, off.draft_kv = object(), "eager", True
    plug.router.checked, plug.router.k = True, 3
    problem = plug.validate_own_keys({contract.DRAFT_KV_SIDE_KEY: True})
    assert "no draft KV graphs were captured" in problem
    off.kv_graph, _ = sided()
    plug.apply_own_keys({contract.DRAFT_KV_SIDE_KEY: False})
    assert not off.kv_graph.overlap and not off.kv_side
    plug.apply_own_keys({contract.DRAFT_KV_SIDE_KEY: True})
    assert off.kv_graph.overlap


@pytest.mark.parametrize("env, overlap", [({}, True), ({contract.ENV_DRAFT_KV_SIDE: "0"}, False)])
def test_a_capture_takes_the_wanted_side_stream_setting(monkeypatch, env, overlap):
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: sided()[0])
    off = Plugin(env).off_path
    off.kv_writer, off.tp_size = "eager", 1
    off.fast = type("F", (), {"graph_runner": type("G", (), {"capture_bs": [1, 2]})()})()
    off._capture_kv_graphs(None)
    assert off.kv_graph.overlap is overlap


def later_wins(loc):
    """draftkv_coalesce.last_write_wins in numpy: each slot's earlier rows pointed at the pad slot."""
    out = np.asarray(loc).copy()
    for i, slot in enumerate(out):
        if slot in out[i + 1:]:
            out[i] = PAD_SLOT
    return out


def coalescing(batches=3, sizes=(1, 2, 4, 8), side=False):
    """A writer holding `batches` writes per replay; each replay records what its static inputs held."""
    w, log = sided(sizes) if side else graphed(sizes)
    w.overlap = side
    w.coalesce_batches = batches
    w.use_coalesce(True)
    w.dedupe = later_wins
    seen = []
    for s in sizes:
        w.graphs[s] = type("G", (), {"replay": lambda self, s=s: (log.append(("replay", s)), seen.append(
            (w.loc[:s].tolist(), w.tokens[:s].tolist())))})()
    return w, log, seen


def dedupe_logged(w, log):
    """later_wins that logs the stream it runs on (the side stream's fake cuda)."""
    cuda = w.side.cuda
    return lambda loc: (log.append(("dedupe on", cuda.current)), later_wins(loc))[1]


def one_row(token, slot):
    return t(np.full((1, 3), token), np.float32), t([token]), t([token]), t([slot])


def test_coalesced_writes_replay_once_per_n_batches_in_write_order_padded_to_the_graph():
    w, log, seen = coalescing(batches=3)
    w.write(t(np.ones((2, 3)), np.float32), t([1, 2]), t([0, 0]), t([10, 11]))
    w.write(t(np.ones((2, 3)), np.float32), t([3, 4]), t([1, 1]), t([12, 13]))
    assert seen == [] and w.rows == 4 and w.replays == 2        # held: nothing written yet
    w.write(*one_row(5, 14))
    assert seen == [([10, 11, 12, 13, 14, PAD_SLOT, PAD_SLOT, PAD_SLOT], [1, 2, 3, 4, 5, 0, 0, 0])]
    assert w.launches == 1 and w.replays == 3 and w.rows == 0
    w.write(*one_row(6, 15))                                   # the next window starts at row 0
    w.wait()
    assert seen[-1] == ([15], [6]) and w.launches == 2


def rows_of(n, first_slot):
    return (t(np.ones((n, 3)), np.float32), t(np.arange(n)), t(np.arange(n)), t(np.arange(first_slot, first_slot + n)))


@pytest.mark.parametrize("batch, writes_per_replay", [(16, 8), (1, 8), (48, 2), (64, 2), (65, 1), (100, 1), (128, 1)])
def test_writes_coalesce_up_to_the_row_cap_so_a_large_batch_replays_each_write_alone(batch, writes_per_replay):
    """8 writes a replay where the write is bound by reading the draft's weights (small batches); a write that would
    take the replay past COALESCE_ROWS replays what is buffered with it, so at batch 128 each write is its own replay
    (no dedupe): the 8 x 128-row replays gained nothing at closed 128 (bench/results/h100-2026-12-08)."""
    assert draftkv_graph.COALESCE_ROWS == 128
    w, log, seen = coalescing(batches=8, sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256))
    w.dedupe = lambda loc: (log.append("dedupe"), later_wins(loc))[1]
    for k in range(16):
        w.write(*rows_of(batch, 1000 * k))
    assert w.launches == 16 // writes_per_replay and w.rows == 0 and w.held == 0
    assert log.count("dedupe") == (w.launches if writes_per_replay > 1 else 0)
    # every replay holds whole writes, in order: its first slot is a write's first
    assert [s[0][0] for s in seen] == [1000 * k for k in range(0, 16, writes_per_replay)]


@pytest.mark.parametrize("held, larger", [(60, 70), (64, 65), (16, 120), (1, 128)])
def test_a_larger_write_behind_held_rows_replays_them_first_so_no_two_writes_pass_the_row_cap(held, larger):
    """_added foresees a next write of its own size; a larger one behind the held rows (batch 60, then 70 as requests
    arrive) went in beside them, one replay of 130 rows in the 256-row graph: the held rows are replayed first, as
    the cap's words say, and the larger write alone."""
    w, log, seen = coalescing(batches=8, sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256))
    w.write(*rows_of(held, 1000))
    assert seen == [] and w.rows == held                       # held: another write of its size would fit
    w.write(*rows_of(larger, 2000))
    assert [s[0][:n] for s, n in zip(seen, (held, larger))] == [list(range(1000, 1000 + held)),
                                                               list(range(2000, 2000 + larger))]
    assert all(slot == PAD_SLOT for s, n in zip(seen, (held, larger)) for slot in s[0][n:])
    assert (w.launches, w.replays, w.rows, w.held) == (2, 2, 0, 0)


def test_a_slot_buffered_twice_is_written_with_its_later_row_only():
    w, log, seen = coalescing(batches=3)
    w.write(*one_row(1, 40))       # a request's last token; it finished and its slot went to another request
    w.write(*one_row(2, 41))
    w.write(*one_row(3, 40))
    assert seen == [([PAD_SLOT, 41, 40, PAD_SLOT], [1, 2, 3, 0])]
    w.use_coalesce(False)                                      # one write per replay: nothing to dedupe
    w.dedupe = lambda loc: 1 / 0
    w.write(*one_row(4, 40))
    assert seen[-1] == ([40], [4])


def test_a_write_that_does_not_fit_beside_the_buffered_rows_replays_them_first():
    w, log, seen = coalescing(batches=8, sizes=(1, 2, 4))
    w.write(t(np.ones((3, 3)), np.float32), t([1, 2, 3]), t([0, 1, 2]), t([5, 6, 7]))
    w.write(t(np.ones((2, 3)), np.float32), t([8, 9]), t([3, 4]), t([1, 2]))
    assert seen == [([5, 6, 7, PAD_SLOT], [1, 2, 3, 0])] and w.rows == 2
    w.write(t(np.ones((2, 3)), np.float32), t([4, 4]), t([5, 6]), t([3, 9]))         # fills the largest graph
    assert seen[-1] == ([1, 2, 3, 9], [8, 9, 4, 4]) and w.rows == 0


def test_buffered_rows_go_in_before_an_eager_or_chunked_write_of_the_same_slots():
    w, log, seen = coalescing(batches=4, sizes=(1, 2))
    w.write(*one_row(1, 30))
    w.write(t(np.zeros((1, 5)), np.float32), t([2]), t([0]), t([30]))               # another width: eager
    assert log == [("replay", 1), ("eager", 1)]                # the older row first, the eager one wins
    log.clear()
    w.write(*one_row(3, 31))
    w.write(t(np.ones((3, 3)), np.float32), t([4, 5, 6]), t([0, 1, 2]), t([31, 32, 33]))   # chunked
    assert log == [("replay", 1), ("replay", 2)] and w.rows == 1   # a full chunk replays; the rest is held
    w.wait()
    assert [s[0] for s in seen[-3:]] == [[31], [31, 32], [33]]


def test_coalesced_replays_on_the_side_stream_dedupe_there_after_every_buffered_input():
    w, log, seen = coalescing(batches=2, sizes=(1, 2, 4), side=True)
    w.dedupe = dedupe_logged(w, log)
    w.write(*one_row(1, 20))
    w.write(*one_row(2, 21))
    assert squeezed(log) == ["inputs", ("ready", "on", "forward"), ("side", "waits", "ready"),
                             ("dedupe on", "side"), "inputs", ("replay", 2), ("done", "on", "side")]
    assert w.side_replays == 2 and w.launches == 1 and w.side.pending
    log.clear()
    w.write(*one_row(3, 22))                                   # refills row 0: after the replay read it
    assert squeezed(log) == [("forward", "waits", "done"), "inputs"]


def test_sglangs_own_batch_finds_the_buffered_rows_written(monkeypatch):
    from controller.plugin import fastoff
    from tests.test_offpath_cpu import Recorder, decode_batch, routed_worker
    plug = Plugin({contract.ENV_DRAFT_KV_COALESCE: "4"})
    off = plug.off_path
    off.fast = SimpleNamespace(batches=0, graph_batches=0, cpu_ns=0, with_hidden=True, grammar=False)
    w, log, seen = coalescing(batches=4)
    off.kv_graph, off.kv_writer, off.draft_kv = w, "eager", True
    monkeypatch.setattr(fastoff, "run", lambda worker, f, batch, *a, **k: a[2].write(*one_row(7, 70)) or "fast")
    plug.router.checked, plug.router.k, plug.router.threshold = True, 3, 8
    worker = routed_worker(plug)
    for _ in range(2):
        off.forward_batch_generation(Recorder().original, worker, decode_batch(30), "pub")
    assert seen == [] and w.rows == 2                          # off after off: held
    rec = Recorder()
    off.forward_batch_generation(rec.original, worker, decode_batch(4), "pub")       # speculates
    assert seen == [([PAD_SLOT, 70], [7, 7])] and rec.calls == [("sglang", 4)]


def test_the_coalescing_switch_reaches_the_graphs_and_is_refused_where_nothing_coalesces():
    plug = Plugin({})
    off = plug.off_path
    off.fast, off.kv_writer, off.draft_kv = object(), "eager", True
    plug.router.checked, plug.router.k = True, 3
    off.kv_graph, _, _ = coalescing(batches=1)
    off.kv_graph.coalesce_batches = 1
    assert "does not coalesce" in plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: True})
    off.kv_graph.coalesce_batches = 8
    assert plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: True}) is None
    plug.apply_own_keys({contract.DRAFT_KV_COALESCE_KEY: False})
    assert off.kv_graph.batches == 1
    plug.apply_own_keys({contract.DRAFT_KV_COALESCE_KEY: True})
    assert off.kv_graph.batches == 8


HICACHE = dict(enable_hierarchical_cache=True)


@pytest.mark.parametrize("env, args, tp, says", [
    (PER_WRITE, {}, 1, "COALESCE unset (the graphs: 8 writes a replay) or 2 .. 64"),   # started with "1"
    ({}, HICACHE, 1, "not in this engine: the hierarchical cache"),   # not warned at start (not asked): the reason here
    ({}, {}, 2, "not in this engine: TP > 1")])                      # no graphs at TP > 1, and no eager coalescing
def test_the_refused_coalescing_switch_says_what_to_do(monkeypatch, env, args, tp, says):
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: sided()[0])
    plug = Plugin(env)
    off = plug.off_path
    off.kv_writer, off.tp_size, off.draft_kv = "eager", tp, True
    off.fast = type("F", (), {"graph_runner": type("G", (), {"capture_bs": [1, 2]})()})()
    plug.router.checked, plug.router.k = True, 3
    off._capture_kv_graphs(SimpleNamespace(server_args=SimpleNamespace(**args)))
    assert says in plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: True})
    assert plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: False}) is None


@pytest.mark.parametrize("env, args, batches, warned", [
    ({}, {}, 8, False),                                           # the default since 12-04b
    ({contract.ENV_DRAFT_KV_COALESCE: "8"}, {}, 8, False), ({contract.ENV_DRAFT_KV_COALESCE: "3"}, {}, 3, False),
    ({contract.ENV_DRAFT_KV_COALESCE: "1"}, {}, 1, False),        # each write its own replay, as before 12-04b
    ({contract.ENV_DRAFT_KV_COALESCE: "x"}, {}, 8, False),        # ignored (logged when read): the default
    ({}, HICACHE, 1, False),                                      # outside readers: in line, per write, quietly
    ({contract.ENV_DRAFT_KV_COALESCE: "8"}, HICACHE, 1, True)])   # ... and asked for: a warning says why not
def test_a_capture_coalesces_as_started_unless_the_pool_has_outside_readers(monkeypatch, caplog, env, args, batches,
                                                                            warned):
    monkeypatch.setattr(draftkv_graph, "capture", lambda *a: sided()[0])
    off = Plugin(env).off_path
    off.kv_writer, off.tp_size = "eager", 1
    off.fast = type("F", (), {"graph_runner": type("G", (), {"capture_bs": [1, 2]})()})()
    with caplog.at_level("WARNING", logger="spec_controller.plugin"):
        off._capture_kv_graphs(SimpleNamespace(server_args=SimpleNamespace(**args)))
    assert off.kv_graph.batches == batches and off.coalesces() is (batches > 1)
    assert ("not coalesced" in caplog.text) is warned


def test_the_writers_cpu_is_counted_once_a_write_chunked_or_not(monkeypatch):
    """write_ns: what status reports as a prompt write's share in the graphed writer. A write of more rows than any
    graph goes chunk by chunk inside it: still one write's time, not one per chunk on top of the whole."""
    clock = iter(range(0, 10_000_000, 1000))
    monkeypatch.setattr(draftkv_graph.time, "perf_counter_ns", lambda: next(clock))
    w, log = graphed()
    w.write(t(np.ones((3, 3)), np.float32), t([1, 2, 3]), t([0, 1, 2]), t([5, 6, 7]))
    assert w.write_ns == 1000
    w.write(t(np.ones((9, 3)), np.float32), t(range(9)), t(range(9)), t(range(10, 19)))     # 8 + 1 rows
    assert w.write_ns == 2000 and log.count(8) >= 1


def test_a_side_stream_asks_for_its_own_devices_current_stream_by_index():
    """SideStream.create keeps the side stream's device index, and replay() and wait() pass it whenever they ask for
    the current (forward) stream: torch.cuda.current_stream(None) looks the device up through NVML checks (~50 us a
    call inside each prefill's CPU-bound launch). FakeCuda refuses any other device."""
    log: list = []
    events = iter(["ready", "done"])

    class Cuda(FakeCuda):
        def Stream(self, priority=0):
            stream = FakeStream(log, "side")
            stream.device_index, stream.priority = 3, priority
            return stream

        def Event(self):
            return FakeEvent(log, next(events))
    side = draftkv_graph.SideStream.create(Cuda(log))
    assert side.device == 3 and side.stream.priority == -1
    side.replay(SimpleNamespace(replay=lambda: log.append(("replayed on", side.cuda.current))))
    side.wait()
    assert log == [("ready", "on", "forward"), ("side", "waits", "ready"), ("replayed on", "side"),
                   ("done", "on", "side"), ("forward", "waits", "done")]
    assert side.cuda.current == "forward" and not side.pending


def test_a_write_that_does_not_fit_beside_the_buffered_rows_waits_for_their_side_replay_before_refilling():
    """The buffered rows replayed on the side stream to make room for a write (_take): the forward stream waits for
    that replay before the write refills the static inputs the replay reads."""
    w, log, seen = coalescing(batches=8, sizes=(1, 2, 4), side=True)
    w.write(t(np.ones((3, 3)), np.float32), t([1, 2, 3]), t([0, 1, 2]), t([5, 6, 7]))
    log.clear()
    w.write(t(np.ones((2, 3)), np.float32), t([8, 9]), t([3, 4]), t([1, 2]))
    assert squeezed(log) == ["inputs", ("ready", "on", "forward"), ("side", "waits", "ready"), ("replay", 4),
                             ("done", "on", "side"), ("forward", "waits", "done"), "inputs"]
    assert seen == [([5, 6, 7, PAD_SLOT], [1, 2, 3, 0])] and w.rows == 2
