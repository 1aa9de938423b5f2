"""controller/plugin/draftkv.prompt_rows_of / stage_prefill on torch (CPU): the rows a prefill's draft-KV write hands
the writer, whether written at once or held (promptkv), against SGLang's own loop over requests; held rows are
copies, so what the batch's tensors become later does not reach them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from controller.plugin import draftkv, promptkv  # noqa: E402


pytestmark = pytest.mark.usefixtures("sglang_eagle_utils")     # (tests/conftest.py)


class Writer:
    def __init__(self):
        self.calls = []

    def write(self, aux, tokens, positions, loc):
        self.calls.append((aux.clone(), tokens.clone(), positions.clone(), loc.clone()))


def batch():
    """Two requests: 3 new tokens after a cached prefix of 5, and 2 from scratch."""
    return SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: False),
                           input_ids=torch.tensor([11, 12, 13, 21, 22]), out_cache_loc=torch.tensor([50, 51, 52, 60, 61]),
                           extend_lens=[3, 2], prefix_lens=[5, 0])


def sglang_rows(b, next_ids):
    """SGLang's draft prefill, per request: at each position the following token, the last one the tail token."""
    tokens, positions, start = [], [], 0
    for r, (n, prefix) in enumerate(zip(b.extend_lens, b.prefix_lens)):
        ids = b.input_ids[start:start + n].tolist()
        tokens += ids[1:] + [int(next_ids[r])]
        positions += list(range(prefix, prefix + n))
        start += n
    return tokens, positions


@pytest.mark.parametrize("held", [False, True])
def test_a_prompts_rows_are_sglangs_whether_written_at_once_or_held(held):
    b, next_ids, aux = batch(), torch.tensor([99, 98]), torch.arange(10.0).reshape(5, 2)
    writes, writer = promptkv.PromptWrites(defer=held), Writer()
    writes.why_not = None                        # a TP 1 engine without outside readers of the draft's pool
    assert writes.write(writer, b, aux, next_ids)
    if held:
        assert writer.calls == [] and writes.pending_for(writer)
        b.input_ids[:] = 0                       # the batch's tensors reused after the prefill ...
        b.out_cache_loc[:] = 0
        aux[:] = -1                              # ... and the target's output buffer overwritten
        b = batch()
        assert writes.stage() and not writes.pending_for(writer)
    (got_aux, tokens, positions, loc), = writer.calls
    assert (tokens.tolist(), positions.tolist()) == sglang_rows(b, next_ids)
    assert loc.tolist() == [50, 51, 52, 60, 61] and got_aux.tolist() == torch.arange(10.0).reshape(5, 2).tolist()


def test_an_idle_batch_holds_nothing():
    b = batch()
    b.forward_mode = SimpleNamespace(is_idle=lambda: True)
    writes = promptkv.PromptWrites(defer=True)
    writes.why_not = None
    assert not writes.write(Writer(), b, torch.zeros(5, 2), torch.tensor([1, 2])) and not writes.holding()
    assert draftkv.prompt_rows_of(b, None, None) is None and not writes.stage()


def test_prompts_back_to_back_are_held_together_up_to_the_caps_and_staged_oldest_first(monkeypatch):
    """Prefills often follow each other under arrivals: each is held (none staged inside the next extend's launch)
    until MAX_HELD_PROMPTS or MAX_HELD_BYTES would be passed, or another writer takes rows; then those held go first.
    (The rows here: 2 float32 aux values, 8 bytes each.)"""
    writes, writer, other = promptkv.PromptWrites(defer=True), Writer(), Writer()
    writes.why_not = None
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 12 * 8)
    engaged = []
    monkeypatch.setattr(promptkv.log, "info", lambda msg, *a: engaged.append("held until the next decode" in msg))
    firsts = []
    for first in (11, 31, 41):                   # 5 tokens each: 15 would pass 12 rows
        b = batch()
        b.input_ids = torch.tensor([first, first + 1, first + 2, 21, 22])
        firsts.append(first)
        assert writes.write(writer, b, torch.zeros(5, 2), torch.tensor([99, 98]))
        if first == 31:
            assert writer.calls == [] and len(writes.queue) == 2 and writes.queued_rows == 10
    assert [c[1][0].item() for c in writer.calls] == [12, 32]      # the two held went in, oldest first ...
    assert len(writes.queue) == 1 and writes.queued_rows == 5       # ... when the third would pass the rows' cap
    assert writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))   # another writer: staged first
    assert [c[1][0].item() for c in writer.calls] == [12, 32, 42] and other.calls == [] and writes.pending_for(other)
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 1000 * 8)
    for _ in range(promptkv.MAX_HELD_PROMPTS):                     # the prompts' cap
        writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    assert len(other.calls) == promptkv.MAX_HELD_PROMPTS and len(writes.queue) == 1
    assert writes.stage() and not writes.holding() and writes.queued_rows == 0 and not writes.stage()
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 10 * 8)             # exactly the cap: held together
    writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    assert len(writes.queue) == 2 and writes.queued_rows == 10
    writes.stage()
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 5 * 8)              # one prompt fits, held
    writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    assert len(writes.queue) == 1 and writes.queued_rows == 5
    calls = len(other.calls)
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 3 * 8)              # a prompt over the cap: written at once,
    writes.write(other, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))      # after the one held
    assert len(other.calls) == calls + 2 and not writes.holding() and writes.queued_rows == 0
    assert writes.held == 3 + 1 + promptkv.MAX_HELD_PROMPTS + 3
    assert engaged.count(True) == 1                            # said once, at the first prompt held


def test_a_failed_staging_drops_every_held_prompt(monkeypatch):
    writes = promptkv.PromptWrites(defer=True)
    writes.why_not = None
    writer = Writer()
    for _ in range(3):
        writes.write(writer, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    assert len(writes.queue) == 3 and writer.calls == []
    monkeypatch.setattr(draftkv, "stage_prefill", lambda w, rows: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        writes.stage()
    assert not writes.holding() and writes.queued_rows == 0


def test_a_prompt_that_passes_a_cap_stages_the_held_ones_before_it_is_copied(monkeypatch):
    """The held prompts' memory goes back before the next prompt's copies are made (peak: the cap, not cap + one)."""
    writes, writer, order = promptkv.PromptWrites(defer=True), Writer(), []
    writes.why_not = None
    monkeypatch.setattr(promptkv, "MAX_HELD_PROMPTS", 1)
    real = draftkv.prompt_rows_of
    monkeypatch.setattr(draftkv, "prompt_rows_of", lambda *a, **k: order.append("copy") or real(*a, **k))
    monkeypatch.setattr(writer, "write", lambda *a: order.append("staged"))
    writes.write(writer, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    writes.write(writer, batch(), torch.zeros(5, 2), torch.tensor([99, 98]))
    assert order == ["copy", "staged", "copy"]


def test_the_held_rows_cap_is_in_bytes_so_a_wider_model_holds_fewer_tokens(monkeypatch):
    """The aux copies' memory, not their token count, is capped: at twice the width half the tokens are held."""
    monkeypatch.setattr(promptkv, "MAX_HELD_BYTES", 10 * 8)        # 10 rows of 2 float32 values
    for width, held_together in ((2, 2), (4, 1)):                  # two 5-token prompts: 80 bytes, then 160
        writes, writer = promptkv.PromptWrites(defer=True), Writer()
        writes.why_not = None
        for _ in range(2):
            writes.write(writer, batch(), torch.zeros(5, width), torch.tensor([99, 98]))
        assert len(writes.queue) == held_together and len(writer.calls) == 2 - held_together
        assert promptkv.row_bytes(torch.zeros(5, width)) == 4 * width


class SlotPool:
    """A draft pool keeping, per slot, the (aux row sum, token, position) its last write stored."""

    def __init__(self, slots: int = 400):
        self.kv = torch.full((slots, 3), -1.0, dtype=torch.float64)

    def write(self, aux, tokens, positions, loc):
        self.kv[loc] = torch.stack([aux.sum(-1).double(), tokens.double(), positions.double()], dim=1)


def graphed(pool, sizes=(1, 2, 4, 8, 16, 32), batches=3, room=2):
    """The graphed writer as capture() builds it (positions `room` x the largest graph), its graphs the eager
    write of their static inputs' first `size` rows; writes coalesced `batches` to a replay."""
    from controller.plugin import draftkv_graph
    top = sizes[-1]
    w = draftkv_graph.GraphedKVWriter(pool, sizes, torch.zeros(top, 2), torch.zeros(top, dtype=torch.int64),
                                      torch.zeros(room * top, dtype=torch.int64), torch.zeros(top, dtype=torch.int64))
    w.graphs = {s: SimpleNamespace(replay=lambda s=s: pool.write(w.aux[:s], w.tokens[:s], w.positions[:s], w.loc[:s]))
                for s in sizes}
    w.coalesce_batches = batches
    w.use_coalesce(True)
    return w


def test_a_prompt_written_straight_into_the_graphs_inputs_leaves_the_pool_as_the_generic_write_does():
    """Random prompts (1-4 requests, cached prefixes, 1-40 tokens: some above the largest graph, which the generic
    write chunks) between decode writes, slots reused, replays coalesced: the pool after the direct writes
    (write_prompt) equals the pool after the generic ones and holds SGLang's rows for every prompt's slots."""
    import random
    from controller.plugin import draftkv_graph
    rnd = random.Random(7)
    direct_pool, generic_pool, expected = SlotPool(), SlotPool(), {}
    direct, generic = graphed(direct_pool), graphed(generic_pool, room=1)     # room 1: write_prompt declines
    took = []
    real = draftkv_graph.GraphedKVWriter.write_prompt
    for step in range(60):
        if rnd.random() < 0.4:             # an off decode batch: one row a request
            n = rnd.randint(1, 12)
            loc = torch.tensor(rnd.sample(range(1, 400), n))
            args = (torch.rand(n, 2), torch.randint(0, 1000, (n,)), torch.randint(0, 5000, (n,)), loc)
            for w in (direct, generic):
                w.write(*args)
            for i, slot in enumerate(loc.tolist()):
                expected[slot] = (float(args[0][i].sum()), float(args[1][i]), float(args[2][i]))
            continue
        extend = [rnd.randint(1, 16) for _ in range(rnd.randint(1, 4))]
        prefix = [rnd.choice([0, 0, rnd.randint(1, 300)]) for _ in extend]
        n = sum(extend)
        b = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: False), extend_lens=extend, prefix_lens=prefix,
                            input_ids=torch.randint(0, 1000, (n,)),
                            out_cache_loc=torch.tensor(rnd.sample(range(1, 400), n)))
        # (hidden states with rows past the prompt's: a padded prefill output, of which the write takes n)
        aux, next_ids = torch.rand(n + rnd.choice([0, 0, 3]), 2), torch.randint(0, 1000, (len(extend),))
        for w in (direct, generic):
            calls = []
            w.write_prompt = lambda *a, w=w: calls.append(real(w, *a)) or calls[-1]
            assert draftkv.write_prefill(w, b, aux, next_ids)
            took.append(calls)
        tokens, positions = sglang_rows(b, next_ids)
        for i, slot in enumerate(b.out_cache_loc.tolist()):
            expected[slot] = (float(aux[i].sum()), float(tokens[i]), float(positions[i]))
    for w in (direct, generic):
        w.wait()
    assert torch.allclose(direct_pool.kv, generic_pool.kv)
    want = torch.tensor([expected[s] for s in sorted(expected)], dtype=torch.float64)
    assert torch.allclose(direct_pool.kv[sorted(expected)], want)
    # both paths ran: the direct write took the prompts that fit a graph, declined those above it (chunked)
    direct_took, generic_took = took[0::2], took[1::2]
    assert {tuple(c) for c in generic_took} == {(False,)} and [True] in direct_took and [False] in direct_took
    assert direct.direct_prompts == direct_took.count([True]) and generic.direct_prompts == 0    # status counts them
    assert direct.launches < direct.replays


def test_the_direct_prompt_write_launches_five_kernels_and_the_generic_one_seven():
    """What the direct path is for: fewer device operations inside each prefill's CPU-bound launch (slices and
    views are free on the device; copies, index_put and allocations are not)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name not in ("slice", "view", "lift_fresh", "alias", "select", "detach"):
                self.ops.append(name)
            return func(*args, **(kwargs or {}))
    b = batch()
    counts = []
    from controller.plugin.hostrows import HostRows
    aux, next_ids = torch.rand(5, 2), torch.tensor([99, 98])
    for room in (2, 1):
        w = graphed(SlotPool(), batches=8, room=room)
        w.host_rows = HostRows.make(w.positions.shape[0], w.positions.device)   # (made at the engine's first prompt)
        with Count() as c:
            draftkv.write_prefill(w, b, aux, next_ids)
        counts.append(sorted(c.ops))
    assert counts[0] == ["copy_"] * 4 + ["index_put_"]
    assert counts[1] == ["copy_"] * 5 + ["empty_like", "index_put_"]


def test_captured_graphs_replay_the_eager_write_of_their_rows_for_prompts_and_decodes(monkeypatch):
    """draftkv_graph.capture on CPU torch with torch.cuda's graph API stood in (a graph records the eager write it
    captured, with the static inputs' views, and replays it): the warm-up and every graph see inputs of one row
    count, and prompts written straight into the static inputs land in the pool as SGLang's rows."""
    import contextlib
    from controller.plugin import draftkv_graph

    class Eager:
        model = SimpleNamespace(fc=SimpleNamespace(weight=torch.zeros(4, 2)))      # aux width 2

        def __init__(self):
            self.pool, self.capturing, self.shapes = SlotPool(), None, []

        def write(self, aux, tokens, positions, loc):
            self.shapes.append((aux.shape[0], tokens.shape[0], positions.shape[0], loc.shape[0]))
            if self.capturing is not None:
                self.capturing.body = lambda: self.pool.write(aux, tokens, positions, loc)
            else:
                self.pool.write(aux, tokens, positions, loc)

    eager = Eager()

    class Graph:
        body = None

        def replay(self):
            self.body()

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None):
        eager.capturing = g
        yield
        eager.capturing = None
    stream = SimpleNamespace(wait_stream=lambda s: None, wait_event=lambda e: None)
    fakes = dict(CUDAGraph=Graph, graph=graph, graph_pool_handle=lambda: None, synchronize=lambda: None,
                 current_stream=lambda device=None: stream, stream=lambda s: contextlib.nullcontext(),
                 set_stream=lambda s: None,
                 Stream=lambda priority=0: stream, Event=lambda: SimpleNamespace(record=lambda s=None: None))
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake, raising=False)
    w = draftkv_graph.capture(eager, (1, 2, 4, 8), contextlib.nullcontext)
    assert all(a == t == p == c for a, t, p, c in eager.shapes) and [s[0] for s in eager.shapes] == [8, 8, 4, 2, 1]
    assert sorted(w.graphs) == [1, 2, 4, 8] and w.positions.shape[0] == 16
    w.coalesce_batches = 2
    w.use_coalesce(True)
    b = batch()
    aux, next_ids = torch.rand(5, 2), torch.tensor([99, 98])
    w.write(torch.rand(2, 2), torch.tensor([5, 6]), torch.tensor([40, 41]), torch.tensor([70, 71]))   # a decode's
    assert draftkv.write_prefill(w, b, aux, next_ids) and w.launches == 1    # replayed with the decode's rows
    tokens, positions = sglang_rows(b, next_ids)
    assert eager.pool.kv[[50, 51, 52, 60, 61], 1].tolist() == tokens
    assert eager.pool.kv[[50, 51, 52, 60, 61], 2].tolist() == positions
    assert eager.pool.kv[[70, 71], 1].tolist() == [5, 6]


def test_a_direct_prompt_write_waits_for_the_last_side_replay_before_refilling_the_inputs():
    """With the replays on a side stream, the static inputs are refilled only once the forward stream waits for the
    last replay (it may still be reading them): write_prompt as write(); a prompt behind buffered rows puts its tail
    tokens at its own rows."""
    log: list = []
    w = graphed(SlotPool(), batches=1)

    class Side:
        pending = False

        def wait(self):
            if self.pending:                    # what the inputs hold when the forward stream waits
                log.append(("wait", w.loc[:3].tolist()))
                self.pending = False

        def replay(self, graph, before=None):
            graph.replay()
            self.pending = True
            log.append("replay")
    w.side = Side()
    w.use_side(True)
    w.write(torch.rand(3, 2), torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), torch.tensor([70, 71, 72]))
    w.rows, w.held, w.batches = 0, 0, 8
    assert log == ["replay"] and w.side.pending
    b = batch()
    assert draftkv.write_prefill(w, b, torch.rand(5, 2), torch.tensor([99, 98]))
    assert log == ["replay", ("wait", [70, 71, 72])]          # waited before the prompt's rows went in
    w.write(torch.rand(1, 2), torch.tensor([9]), torch.tensor([9]), torch.tensor([80]))    # behind buffered rows: r > 0
    assert draftkv.write_prefill(w, b, torch.rand(5, 2), torch.tensor([97, 96]))
    tokens, _ = sglang_rows(b, torch.tensor([97, 96]))
    assert w.tokens[6:11].tolist() == tokens                  # its tail tokens at its own rows, not the first prompt's


def test_the_prompts_host_buffers_are_reused_in_turn_once_the_copy_out_of_each_has_run(monkeypatch):
    """HostRows on a GPU (torch.cuda's events stood in): each prompt's rows are written into the next pinned buffer,
    its event recorded after the copy out of it, and a buffer is written again only after waiting for that event
    (SLOTS prompts later)."""
    from controller.plugin import hostrows
    log: list = []
    w = graphed(SlotPool(), batches=1)

    class Event:
        def __init__(self):
            self.id = len([e for e in log if e[0] == "new"])
            log.append(("new", self.id))

        def record(self, stream):      # after the copy: the static positions already hold the prompt's rows
            log.append(("record", self.id, w.positions[:5].tolist()))

        def synchronize(self):
            log.append(("sync", self.id))
    monkeypatch.setattr(torch.cuda, "Event", Event, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "forward", raising=False)
    ring = hostrows.HostRows.make(w.positions.shape[0], w.positions.device)
    ring.cuda = torch.cuda                                      # as pinned on a GPU
    w.host_rows = ring
    b = batch()
    positions = sglang_rows(b, [0, 0])[1]
    for i in range(hostrows.HostRows.SLOTS + 1):
        log.append(("prompt", i))
        assert draftkv.write_prefill(w, b, torch.rand(5, 2), torch.tensor([99, 98]))
    slots = hostrows.HostRows.SLOTS
    assert log[:3] == [("prompt", 0), ("new", 0), ("record", 0, positions)]
    assert [e for e in log if e[0] == "sync"] == [("sync", 0)]   # only the buffer used again, and only then
    assert log[-3:] == [("prompt", slots), ("sync", 0), ("record", 0, positions)]
    assert ring.next == 1 and all(b.shape[0] == w.positions.shape[0] for b in ring.buffers)


def test_the_prompts_host_buffers_for_a_gpu_are_pinned_and_their_events_name_its_device(monkeypatch):
    """HostRows.make for a GPU (torch.cuda's events and streams stood in): every buffer pinned, and each copy's event
    recorded on the current stream of the buffers' device by its index (current_stream(None) looks the device up
    through NVML checks, ~50 us a call); for the CPU: pageable buffers, no events."""
    from controller.plugin import hostrows
    pinned, streams = [], []
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: pinned.append(pin_memory) or empty(*a, **k))
    monkeypatch.setattr(torch.cuda, "Event", lambda: SimpleNamespace(record=lambda stream: None,
                                                                      synchronize=lambda: None), raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: streams.append(device) or "forward",
                        raising=False)
    slots = hostrows.HostRows.SLOTS
    ring = hostrows.HostRows.make(12, torch.device("cuda", 1))
    assert pinned == [True] * slots and ring.cuda is torch.cuda and ring.device == 1
    for _ in range(slots + 1):
        assert ring.take().shape[0] == 12
        ring.copied()
    assert streams == [1] * (slots + 1)
    del pinned[:]
    cpu = hostrows.HostRows.make(12, torch.device("cpu"))
    assert pinned == [False] * slots and cpu.cuda is None
    cpu.take()
    cpu.copied()
    assert cpu.events == [None] * slots and cpu.next == 1


def test_each_prompts_host_rows_stay_in_their_own_buffer_until_slots_prompts_later():
    """What makes the asynchronous copy out of a pinned buffer safe: prompt i's rows (its positions, then its requests'
    last rows) are staged in buffer i % SLOTS, so the next prompts do not overwrite a buffer whose copy may still be
    queued (its reuse waits for its event: the test above)."""
    from controller.plugin import hostrows
    w = graphed(SlotPool(), batches=1)
    for i in range(hostrows.HostRows.SLOTS):
        b = batch()
        b.prefix_lens = [5 + i, i]                      # each prompt its own positions
        assert draftkv.write_prefill(w, b, torch.rand(5, 2), torch.tensor([99, 98]))
    for i, buffer in enumerate(w.host_rows.buffers):
        assert buffer[:7].tolist() == [5 + i, 6 + i, 7 + i, i, i + 1] + [2, 4], i


@pytest.mark.parametrize("extend, prefix", [([3, 3], [5, 0]), ([3, 1], [5, 0]), ([3, 2], [5, 0, 0])],
                         ids=["lengths over the tokens", "lengths short of the tokens", "a prefix length too many"])
@pytest.mark.parametrize("kind", ["eager", "graphed"])
def test_a_prefill_whose_lengths_do_not_describe_its_tokens_is_refused_before_the_writer_is_touched(extend, prefix,
                                                                                                     kind):
    """stage_prefill checks the batch's lengths against its tokens before either write: the direct one would else
    replay the buffered rows to make room, make its host buffers and stage rows the lengths do not describe (lengths
    short of the tokens: the reused pinned buffer's stale rows read as positions and tail rows)."""
    b = batch()
    b.extend_lens, b.prefix_lens = extend, prefix
    if kind == "eager":
        writer = Writer()
    else:
        writer = graphed(SlotPool(), batches=8)
        writer.write(torch.rand(30, 2), torch.zeros(30, dtype=torch.int64), torch.arange(30), torch.arange(100, 130))
    with pytest.raises(ValueError, match="the extend lengths sum to"):
        draftkv.write_prefill(writer, b, torch.rand(5, 2), torch.tensor([99, 98]))
    if kind == "eager":
        assert writer.calls == []
    else:
        assert (writer.rows, writer.launches, writer.host_rows) == (30, 0, None)


def test_a_prompt_of_another_hidden_width_is_written_eagerly_not_into_the_graphs_inputs():
    """write_prompt declines hidden states of another width than the graphs' static inputs (the generic write hands
    them to the eager writer): straight into the inputs they would not fit, and a failed prompt write drops the
    writer for the process."""
    pool = SlotPool()
    w = graphed(pool)                                  # the static inputs 2 wide; the eager writer is the pool's write
    b, next_ids, aux = batch(), torch.tensor([99, 98]), torch.rand(5, 3)
    assert draftkv.write_prefill(w, b, aux, next_ids)
    tokens, positions = sglang_rows(b, next_ids)
    want = torch.tensor([[float(aux[i].sum()), tokens[i], positions[i]] for i in range(5)], dtype=torch.float64)
    assert torch.allclose(pool.kv[[50, 51, 52, 60, 61]], want)
    assert w.host_rows is None and w.replays == 0 and w.rows == 0


def test_a_prompt_that_fills_the_largest_graph_is_written_straight_into_its_inputs():
    """The direct write takes every prompt a graph holds, up to one of exactly the largest graph's rows, also of
    one-token requests only (their tail rows then fill all the room capture() leaves past the graph's rows)."""
    pool = SlotPool()
    w = graphed(pool, sizes=(1, 2, 4), batches=1)
    b = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: False), input_ids=torch.tensor([11, 21, 31, 41]),
                        out_cache_loc=torch.tensor([50, 60, 70, 80]), extend_lens=[1, 1, 1, 1],
                        prefix_lens=[7, 0, 3, 9])
    next_ids = torch.tensor([91, 92, 93, 94])
    took, real = [], w.write_prompt
    w.write_prompt = lambda *a: took.append(real(*a)) or took[-1]
    assert draftkv.write_prefill(w, b, torch.rand(4, 2), next_ids) and took == [True]
    tokens, positions = sglang_rows(b, next_ids)
    assert pool.kv[[50, 60, 70, 80], 1].tolist() == tokens and pool.kv[[50, 60, 70, 80], 2].tolist() == positions


def test_the_direct_prompt_write_counts_its_cpu_in_the_prompts_writer_share(monkeypatch):
    """Status's prompt-write CPU split (draft_kv_prefill_writer_ns, from the writer's write_ns) includes the direct
    write's host copy, static-input copies and replays, as it does the generic write()'s."""
    from controller.plugin import draftkv_graph
    clock = iter([1000, 1250])
    monkeypatch.setattr(draftkv_graph, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    w = graphed(SlotPool())
    writes = promptkv.PromptWrites()
    writes.why_not = None
    took, real = [], w.write_prompt
    w.write_prompt = lambda *a: took.append(real(*a)) or took[-1]
    assert writes.write(w, batch(), torch.rand(5, 2), torch.tensor([99, 98])) and took == [True]
    assert w.write_ns == 250 and writes.counters()["draft_kv_prefill_writer_ns"] == 250


def test_the_first_direct_prompt_write_is_said_once_in_the_engines_log(caplog):
    """run_consistency.sh has no daemon status: the engine's log line says the direct path engaged (once)."""
    import logging
    w = graphed(SlotPool(), batches=8)
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        for _ in range(3):
            assert draftkv.write_prefill(w, batch(), torch.rand(5, 2), torch.tensor([99, 98]))
    said = [r for r in caplog.records if "written straight into the graphs' inputs" in r.getMessage()]
    assert len(said) == 1 and w.direct_prompts == 3
