"""Plain off batches (controller/plugin/plainoff.py): which running batch becomes plain and when it goes back, what
the hooks change in SGLang's speculative seams (the published lengths, the stash, the memory estimate, the metrics),
and where the hooks are registered. SGLang's own objects are stand-ins here; the facts they stand for are quoted
from the wheels in tests/test_plain_off_facts.py; the forward itself needs torch (test at the end)."""
from types import SimpleNamespace

import pytest

from controller.plugin import fastoff, plainoff
from controller.plugin.failures import Failures
from controller.plugin.instance import Plugin
from controller.plugin.offpath import OffPath
from controller.plugin.router import Router
from controller.plugin.support import PLAIN_OFF_TARGETS


class Algo:
    def __init__(self, name):
        self.name = name

    def is_none(self):
        return self.name == "NONE"


EAGLE3, NONE = Algo("EAGLE3"), Algo("NONE")


class Mode:
    def __init__(self, extend):
        self.extend = extend

    def is_extend(self):
        return self.extend


class DraftInput:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setitem(fastoff._sg, "DraftInput", DraftInput)
    router = Router(0, Failures(), version=lambda: "0.5.17")
    router.checked = True                                   # active: the engine is ours
    off = OffPath(router, router.failures)
    off.fast = fastoff.FastOff(None, None)
    p = plainoff.PlainOff(off, registered=True)
    p.none, p.spec_algorithm = NONE, EAGLE3                 # (bound from SGLang at the first batch made plain)
    off.plain = p
    return p


def batch(n=3, extend=True, algo=EAGLE3, **flags):
    reqs = [SimpleNamespace(kv_committed_len=10) for _ in range(n)]
    b = SimpleNamespace(reqs=reqs, spec_algorithm=algo, spec_info=object(), forward_mode=Mode(extend),
                        seq_lens_cpu=[10] * n, req_pool_indices=f"rows-of-{n}", enable_overlap=True,
                        token_to_kv_pool_allocator=SimpleNamespace(page_size=1), has_grammar=False,
                        return_logprob=False, return_hidden_states=False)
    b.__dict__.update(flags)
    return b


def prepared(p, b):
    calls = []
    p.prepare(lambda batch: calls.append(batch.spec_algorithm), b)
    return calls


def test_a_batch_straight_from_its_prefill_that_does_not_speculate_becomes_plain(plain):
    b = batch()
    assert prepared(plain, b) == [NONE]                     # SGLang's preparation saw the plain mode
    assert b.spec_info is None and plain.entered == 1
    assert plain.off.router.last_batch_size == 3            # what a lean prefill reads


def test_a_batch_that_speculates_or_is_not_fresh_from_a_prefill_stays_speculative(plain):
    plain.off.router.threshold = 8                          # batch 3 speculates
    assert prepared(plain, batch()) == [EAGLE3]
    plain.off.router.threshold = 0
    assert prepared(plain, batch(extend=False)) == [EAGLE3]    # decoded speculatively before: no resync built
    assert prepared(plain, batch(seq_lens_cpu=None)) == [EAGLE3]
    assert plain.entered == 0


@pytest.mark.parametrize("flag", ["has_grammar", "return_logprob", "return_hidden_states"])
def test_requests_that_need_the_speculative_path_keep_a_batch_speculative(plain, flag):
    assert prepared(plain, batch(**{flag: True})) == [EAGLE3]


@pytest.mark.parametrize("extra, why", [
    (dict(req_to_token_pool=SimpleNamespace(mamba_pool=object())), "hybrid (mamba) model"),
    (dict(hisparse_coordinator=object()), "hierarchical sparse attention"),
    (dict(model_config=SimpleNamespace(is_encoder_decoder=True)), "encoder-decoder model"),
    (dict(multimodal_inputs=[None, object()]), "multimodal request"),
    (dict(enable_overlap=False), "overlap scheduler off"),
    (dict(token_to_kv_pool_allocator=SimpleNamespace(page_size=16)), "page size above 1")])
def test_models_and_engines_whose_plain_state_sglang_keeps_apart_stay_speculative(plain, extra, why):
    assert plainoff.batch_unsupported_reason(batch(**extra)) == why
    assert prepared(plain, batch(**extra)) == [EAGLE3]
    assert plainoff.batch_unsupported_reason(batch(multimodal_inputs=[None, None],
                                                   req_to_token_pool=SimpleNamespace(mamba_pool=None))) is None


def test_a_plain_batch_goes_back_when_it_speculates_with_a_draft_input_over_its_rows(plain):
    b = batch(extend=False, algo=NONE, spec_info=None)
    assert prepared(plain, b) == [NONE] and plain.left == 0   # still off: stays plain
    plain.off.router.threshold = 4
    assert prepared(plain, b) == [EAGLE3]
    assert b.spec_info.future_indices == "rows-of-3" and plain.left == 1


def test_the_run_time_key_switches_plain_batches_where_the_engine_was_started_with_them(monkeypatch):
    """spec_controller_plain_off: off batches as plain ones or not in one engine (so that the two can be measured in
    one engine's rotation); refused, changing nothing, where the engine was not started with plainoff.ENV=1."""
    from controller.contract import PLAIN_OFF_KEY
    monkeypatch.setattr("controller.plugin.instance.sglang_version", lambda: "0.5.17")
    on = Plugin({plainoff.ENV: "1"})
    assert on.validate_own_keys({PLAIN_OFF_KEY: False}) is None
    on.apply_own_keys({PLAIN_OFF_KEY: False})
    assert not on.plain.enabled and on.plain.registered
    on.apply_own_keys({PLAIN_OFF_KEY: True})
    assert on.plain.enabled
    assert on.validate_own_keys({PLAIN_OFF_KEY: 1.5}) == f"{PLAIN_OFF_KEY} must be true or false, got 1.5"
    off = Plugin({})
    assert off.validate_own_keys({PLAIN_OFF_KEY: True}) == (f"{PLAIN_OFF_KEY}: not in this engine (start it with "
                                                            f"{plainoff.ENV}=1; SGLang 0.5.17-0.5.18)")
    assert not off.plain.enabled


def test_a_plain_batch_goes_back_when_a_grammar_request_joins_or_the_switch_is_off(plain):
    b = batch(extend=False, algo=NONE, spec_info=None, has_grammar=True)
    assert prepared(plain, b) == [EAGLE3]
    plain.enabled = False
    assert prepared(plain, batch(extend=False, algo=NONE, spec_info=None)) == [EAGLE3]


def test_the_memory_estimate_follows_the_mode_of_the_next_preparation(plain):
    spec_v2 = []
    b = batch(extend=False, algo=NONE, spec_info=None,
              _new_tokens_required_next_decode_spec_v2=lambda reqs, page: spec_v2.append(len(reqs)) or 8 * len(reqs))
    original = lambda batch, selected=None: 1 * (len(batch.reqs) if selected is None else len(selected))
    assert plain.memory(original, b) == 3                   # stays plain: one slot a request
    plain.off.router.threshold = 4                          # its next preparation speculates: spec-v2's reserve
    assert plain.memory(original, b) == 24 and plain.memory(original, b, [0, 2]) == 16 and spec_v2 == [3, 2]
    b.spec_algorithm = EAGLE3
    assert plain.memory(original, b) == 3                   # a speculative batch: SGLang's own estimate


def test_a_plain_batch_publishes_its_advanced_lengths_once_for_its_own_rows(plain, caplog):
    got = []
    publish = lambda fm, idx, lens, *a, **k: got.append(lens)
    rows = ["the plain batch's req_pool_indices"]
    plain.publish_lens = (rows, "seq_lens after prepare")
    plain.publish(publish, "map", rows, "seq_lens + 1")
    plain.publish(publish, "map", rows, "a prefill's lengths")
    assert got == ["seq_lens after prepare", "a prefill's lengths"] and plain.future_map == "map"
    plain.publish_lens = (rows, "seq_lens after prepare")
    plain.publish(publish, "map", ["other rows"], "theirs")          # not the plain batch's publish: SGLang's lengths
    assert got[-1] == "theirs" and plain.publish_lens is None and "was not the next one" in caplog.text


class Rows:
    dtype = "int64"

    def __init__(self):
        self.writes = []

    def __setitem__(self, key, value):
        self.writes.append((key, value))


def test_the_stash_of_a_plain_payload_writes_its_tokens_only(plain):
    tokens = SimpleNamespace(to=lambda dtype: ("tokens as", dtype))
    fm = SimpleNamespace(_forward_buf_initialized=True, output_tokens_buf=Rows())
    called = []
    original = lambda m, idx, payload: called.append(payload)
    rows = SimpleNamespace(shape=(2,))
    plain.stash(original, fm, rows, SimpleNamespace(bonus_tokens=tokens, topk_p=None, hidden_states=None))
    assert called == [] and fm.output_tokens_buf.writes == [(rows, ("tokens as", "int64"))]
    spec = SimpleNamespace(bonus_tokens=tokens, topk_p="p", hidden_states=None)
    plain.stash(original, fm, rows, spec)
    assert called == [spec]                                 # a speculative payload: SGLang's stash


def test_a_plain_result_counts_as_a_steps_0_step_and_is_sampled(plain):
    counted, sampled = [], []
    plain.sample = lambda result, b: sampled.append((result, b))
    processor = SimpleNamespace(metrics_reporter=SimpleNamespace(update_spec_metrics=lambda bs, n: counted.append((bs, n))))
    b = batch(algo=NONE, batch_size=lambda: 3)
    plain.after_normalize(None, processor, batch=b, result="r", logits_output=None, next_token_ids=None)
    assert counted == [(3, 0)] and sampled == [("r", b)]
    plain.after_normalize(None, processor, batch=batch(batch_size=lambda: 3), result="r")
    assert len(counted) == len(sampled) == 1                # a speculative batch: SGLang's own and the AFTER hook's


def test_the_worker_hook_sends_plain_batches_to_the_plain_forward(plain):
    plain.forward = lambda worker, b: ("plain", b)
    b = batch(algo=NONE)
    assert plain.off.forward_batch_generation(lambda *a, **k: "sglang", "worker", b) == ("plain", b)


def test_hooks_are_registered_only_where_asked_for_on_a_version_the_seams_were_read_in(monkeypatch):
    monkeypatch.setattr("controller.plugin.instance.sglang_version", lambda: "0.5.17")
    on = Plugin({plainoff.ENV: "1"})
    assert on.plain.registered and set(PLAIN_OFF_TARGETS) <= set(on.hooks())
    assert on.hooks()[f"{plainoff.SCHEDULE_BATCH}.prepare_for_decode"][0] == on.plain.prepare
    assert not set(PLAIN_OFF_TARGETS) & set(Plugin({}).hooks())
    monkeypatch.setattr("controller.plugin.instance.sglang_version", lambda: "0.5.19")
    assert not Plugin({plainoff.ENV: "1"}).plain.registered
    assert plainoff.unsupported_reason((0, 5, 19, 0)[:3]) and plainoff.unsupported_reason(None)
    assert plainoff.unsupported_reason((0, 5, 18)) is None


def test_the_forward_gathers_inputs_runs_the_fast_graphs_writes_the_draft_kv_and_publishes_the_lengths(plain):
    torch = pytest.importorskip("torch")
    seen = {}
    names = SimpleNamespace(read_done_event="ev", last_reader="draft_worker",
                            draft_context=SimpleNamespace(enter=lambda w: __import__("contextlib").nullcontext()))
    fast = plain.off.fast
    fast.names, fast.attn_backend, fast.graph_runner = names, "fast backend", "fast graphs"
    runner = SimpleNamespace(attn_backend="spec backend", decode_cuda_graph_runner="spec graphs", ev="stale")

    def target_forward(b, capture_hidden_mode):
        seen["runner"] = (runner.attn_backend, runner.decode_cuda_graph_runner, capture_hidden_mode)
        seen["input_ids"] = b.input_ids.tolist()
        runner.ev = "forward's event"
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states="aux"), next_token_ids=torch.tensor([7, 8]),
                               can_run_cuda_graph=True)

    writes = []
    writer = SimpleNamespace(write=lambda h, t, pos, loc: writes.append((h, t.tolist(), pos.dtype, pos.tolist(), loc.dtype)))
    plain.off.active_writer = lambda: writer
    plain.off._flush_kv = lambda draft, keep=None: None
    monkey = {"torch": torch, "FULL_HIDDEN": "FULL", "NO_HIDDEN": "NULL"}
    fastoff._sg.update(monkey)
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner, forward_batch_generation=target_forward),
                             draft_worker=SimpleNamespace())
    worker.draft_worker.ev = None
    plain.future_map = SimpleNamespace(output_tokens_buf=torch.tensor([0, 11, 22, 33]))
    b = SimpleNamespace(req_pool_indices=torch.tensor([3, 1]), seq_lens=torch.tensor([5, 9], dtype=torch.int32),
                        out_cache_loc=torch.tensor([40, 41], dtype=torch.int32))
    out = plain.forward(worker, b)
    assert seen == {"runner": ("fast backend", "fast graphs", "FULL"), "input_ids": [33, 11]}
    assert (runner.attn_backend, runner.decode_cuda_graph_runner) == ("spec backend", "spec graphs")   # put back
    # the draft's KV at the decoded positions (the lengths after prepare, less one) and the slots SGLang allocated
    assert writes == [("aux", [7, 8], torch.int64, [4, 8], torch.int64)]
    assert worker.draft_worker.ev == "forward's event" and runner.ev is None     # the WAR barrier's event handed over
    assert plain.publish_lens[0] is b.req_pool_indices and plain.publish_lens[1] is b.seq_lens
    assert out.next_token_ids.tolist() == [7, 8]
    assert (plain.batches, fast.batches, fast.graph_batches, plain.off.kv_writes) == (1, 1, 1, 1)


def test_in_an_engine_without_speculation_every_hook_passes_through(plain):
    """Its batches are all non-speculative (SPEC_CONTROLLER_PLAIN_OFF set for every engine on a host): none is ours
    until the plugin made one plain."""
    plain.none = plain.spec_algorithm = None
    b = batch(extend=False, algo=NONE, spec_info=None)
    assert prepared(plain, b) == [NONE] and b.spec_info is None and plain.left == 0
    assert plain.memory(lambda batch, selected=None: "sglang's", b) == "sglang's"
    called = []
    plain.stash(lambda *a: called.append(a), "map", "rows", SimpleNamespace(topk_p=None, hidden_states=None))
    counted = []
    processor = SimpleNamespace(metrics_reporter=SimpleNamespace(update_spec_metrics=lambda *a: counted.append(a)))
    plain.after_normalize(None, processor, batch=b, result="r")
    assert len(called) == 1 and counted == []
