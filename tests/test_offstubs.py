"""The lean off step (controller/plugin/offstubs.py, switch spec_controller_lean_off) on CPU, numpy standing in
for torch: the new lengths are published before the forward, the result points at per-engine stubs (no ones, no
zero fills, no int32 cast, no SGLang stub call), the stubs are made once and grown, and the step is taken only where
it is safe (the overlap scheduler, no logprobs, the draft not synced). The SGLang facts it rests on are in every
table (sglang_names.LEAN_OFF_FACTS, tests/test_fastoff_contract.py). Its effect is a GPU measurement."""
from types import SimpleNamespace

import numpy as np
import pytest

from controller import contract
from controller.plugin import fastoff, offstubs
from controller.plugin.instance import Plugin
from tests.test_fastoff_cpu import V17, V23, Tensor, engine, tensor
from tests.test_offgrammar_cpu import FSM, barrier_of, grammar_batch, grammar_engine, req
from tests.test_plugin_cpu import active, decode_batch

TOPK, HIDDEN = 4, 6


class Cast(Tensor):
    """The sampler's tokens: a cast is recorded (steps-0's int32; the lean step keeps int64)."""
    casts: list = []

    def to(self, *args, **kwargs):
        Cast.casts.append(args)
        return self


@pytest.fixture
def lean_torch(monkeypatch):
    made = []

    def ones(n, dtype, device):
        made.append(("ones", n))
        out = tensor(np.ones(n, int))
        out.torch_dtype = dtype
        return out

    def zeros(shape, dtype, device):
        made.append(("zeros", shape))
        out = tensor(np.zeros(shape))
        out.torch_dtype = dtype                  # what SGLang's future map sizes its relay buffers from
        return out
    torch = SimpleNamespace(int32="int32", int64="int64", float32="float32", ones=ones, zeros=zeros)
    spec = SimpleNamespace(get_draft_recurrent_hidden_state_spec=lambda runner: (HIDDEN, "bf16"))
    for key, value in dict(torch=torch, DECODE="DECODE", NO_HIDDEN="NULL", FULL_HIDDEN="FULL", worker_module=spec,
                           Result=lambda **kw: SimpleNamespace(**kw),
                           DraftInput=lambda **kw: SimpleNamespace(**kw)).items():
        monkeypatch.setitem(fastoff._sg, key, value)
    Cast.casts = []
    return made


def lean_engine(names, order: list):
    w, runner, last, seen = engine(names, True)
    forward = w.target_worker.forward_batch_generation

    def recorded(batch, capture_hidden_mode):
        order.append("forward")
        out = forward(batch, capture_hidden_mode)
        out.next_token_ids = np.asarray(out.next_token_ids).view(Cast)
        return out
    w.target_worker.forward_batch_generation = recorded
    w.target_worker.enable_spec = True           # offgrammar.delaying_sample's switch (a grammar batch)
    w.draft_worker = SimpleNamespace(topk=TOPK, draft_runner="draft runner")
    return w, seen


def off_batch(bs: int, **fields):
    return decode_batch(bs, seq_lens=tensor(np.arange(3, 3 + bs)), seq_lens_cpu=None, seq_lens_sum=None,
                        req_pool_indices=tensor(np.arange(bs) % 4), spec_info=SimpleNamespace(bonus_tokens=tensor([4] * bs)),
                        **fields)


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
def test_the_lean_step_publishes_first_and_builds_its_result_from_the_stubs(lean_torch, names):
    order = []
    w, seen = lean_engine(names, order)
    fast = fastoff.FastOff("decode backend", "decode graphs", names=names)
    result = fastoff.run(w, fast, off_batch(2), on_publish=lambda lens: order.append(("publish", list(lens))),
                         lean=True)
    assert order == [("publish", [4, 5]), "forward"]       # an off step accepts one token: known before it runs
    assert seen["seq_lens"] == [4, 5] and list(result.new_seq_lens) == [4, 5]
    assert Cast.casts == [] and result.next_token_ids is result.next_draft_input.bonus_tokens   # int64 kept
    assert "stubbed" not in seen                            # no SGLang stub: its zero fills are the stubs
    draft = result.next_draft_input
    assert list(result.accept_lens) == [1, 1]
    assert draft.topk_p.shape == (2, TOPK) and draft.topk_index.shape == (2, TOPK) and draft.hidden_states.shape == (2, HIDDEN)
    assert not (draft.topk_p.any() or draft.topk_index.any() or draft.hidden_states.any())
    dtypes = [t.base.torch_dtype for t in (result.accept_lens, draft.topk_p, draft.topk_index, draft.hidden_states)]
    assert dtypes == ["int32", "float32", "int64", "bf16"]  # SGLang's stub's dtypes (accept lengths: steps-0's)
    assert fast.lean_batches == 1 and fast.batches == 1
    made = list(lean_torch)
    again = fastoff.run(w, fast, off_batch(3), on_publish=lambda lens: None, lean=True)
    assert lean_torch == made                               # the second batch made no tensor
    assert np.shares_memory(again.accept_lens, result.accept_lens) and list(again.accept_lens) == [1, 1, 1]


@pytest.mark.parametrize("why, kwargs, batch_fields", [
    ("no overlap scheduler", dict(on_publish=None), {}),
    ("switched off", dict(on_publish="publish", lean=False), {}),
])
def test_without_the_lean_step_the_result_is_steps_0s(lean_torch, why, kwargs, batch_fields):
    order = []
    w, seen = lean_engine(V17, order)
    fast = fastoff.FastOff("decode backend", "decode graphs", names=V17)
    publish = (lambda lens: order.append("publish")) if kwargs.pop("on_publish") else None
    result = fastoff.run(w, fast, off_batch(2, **batch_fields), on_publish=publish, **{"lean": True, **kwargs})
    assert order == (["forward", "publish"] if publish else ["forward"]), why
    assert Cast.casts == [("int32",)] and seen["stubbed"] and fast.lean_batches == 0 and fast.stubs is None
    assert lean_torch == [("ones", 2)]                      # steps-0's accept lengths, made per batch


@pytest.mark.parametrize("on_publish, sync, logprobs, lean", [
    ("pub", False, False, True), (None, False, False, False), ("pub", True, False, False), ("pub", False, True, False)])
def test_the_lean_step_only_where_nothing_reads_what_it_changes(on_publish, sync, logprobs, lean):
    assert offstubs.applies(on_publish, sync, logprobs) is lean


def test_stubs_are_made_once_and_grown_to_the_next_power_of_two(lean_torch):
    stubs = offstubs.OffStubs(fastoff._sg["torch"], SimpleNamespace(topk=TOPK), (None, None))
    small, extras = stubs.fields(3, "cuda")
    assert stubs.rows == offstubs.MIN_ROWS and extras["hidden_states"] is None    # a draft without hidden state
    stubs.fields(offstubs.MIN_ROWS, "cuda")
    assert len(lean_torch) == 3                             # ones, topk_p, topk_index: once
    big, extras = stubs.fields(offstubs.MIN_ROWS + 1, "cuda")
    assert stubs.rows == 2 * offstubs.MIN_ROWS and len(big) == offstubs.MIN_ROWS + 1
    assert extras["topk_p"].shape == (offstubs.MIN_ROWS + 1, TOPK)
    assert not np.shares_memory(small, big) and list(small) == [1, 1, 1]   # a result in flight keeps its old set


def test_the_switch_is_validated_applied_and_refused_where_there_is_no_fast_path():
    plug = active(Plugin({}))
    plug.off_path.fast = fastoff.FastOff(None, None, names=V17)     # built
    assert plug.off_path.lean_off                           # the default
    assert "true or false" in plug.validate_own_keys({contract.LEAN_OFF_KEY: "yes"})
    assert plug.validate_own_keys({contract.LEAN_OFF_KEY: 0}) is None     # JSON false arrives as 0
    plug.apply_own_keys({contract.LEAN_OFF_KEY: 0})
    assert plug.off_path.lean_off is False
    plug.apply_own_keys({contract.LEAN_OFF_KEY: 1})
    assert plug.off_path.lean_off is True
    plug.off_path.fast = None
    assert "not available" in plug.validate_own_keys({contract.LEAN_OFF_KEY: True})
    assert not Plugin({contract.ENV_LEAN_OFF: "0"}).off_path.lean_off


@pytest.mark.parametrize("fields, sync, why", [({"return_logprob": True}, False, "logprobs"),
                                               ({}, True, "draft synced")])
def test_run_tells_applies_about_logprobs_and_a_synced_draft(lean_torch, monkeypatch, fields, sync, why):
    asked = []
    monkeypatch.setattr(offstubs, "applies", lambda *a: asked.append(a) or False)
    w, _ = lean_engine(V17, [])
    w.draft_worker = SimpleNamespace(topk=TOPK, draft_runner="draft runner", _draft_extend_for_decode=lambda b, r: None,
                                     draft_tp_context=lambda group: __import__("contextlib").nullcontext())
    fast = fastoff.FastOff("decode backend", "decode graphs", with_hidden=sync, names=V17)
    monkeypatch.setattr(fastoff, "_draft_extend", lambda *a: None)
    monkeypatch.setattr(fastoff.offlogprob, "keeping_logits", lambda runner, batch: __import__("contextlib").nullcontext())
    fastoff.run(w, fast, off_batch(2, **fields), on_publish=lambda lens: None, sync_draft=sync, lean=True)
    assert asked == [(asked[0][0], sync, bool(fields))], why


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
def test_a_lean_grammar_batch_publishes_then_forwards_then_waits_on_the_barrier_then_samples(lean_torch, names):
    """The lean step on a grammar batch: the lengths (known: one token) go out before the forward, the token is
    still sampled under the mask built after the barrier made the FSM accept the previous step's token."""
    w, log = grammar_engine(names)
    w.draft_worker = SimpleNamespace(topk=TOPK, draft_runner="draft runner")
    fsm = FSM([{3}, {1}, {2}], log)
    fast = fastoff.FastOff("decode backend", "decode graphs", names=names, grammar=True)
    result = fastoff.run(w, fast, grammar_batch([req(fsm)]), on_publish=lambda lens: log.append(("publish", list(lens))),
                         grammar_barrier=barrier_of([(fsm, 3)], log), lean=True)
    assert log == [("publish", [4]), "forward", "barrier", ("accept", 3), ("mask", [[1]])]
    assert np.asarray(result.next_token_ids).tolist() == [1] and fast.lean_batches == 1
    assert result.next_token_ids is result.next_draft_input.bonus_tokens and list(result.accept_lens) == [1]


@pytest.fixture
def eagle_v2(monkeypatch, lean_torch):
    """SGLang's eagle_worker_v2 as stub_draft_input imports it (its draft input a namespace), torch the fixture's."""
    import sys
    from types import ModuleType
    mod = ModuleType("sglang.srt.speculative.eagle_worker_v2")
    mod.EagleDraftInput = lambda **kw: SimpleNamespace(**kw)
    mod.get_draft_recurrent_hidden_state_spec = lambda runner: (HIDDEN, "bf16")
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(sys.modules, "torch", fastoff._sg["torch"])
    return lean_torch


def test_a_lean_prefills_draft_input_points_at_the_stubs_where_the_lean_step_would_else_fresh_zeros(eagle_v2):
    """The prefill's stub extras are zeros either way (SGLang's _stub_skipped_draft_extend); where the lean off step's
    stubs are safe (overlap scheduler, lean step on, draft not synced) they are slices of the engine's made-once
    zeros: no tensor made per prefill. Bonus tokens: the real ones."""
    draft = SimpleNamespace(topk=TOPK, draft_runner="draft runner")
    fast = fastoff.FastOff("decode backend", "decode graphs", names=V17)
    ids = tensor([7, 8])
    first = fastoff.stub_draft_input(draft, ids, fast)
    made = list(eagle_v2)
    second = fastoff.stub_draft_input(draft, tensor([9]), fast)
    assert eagle_v2 == made and fast.stubs is not None        # nothing made for the second prefill
    assert np.shares_memory(first.topk_p, second.topk_p) and np.shares_memory(first.hidden_states, second.hidden_states)
    assert first.bonus_tokens is ids and first.topk_p.shape == (2, TOPK) and second.hidden_states.shape == (1, HIDDEN)
    fresh = [fastoff.stub_draft_input(draft, ids) for _ in range(2)]
    assert len(eagle_v2) == len(made) + 6                    # three zero fills a prefill without the stubs
    assert not np.shares_memory(fresh[0].topk_p, fresh[1].topk_p)
    for d in (first, second, *fresh):
        assert not (d.topk_p.any() or d.topk_index.any() or d.hidden_states.any())
        dtypes = [getattr(t, "torch_dtype", None) or t.base.torch_dtype for t in (d.topk_p, d.topk_index, d.hidden_states)]
        assert dtypes == ["float32", "int64", "bf16"]       # (a slice's dtype is its stub's)


@pytest.mark.parametrize("overlap, lean_off, sync, built, stubs", [
    (True, True, False, True, True), (False, True, False, True, False), (True, False, False, True, False),
    (True, True, True, True, False), (True, True, False, False, False)])
def test_a_lean_prefill_takes_the_stubs_only_where_the_lean_off_step_may(overlap, lean_off, sync, built, stubs):
    plug = active(Plugin({}))
    off = plug.off_path
    off.fast = fastoff.FastOff(None, None, names=V17) if built else None
    off.lean_off, off.sync_draft = lean_off, sync
    got = offstubs.for_prefill(off, SimpleNamespace(enable_overlap=overlap))
    assert (got is off.fast and got is not None) if stubs else got is None
