"""Plain off batches' length bookkeeping, replayed (docs/off-as-plain-batch.md section 5's simulator): SGLang 0.5.17's
formulas stand in for its scheduler (the plain preparation allocates one slot at `seq_lens` and commits up front;
spec-v2's reserves `committed + 8` and commits what a verify accepted when its result is processed, one iteration
late under overlap; a speculative batch reads its lengths back from what the last forward published), while
plainoff's own hooks decide the mode, publish the plain batches' lengths and run their forward. Requests arrive,
decode plain or speculatively as a random threshold says, and finish; every forward must read its input at the
request's true KV length, inside its allocation, and every request's committed length must end at its true length.
The formulas are quoted facts of the wheels (tests/test_plain_off_facts.py)."""
import random
from types import SimpleNamespace

import pytest

from controller.plugin import fastoff, plainoff
from controller.plugin.failures import Failures
from controller.plugin.offpath import OffPath
from controller.plugin.router import Router
from tests.test_plainoff import EAGLE3, NONE, DraftInput, Mode

RESERVE = 8            # get_alloc_reserve_per_decode: 2 x max(steps x topk, draft tokens) at 3 steps, 4 tokens
DRAFT_TOKENS = 4


class Req:
    def __init__(self, rid, prompt, output):
        self.rid, self.L, self.c, self.a, self.left = rid, prompt, prompt, prompt, output   # true KV length, ...


def batch_of(reqs, extend):
    rows = tuple(r.rid for r in reqs)                       # a new object per batch, as torch.cat makes one
    return SimpleNamespace(reqs=list(reqs), spec_algorithm=EAGLE3, spec_info=DraftInput(future_indices=rows),
                           forward_mode=Mode(extend), seq_lens=[r.L for r in reqs], seq_lens_cpu=[r.L for r in reqs],
                           req_pool_indices=rows, enable_overlap=True, has_grammar=False, return_logprob=False,
                           return_hidden_states=False, token_to_kv_pool_allocator=SimpleNamespace(page_size=1))


def sglang_prepare(b):
    """ScheduleBatch.prepare_for_decode, 0.5.17: spec-v2's eagle_prepare_for_decode, else the plain one."""
    b.forward_mode = Mode(False)
    if not b.spec_algorithm.is_none():
        for r in b.reqs:
            r.a = max(r.a, r.c + RESERVE)
        return
    for r, s in zip(b.reqs, b.seq_lens):
        assert r.a == s, f"request {r.rid}: the plain slot at {s} but {r.a} allocated (leaked or overwritten)"
        r.a += 1
        r.c += 1
    b.seq_lens = [s + 1 for s in b.seq_lens]
    b.seq_lens_cpu = list(b.seq_lens)


def merge(running, new):
    """ScheduleBatch.merge_batch: requests and lengths concatenated, the draft input's rows too where there is one."""
    running.reqs = running.reqs + new.reqs
    running.seq_lens = running.seq_lens + new.seq_lens
    running.seq_lens_cpu = running.seq_lens_cpu + new.seq_lens_cpu
    running.req_pool_indices = running.req_pool_indices + new.req_pool_indices
    if running.spec_info:
        running.spec_info = DraftInput(future_indices=running.spec_info.future_indices + new.spec_info.future_indices)


def filtered(b):
    keep = [i for i, r in enumerate(b.reqs) if r.left > 0]
    b.reqs = [b.reqs[i] for i in keep]
    b.seq_lens = [b.seq_lens[i] for i in keep]
    b.seq_lens_cpu = [b.seq_lens_cpu[i] for i in keep] if b.seq_lens_cpu is not None else None
    b.req_pool_indices = tuple(b.req_pool_indices[i] for i in keep)
    if b.spec_info:
        b.spec_info = DraftInput(future_indices=tuple(b.spec_info.future_indices[i] for i in keep))
    return b


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setitem(fastoff._sg, "DraftInput", DraftInput)
    monkeypatch.setitem(fastoff._sg, "torch", None)
    monkeypatch.setitem(fastoff._sg, "NO_HIDDEN", "NULL")
    router = Router(0, Failures(), version=lambda: "0.5.17")
    router.checked = True
    off = OffPath(router, router.failures)
    off.fast = fastoff.FastOff(None, None, names=SimpleNamespace(read_done_event="ev", last_reader="draft_worker"))
    plain = off.plain = plainoff.PlainOff(off, registered=True)
    plain.none, plain.spec_algorithm = NONE, EAGLE3       # (_to_plain binds them from SGLang at its first batch)
    return plain


def simulate(plain, seed, steps=400, flip=0.15):
    rng = random.Random(seed)
    buf: dict[int, int] = {}                                    # the future map's new_seq_lens_buf
    fm = SimpleNamespace(output_tokens_buf=_Tokens())          # plainoff's forward gathers its input tokens there
    publish = lambda m, rows, lens: buf.update(zip(rows, lens))
    runner = SimpleNamespace(ev=None, attn_backend=None, decode_cuda_graph_runner=None)
    worker = SimpleNamespace(draft_worker=SimpleNamespace(ev=None), target_worker=SimpleNamespace(
        model_runner=runner, forward_batch_generation=lambda b, capture_hidden_mode: SimpleNamespace(can_run_cuda_graph=True)))
    running, pending, rid, seen = None, None, 0, {"plain": 0, "spec": 0, "to_spec": 0}
    everyone = []
    for _ in range(steps):
        if rng.random() < flip:
            plain.off.router.threshold = rng.choice((0, 0, 64))
        # schedule: a prefill now and then (it publishes its lengths), else the running batch decodes
        if rng.random() < 0.2 or running is None or not running.reqs:
            new = [Req(rid + i, rng.randint(8, 64), rng.randint(2, 30)) for i in range(rng.randint(1, 4))]
            rid += len(new)
            everyone += new
            prefill = batch_of(new, extend=True)
            plain.publish(publish, fm, prefill.req_pool_indices, [r.L for r in new])
            if pending is not None:
                _process(*pending)
                pending = None
            if running is None or not running.reqs:
                running = prefill
            else:
                merge(running, prefill)
            continue
        running = filtered(running)
        if not running.reqs:
            continue
        running.return_logprob = rng.random() < 0.05                 # a request that keeps the batch speculative
        was_plain = running.spec_algorithm.is_none()
        plain.prepare(sglang_prepare, running)
        mode = "plain" if running.spec_algorithm.is_none() else "spec"
        seen[mode] += 1
        seen["to_spec"] += was_plain and mode == "spec"
        rows = running.req_pool_indices
        if mode == "spec":                                           # run_batch: resolve_seq_lens_cpu
            assert running.spec_info.future_indices == rows
            running.seq_lens = [buf[r] for r in running.spec_info.future_indices]
            positions = list(running.seq_lens)
            accept = [rng.randint(1, DRAFT_TOKENS) for _ in running.reqs]
            for r, p in zip(running.reqs, positions):
                assert p + DRAFT_TOKENS <= r.a, f"request {r.rid}: verify writes to {p + DRAFT_TOKENS} of {r.a}"
            plain.publish(publish, fm, rows, [p + n for p, n in zip(positions, accept)])   # the worker's on_publish
        else:
            assert plain.off.forward_batch_generation(None, worker, running) is not None
            positions = [s - 1 for s in running.seq_lens]
            accept = [1] * len(running.reqs)
            plain.publish(publish, fm, rows, [s + 1 for s in running.seq_lens])   # run_batch's, after the forward
        for r, p in zip(running.reqs, positions):
            assert p == r.L, f"request {r.rid}: {mode} forward reads position {p}, its KV holds {r.L}"
        for r, n in zip(running.reqs, accept):
            r.L += n
        if pending is not None:
            _process(*pending)
        pending = (mode, list(running.reqs), accept)
    if pending is not None:
        _process(*pending)
    return seen, everyone


def _process(mode, reqs, accept):
    """The result, one iteration late: spec-v2 commits what was accepted (the plain prepare committed already)."""
    for r, n in zip(reqs, accept):
        if mode == "spec":
            r.c += n
        r.left -= n


class _Tokens:
    def __getitem__(self, rows):
        return ("tokens of", rows)


@pytest.mark.parametrize("seed", range(12))
def test_every_forward_reads_the_true_kv_length_and_committed_lengths_end_true(engine, seed):
    seen, reqs = simulate(engine, seed)
    assert seen["plain"] >= 10 and seen["spec"] >= 10 and seen["to_spec"] > 0, seen     # both modes and the switch
    assert engine.entered > 0
    for r in reqs:
        assert r.c == r.L <= r.a, f"request {r.rid}: committed {r.c}, KV {r.L}, allocated {r.a}"
