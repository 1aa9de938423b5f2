"""controller/plugin/draftkv_coalesce.py on CPU: what one coalesced write holds, when it is written, that a
slot written twice keeps its later row, and that the off path flushes before anything else touches the
draft's pool (the GPU run is bench/gpu's: SPEC_CONTROLLER_DRAFT_KV_COALESCE=N)."""
from __future__ import annotations

import logging
from contextlib import contextmanager

import numpy as np
import pytest

from controller.plugin import draftkv, draftkv_coalesce, fastoff
from controller.plugin.draftkv_coalesce import PAD_SLOT, CoalescedKVWriter
from controller.plugin.instance import Plugin, coalesce_batches
from tests.test_plugin_cpu import Mode, Recorder, decode_batch, fast, plug, routed_worker  # noqa: F401


class T(np.ndarray):
    """Enough of a torch tensor for write(): slices are views, copy_ writes through, new_empty."""

    def copy_(self, src):
        self[...] = np.asarray(src)
        return self

    def new_empty(self, shape):
        return np.zeros(shape, dtype=self.dtype).view(T)


def t(values, dtype=np.int64) -> T:
    return np.asarray(values, dtype=dtype).view(T)


def numpy_last_write_wins(loc):
    out = np.asarray(loc).copy()
    seen = set()
    for i in range(len(out) - 1, -1, -1):
        if out[i] in seen:
            out[i] = PAD_SLOT
        seen.add(int(loc[i]))
    return out


class Eager:
    def __init__(self, fail: bool = False):
        self.writes, self.fail = [], fail

    def write(self, aux, tokens, positions, loc):
        if self.fail:
            raise RuntimeError("pool")
        self.writes.append((np.asarray(aux).tolist(), np.asarray(tokens).tolist(), np.asarray(positions).tolist(),
                            np.asarray(loc).tolist()))


def coalesced(batches=3, capacity=8, eager=None):
    entered = []

    @contextmanager
    def enter(draft_worker):
        entered.append(draft_worker)
        yield

    w = CoalescedKVWriter(eager or Eager(), batches, capacity, enter, dedupe=numpy_last_write_wins)
    return w, entered


def batch(first_slot: int, n: int, width: int = 2):
    """n rows: aux row i = [slot, slot], token = 100 + slot, position = 1000 + slot, slot = first_slot + i."""
    slots = list(range(first_slot, first_slot + n))
    return (t([[s] * width for s in slots], np.float32), t([100 + s for s in slots]), t([1000 + s for s in slots]),
            t(slots))


def test_n_batches_make_one_write_with_their_rows_in_order():
    w, _ = coalesced(batches=3)
    w.write(*batch(1, 2))
    w.write(*batch(3, 1))
    assert w.eager.writes == [] and w.rows == 3
    w.write(*batch(4, 2))
    assert w.eager.writes == [([[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]], [101, 102, 103, 104, 105],
                                [1001, 1002, 1003, 1004, 1005], [1, 2, 3, 4, 5])]
    assert (w.rows, w.pending, w.flushes) == (0, 0, 1)


def test_a_slot_written_twice_in_one_write_keeps_its_later_row():
    # a request finished at slot 2 and the slot went to another request's next token: the earlier row is
    # pointed at the padding slot, so the pool ends with the later one whatever order the store applies
    w, _ = coalesced(batches=2)
    w.write(*batch(1, 2))
    w.write(t([[9, 9]], np.float32), t([109]), t([1009]), t([2]))
    assert w.eager.writes[0][3] == [1, PAD_SLOT, 2] and w.eager.writes[0][1] == [101, 102, 109]


def test_a_batch_that_does_not_fit_writes_the_buffer_first_and_one_larger_than_it_writes_directly():
    w, _ = coalesced(batches=4, capacity=4)
    w.write(*batch(1, 3))
    w.write(*batch(4, 2))                       # 3 + 2 > 4: the three rows go first, then these are buffered
    assert [x[3] for x in w.eager.writes] == [[1, 2, 3]] and w.rows == 2
    w.write(*batch(10, 5))                      # larger than the buffer: its two rows, then these directly
    assert [x[3] for x in w.eager.writes] == [[1, 2, 3], [4, 5], [10, 11, 12, 13, 14]] and w.rows == 0


def test_flush_writes_in_the_drafts_context_and_an_empty_one_does_nothing():
    w, entered = coalesced()
    w.flush("draft")
    assert entered == [] and w.eager.writes == []
    w.write(*batch(1, 1))
    w.flush("draft")
    assert entered == ["draft"] and [x[3] for x in w.eager.writes] == [[1]] and w.rows == 0


def test_a_failed_write_is_not_retried_over_newer_rows():
    w, _ = coalesced(batches=1, eager=Eager(fail=True))
    with pytest.raises(RuntimeError):
        w.write(*batch(1, 1))
    assert w.rows == 0 and w.pending == 0


def test_the_buffer_holds_n_batches_of_the_largest_batch_within_its_limit():
    assert draftkv_coalesce.capacity(8, 128) == 1024
    assert draftkv_coalesce.capacity(8, 4096) == draftkv_coalesce.MAX_ROWS
    assert draftkv_coalesce.capacity(2, 0) == 2


@pytest.mark.parametrize("raw, n", [("", None), ("8", 8), ("2", 2), ("64", 64), ("1", 1), ("0", 1),
                                    ("65", None), ("x", None), (" 4 ", None), ("04", None), ("\u00b2", None),
                                    ("9" * 5000, None)])   # (isdigit: "²")
def test_the_environment_names_the_batches_per_write_or_leaves_the_default(raw, n, caplog):
    with caplog.at_level(logging.WARNING, logger="spec_controller.plugin"):
        assert coalesce_batches(raw) == n
    # a value given and refused is said once; unset says nothing
    assert len([r for r in caplog.records if "COALESCE" in r.getMessage()]) == (n is None and raw != "")


def test_last_write_wins_on_torch():
    torch = pytest.importorskip("torch")
    loc = torch.tensor([5, 7, 5, 9, 7, 5])
    assert draftkv_coalesce.last_write_wins(loc).tolist() == [PAD_SLOT, PAD_SLOT, PAD_SLOT, 9, 7, 5]


class Flushes:
    """A CoalescedKVWriter stand-in that records flushes, in order with SGLang's calls."""

    def __init__(self, log):
        self.log = log

    def flush(self, draft_worker):
        self.log.append(("flush", draft_worker))


def test_the_off_path_flushes_before_every_batch_it_does_not_write_and_before_a_prefill(fast, monkeypatch):
    plug, ran = fast
    off, log = plug.off_path, []
    off.kv_writer, off.draft_kv, off.kv_coalesced = object(), True, Flushes(log)
    w = routed_worker(plug)
    w.draft_worker = "draft"

    def sglang(worker, b, *args, **kwargs):
        log.append(("sglang", b.seq_lens.shape[0]))
        return "sglang-result"
    off.forward_batch_generation(sglang, w, decode_batch(9))                         # off: buffered, no flush
    assert log == [] and len(ran) == 1
    off.forward_batch_generation(sglang, w, decode_batch(4))                         # speculates: flush first
    off.forward_batch_generation(sglang, w, decode_batch(50, forward_mode=Mode("extend")))   # its draft pass does
    off.forward_batch_generation(sglang, w, decode_batch(20, return_hidden_states=True))   # steps-0 fallback
    off.forward_batch_generation(sglang, w, decode_batch(9, is_extend_in_batch=True))    # a DP peer's prefill
    assert log == [("flush", "draft"), ("sglang", 4), ("sglang", 50), ("flush", "draft"), ("sglang", 20),
                   ("flush", "draft"), ("sglang", 9)]
    log.clear()
    off.draft_kv = False                                                             # another writer now
    off.forward_batch_generation(sglang, w, decode_batch(9))
    assert log == [("flush", "draft")] and len(ran) == 2
    log.clear()
    plug.router.threshold = 0
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: "stub")
    monkeypatch.setattr(draftkv, "write_prefill", lambda *a: log.append("prefill write") or True)
    off.draft_kv = True
    prefill = decode_batch(1, extend_lens=[5], forward_mode=Mode("extend"))

    def extend(worker, b, *args, **kwargs):      # SGLang's forward of the extend calls the prefill hook
        return off.draft_extend_for_prefill(sglang, "the draft worker", b, "hidden", [7])
    assert off.forward_batch_generation(extend, w, prefill) == "stub"
    assert log == ["prefill write"]                  # a lean prefill's rows join the held ones: the window stays open
    log.clear()
    off.lean_prefill = False                         # the draft's own pass over the prompt: the held rows first
    assert off.forward_batch_generation(extend, w, prefill) == "sglang-result"
    assert log == [("flush", "the draft worker"), ("sglang", 1)]
    off.lean_prefill = True
    log.clear()
    off.sync_draft = True                                                           # SGLang's draft extend now
    off.forward_batch_generation(sglang, w, decode_batch(9))
    assert log[0] == ("flush", "draft") and len(ran) == 3


def test_a_failed_flush_is_recorded_and_leaves_the_writes_per_batch(fast):
    plug, _ = fast
    off = plug.off_path
    off.kv_writer, off.draft_kv = object(), True
    off.kv_coalesced, _ = coalesced(eager=Eager(fail=True))
    off.kv_coalesced.write(*batch(1, 1))
    w = routed_worker(plug)
    w.draft_worker = "draft"
    assert off.forward_batch_generation(Recorder().original, w, decode_batch(4)) == "sglang-result"
    assert plug.failures.places == {"draft KV flush"} and off.kv_coalesced is None
    assert off.active_writer() is off.kv_writer


def test_the_plugin_builds_the_coalesced_writer_only_when_asked():
    assert Plugin({}).off_path.want_coalesce is None       # the default: the graphs coalesce, the eager writer not
    assert Plugin({"SPEC_CONTROLLER_DRAFT_KV_COALESCE": "8"}).off_path.want_coalesce == 8


class TorchPool:
    """A draft KV pool on torch whose write stores one value per row: a slot stored twice in one write fails."""

    def __init__(self, torch, slots: int = 16):
        self.kv = torch.zeros(slots)

    def write(self, aux, tokens, positions, loc):
        slots = [s for s in loc.tolist() if s != PAD_SLOT]
        assert len(slots) == len(set(slots)), "a slot stored twice at once: on a GPU either row may land"
        self.kv[loc] = aux.sum(-1) + tokens + positions


def test_coalesced_writes_leave_the_pool_as_per_batch_writes_do_on_torch():
    # slots reused across batches (a request finished, its slot went to another's next token): the pool
    # after the coalesced writes equals the pool after one write per batch
    torch = pytest.importorskip("torch")
    Pool = lambda: TorchPool(torch)     # noqa: E731
    batches = [([1, 2, 3], 0), ([1, 4, 3], 10), ([5, 4, 1], 20)]   # slots, a value offset
    direct, merged = Pool(), Pool()
    w = CoalescedKVWriter(merged, 4, 12, lambda draft_worker: contextmanager(lambda: (yield))())
    for slots, base in batches:
        n = len(slots)
        args = (torch.arange(2 * n, dtype=torch.float32).reshape(n, 2) + base, torch.arange(n) + base,
                torch.arange(n) * 100 + base, torch.tensor(slots))
        direct.write(*args)
        w.write(*args)
    w.flush("draft")
    assert w.flushes == 1 and torch.equal(direct.kv[1:], merged.kv[1:])


def test_the_build_makes_the_coalesced_writer_sized_by_the_engines_batch(fast, monkeypatch):
    from types import SimpleNamespace
    plug, _ = fast
    off = plug.off_path
    off.want_coalesce, off.fast.with_hidden = 8, True
    entered = []
    off.fast.names = SimpleNamespace(draft_context=SimpleNamespace(enter=lambda dw: entered.append(dw)))
    monkeypatch.setattr(draftkv, "build", lambda runner: "eager writer")
    monkeypatch.setattr(draftkv_coalesce, "build", lambda *a: CoalescedKVWriter(*a))   # buffers need torch

    def build(**server_args):
        off.kv_writer = off.kv_coalesced = None
        off._build_writer(SimpleNamespace(draft_worker=SimpleNamespace(draft_runner=None),
                                          server_args=SimpleNamespace(max_running_requests=64, **server_args)))
        return off.kv_coalesced
    c = build()
    assert (c.eager, c.batches, c.capacity) == ("eager writer", 8, 512) and off.active_writer() is c
    c.enter("draft")
    assert entered == ["draft"]
    assert build(enable_hierarchical_cache=True) is None and off.active_writer() == "eager writer"
    monkeypatch.setattr(draftkv_coalesce, "build", lambda *a: (_ for _ in ()).throw(RuntimeError("out of memory")))
    assert build() is None and off.active_writer() == "eager writer" and "draft KV coalescing" in plug.failures.places


def test_the_run_time_switch_needs_a_built_writer_and_picks_it(fast):
    from controller import contract
    plug, _ = fast
    off = plug.off_path
    off.kv_writer, off.draft_kv = "eager", True
    assert "SPEC_CONTROLLER_DRAFT_KV_COALESCE=1" in plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: True})
    off.kv_coalesced = "coalesced"
    assert plug.validate_own_keys({contract.DRAFT_KV_COALESCE_KEY: True}) is None and off.active_writer() == "coalesced"
    plug.apply_own_keys({contract.DRAFT_KV_COALESCE_KEY: False})
    assert off.active_writer() == "eager"
    plug.apply_own_keys({contract.DRAFT_KV_COALESCE_KEY: True})
    assert off.active_writer() == "coalesced"


def test_last_write_wins_on_torch_for_many_duplicates():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for _ in range(20):
        loc = rng.integers(1, 12, size=200)
        assert draftkv_coalesce.last_write_wins(torch.tensor(loc)).tolist() == numpy_last_write_wins(loc).tolist()


def test_the_rows_are_copied_when_written_not_kept_as_views():
    # the target's decode graph hands out its static output buffers: the next replay overwrites them
    w, _ = coalesced(batches=2)
    aux, tokens, positions, loc = batch(1, 2)
    w.write(aux, tokens, positions, loc)
    for x in (aux, tokens, positions, loc):
        x[...] = 7
    w.write(*batch(3, 1))
    assert w.eager.writes[0][3] == [1, 2, 3] and w.eager.writes[0][1] == [101, 102, 103]


@pytest.mark.parametrize("args, tp, why", [
    ({}, 1, None), ({"enable_hierarchical_cache": True}, 1, "hierarchical cache"),
    ({"disaggregation_mode": "decode"}, 1, "disaggregation"), ({"disaggregation_mode": "null"}, 1, None),
    ({"enable_unified_cache_external_linker": True}, 1, "external cache linker"),
    ({}, 2, "TP > 1")])
def test_engines_whose_draft_pool_moves_outside_the_flushes_keep_per_batch_writes(args, tp, why):
    from types import SimpleNamespace
    reason = draftkv_coalesce.unsupported_reason(SimpleNamespace(**args), tp)
    assert (reason is None) if why is None else (why in reason)


def test_build_makes_the_buffers_at_the_drafts_fc_width_on_torch():
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace
    eager = SimpleNamespace(model=SimpleNamespace(fc=torch.nn.Linear(6, 2, bias=False)))
    w = draftkv_coalesce.build(eager, 4, 16, lambda dw: None)
    assert w.buffers[0].shape == (16, 6) and w.buffers[0].dtype == torch.float32
    assert all(b.shape == (16,) and b.dtype == torch.int64 for b in w.buffers[1:])
    with pytest.raises(ValueError):
        draftkv_coalesce.build(SimpleNamespace(model=SimpleNamespace()), 4, 16, lambda dw: None)
