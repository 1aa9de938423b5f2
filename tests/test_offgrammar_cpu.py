"""Grammar-constrained requests on the fast off path (controller/plugin/offgrammar.py) on CPU.

The target worker here decodes as SGLang's TpModelWorker.forward_batch_generation and ModelRunner.sample
do (read from the wheels: sglang_names.GRAMMAR_FACTS): under overlap, a worker that does not speculate hands
a grammar batch back unsampled with delay_sample_func; the sample builds the vocab mask from the requests'
FSMs as they stand when it runs (update_regex_vocab_mask: rows without a grammar stay unconstrained),
applies it to the logits and calls the sampler. The scheduler's grammar barrier makes each FSM accept the
previous step's token, which an engine without speculation has accepted before it samples: the token
must come from the mask built after it."""
from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import numpy as np
import pytest

from controller.plugin import fastoff, internals, offgrammar, offlogprob
from controller.plugin.instance import Plugin
from tests.test_fastoff_cpu import V17, V23, Sampler, engine, fake_torch, log_softmax, tensor  # noqa: F401
from tests.test_plugin_cpu import active, decode_batch, worker

VOCAB = 6
# the model's own preference, per request: token 5 wins unconstrained
LOGITS = np.array([[0.0, 1.0, 2.0, 3.0, 0.5, 9.0], [0.0, 1.0, 2.0, 3.0, 0.5, 9.0], [4.0, 0.0, 1.0, 2.0, 3.0, 9.0]])


class FSM:
    """A grammar whose state k allows only ALLOWED[k]; accept_token moves it on (and refuses another token,
    as xgrammar's matcher does)."""
    def __init__(self, allowed: list[set[int]], log: list):
        self.allowed, self.state, self.log, self.finished = allowed, 0, log, False

    def accept_token(self, token: int) -> None:
        if token not in self.allowed[self.state]:
            raise ValueError(f"token {token} not allowed in state {self.state}")
        self.log.append(("accept", token))
        self.state += 1

    def is_terminated(self) -> bool:
        return self.state >= len(self.allowed)

    def mask_row(self) -> np.ndarray:
        return np.array([t in self.allowed[self.state] for t in range(VOCAB)])


class Target:
    """SGLang's TpModelWorker for the plain decode (and ModelRunner.sample inside it)."""
    def __init__(self, runner, log: list, overlap: bool = True):
        self.model_runner, self.log = runner, log
        self.enable_overlap, self.enable_spec = overlap, True
        self.results = []

    def forward_batch_generation(self, batch, capture_hidden_mode):
        self.log.append("forward")
        out = SimpleNamespace(next_token_logits=tensor(LOGITS[:len(batch.reqs)].copy()), hidden_states="aux",
                              next_token_logprobs=None, next_token_top_logprobs_val=None,
                              next_token_token_ids_logprobs_val=None)
        grammars = [r.grammar for r in batch.reqs] if batch.has_grammar else None     # ForwardBatch.init_new
        result = SimpleNamespace(logits_output=out, can_run_cuda_graph=True, next_token_ids=None,
                                 delay_sample_func=None)
        self.results.append(result)

        def sample():
            result.next_token_ids = self.sample(out, batch, grammars)
            return result
        if self.enable_overlap and not self.enable_spec and grammars is not None:
            result.delay_sample_func = sample
            return result
        sample()
        return result

    def sample(self, out, batch, grammars):
        if grammars:                     # update_regex_vocab_mask, then apply_logits_bias's grammar_mask.apply
            rows = [g.mask_row() if g is not None and not g.finished and not g.is_terminated()
                    else np.ones(VOCAB, bool) for g in grammars]
            self.log.append(("mask", [np.flatnonzero(r).tolist() for r in rows]))
            out.next_token_logits[~np.array(rows)] = -np.inf
        return self.model_runner.sampler(out, batch.sampling_info, batch.return_logprob, batch.top_logprobs_nums,
                                         batch.token_ids_logprobs, batch.seq_lens)


def grammar_engine(names=V23, overlap: bool = True):
    w, runner, last, seen = engine(names, publish=True)
    runner.sampler, log = Sampler(), []
    w.target_worker = Target(runner, log, overlap)
    return w, log


def req(fsm: FSM | None) -> SimpleNamespace:
    return SimpleNamespace(grammar=fsm)


def grammar_batch(reqs: list, **extra) -> SimpleNamespace:
    n = len(reqs)
    fields = dict(seq_lens=tensor(np.array([3, 5, 2][:n])), seq_lens_cpu=None, seq_lens_sum=None,
                  req_pool_indices=tensor(np.array([1, 2, 3][:n])), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6, 1][:n])),
                  reqs=reqs, has_grammar=any(r.grammar is not None for r in reqs), top_logprobs_nums=[0] * n,
                  token_ids_logprobs=[None] * n, sampling_info=SimpleNamespace(is_all_greedy=True, temperatures=None))
    return decode_batch(n, **{**fields, **extra})


def barrier_of(pending: list[tuple[FSM, int]], log: list):
    """The scheduler's _advance_pending_grammar: the FSMs accept the previous batch's tokens (once)."""
    def barrier():
        log.append("barrier")
        while pending:
            fsm, token = pending.pop(0)
            fsm.accept_token(token)
    return barrier


def run(w, batch, barrier, names=V23, **kw):
    return fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=names, grammar=True), batch,
                       on_publish=None, grammar_barrier=barrier, **kw)


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
def test_the_token_is_sampled_under_the_mask_built_after_the_fsm_accepted_the_previous_token(fake_torch, names):
    # state 0 allows 3 (the previous step's token, still pending in the scheduler's queue), state 1 allows 1 only:
    # sampled at launch (or before the barrier) the mask would be state 0's and the token 3
    w, log = grammar_engine(names)
    fsm = FSM([{3}, {1}, {2}], log)
    result = run(w, grammar_batch([req(fsm)]), barrier_of([(fsm, 3)], log), names)
    assert np.asarray(result.next_token_ids).tolist() == [1]
    assert log == ["forward", "barrier", ("accept", 3), ("mask", [[1]])]      # forward launched, then the FSM
    assert fsm.state == 1                    # the new token is left to the scheduler's result processing
    assert list(result.accept_lens) == [1] and np.asarray(result.next_draft_input.bonus_tokens).tolist() == [1]
    assert w.target_worker.enable_spec is True
    # the closure (it holds the forward batch and its vocab mask) is let go, as the scheduler does after it ran
    assert [r.delay_sample_func for r in w.target_worker.results] == [None]


def test_a_batch_mixing_grammar_and_plain_requests_masks_only_the_grammar_rows(fake_torch):
    w, log = grammar_engine()
    a, c = FSM([{5}, {2}], log), FSM([{4}, {0, 3}], log)
    batch = grammar_batch([req(a), req(None), req(c)])
    result = run(w, batch, barrier_of([(a, 5), (c, 4)], log))
    # row 0: state 1 allows 2; row 1 (no grammar): the model's own 5; row 2: state 1 allows {0, 3}: 0 wins (4.0)
    assert np.asarray(result.next_token_ids).tolist() == [2, 5, 0]
    assert log[-1] == ("mask", [[2], list(range(VOCAB)), [0, 3]])


def test_a_batch_without_grammar_neither_waits_on_the_barrier_nor_touches_the_worker(fake_torch):
    # the scheduler hands every EAGLE decode batch its barrier; calling it would wait for the previous result
    w, log = grammar_engine()
    flips = []

    class Watched(Target):
        def __setattr__(self, name, value):
            if name == "enable_spec" and "enable_spec" in self.__dict__:
                flips.append(value)
            super().__setattr__(name, value)
    w.target_worker = Watched(w.target_worker.model_runner, log)
    result = run(w, grammar_batch([req(None), req(None)]), lambda: pytest.fail("the barrier was called"))
    assert np.asarray(result.next_token_ids).tolist() == [5, 5] and flips == [] and log == ["forward"]


def test_the_worker_is_told_it_speculates_again_also_when_the_decode_fails(fake_torch):
    w, log = grammar_engine()
    w.target_worker.forward_batch_generation = lambda batch, capture_hidden_mode: 1 / 0
    fsm = FSM([{3}, {1}], log)
    with pytest.raises(ZeroDivisionError):
        run(w, grammar_batch([req(fsm)]), barrier_of([(fsm, 3)], log))
    assert w.target_worker.enable_spec is True and log == []            # no barrier before a decode


def test_without_a_barrier_the_sample_reads_the_fsm_as_it_stands(fake_torch):
    # SGLang's synchronous loop: the previous result was processed before this launch, no barrier is handed
    for overlap in (True, False):
        w, log = grammar_engine(overlap=overlap)
        fsm = FSM([{3}, {1}], log)
        fsm.accept_token(3)
        result = run(w, grammar_batch([req(fsm)]), None)
        assert np.asarray(result.next_token_ids).tolist() == [1] and "barrier" not in log


def test_a_barrier_for_a_decode_that_sampled_at_once_is_an_error(fake_torch):
    w, log = grammar_engine(overlap=False)       # served() never lets this through; if it did: say so
    fsm = FSM([{3}, {1}], log)
    with pytest.raises(RuntimeError, match="before its grammar barrier"):
        run(w, grammar_batch([req(fsm)]), barrier_of([(fsm, 3)], log))
    assert w.target_worker.enable_spec is True


def test_logprobs_of_a_grammar_batch_come_from_the_masked_logits(fake_torch, monkeypatch):
    from tests.test_fastoff_cpu import compute_spec_logprobs
    monkeypatch.setattr(offlogprob, "_fns", {internals.SPEC_LOGPROBS: compute_spec_logprobs})
    w, log = grammar_engine()
    fsm = FSM([{3}, {1, 2}], log)
    batch = grammar_batch([req(fsm), req(None)], return_logprob=True, top_logprobs_nums=[2, 0])
    result = run(w, batch, barrier_of([(fsm, 3)], log))
    assert np.asarray(result.next_token_ids).tolist() == [2, 5]
    assert w.target_worker.model_runner.sampler.calls == [False]        # no logprobs of the sampler's own
    masked = LOGITS[:2].copy()
    masked[0, [0, 3, 4, 5]] = -np.inf
    expected = log_softmax(masked)
    assert np.allclose(np.asarray(result.logits_output.next_token_logprobs)[:, 0], expected[[0, 1], [2, 5]])
    assert result.logits_output.next_token_top_logprobs_idx[0] == [2, 1]    # only the allowed tokens lead


def test_the_kv_writer_gets_the_tokens_sampled_under_the_mask(fake_torch):
    w, log = grammar_engine(V17)                 # 0.5.17: the draft's TP context is a method of the draft worker

    class Context:
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return None
    w.draft_worker = SimpleNamespace(draft_tp_context=lambda group: Context(), draft_runner=SimpleNamespace(tp_group="g"))
    written = []
    writer = SimpleNamespace(write=lambda hidden, tokens, positions, loc: written.append(np.asarray(tokens).tolist()))
    fsm = FSM([{3}, {1}], log)
    fast = fastoff.FastOff("decode backend", "decode graphs", with_hidden=True, names=V17, grammar=True)
    fastoff.run(w, fast, grammar_batch([req(fsm)]), None, kv_writer=writer, grammar_barrier=barrier_of([(fsm, 3)], log))
    assert written == [[1]]


# --- which grammar batches the fast path takes, and the fallback counted where it does not ----------
def test_served_needs_the_seam_and_for_a_barrier_an_overlapping_worker():
    w = SimpleNamespace(target_worker=SimpleNamespace(enable_overlap=True))
    seam, none = SimpleNamespace(grammar=True), SimpleNamespace(grammar=False)
    assert offgrammar.served(seam, w, lambda: None) and offgrammar.served(seam, w, None)
    assert not offgrammar.served(none, w, lambda: None) and not offgrammar.served(None, w, None)
    w.target_worker.enable_overlap = False
    assert not offgrammar.served(seam, w, lambda: None) and offgrammar.served(seam, w, None)


def test_the_seam_is_the_tables_and_the_live_workers(caplog):
    tw = SimpleNamespace(enable_spec=True, enable_overlap=True)
    assert all(offgrammar.available(t, tw) for t in internals.TABLES)
    assert not offgrammar.available(dataclasses.replace(V23, grammar=False), tw)
    with caplog.at_level(logging.WARNING, logger="spec_controller.plugin"):
        assert not offgrammar.available(V23, SimpleNamespace(enable_overlap=True))
    assert "no enable_spec" in caplog.text


def test_the_start_up_line_says_what_grammar_batches_will_do(caplog):
    tw = SimpleNamespace(enable_spec=True, enable_overlap=True)
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        offgrammar.available(V23, tw, switched_on=False)
    assert "steps-0" in caplog.text and f"{offgrammar.ENV}=0" in caplog.text and "take the fast" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        offgrammar.available(V23, tw, switched_on=True)
    assert "take the fast off path" in caplog.text


@pytest.mark.parametrize("table,target,served", [
    (V23, SimpleNamespace(enable_spec=True, enable_overlap=True), True),
    (dataclasses.replace(V23, grammar=False), SimpleNamespace(enable_spec=True, enable_overlap=True), False),
    (V23, SimpleNamespace(enable_overlap=True), False)], ids=["seam", "table-without", "worker-without"])
def test_the_build_takes_the_seam_from_the_releases_table_and_the_live_worker(monkeypatch, table, target, served):
    plug = active(Plugin({}))
    plug.router.version = lambda: "0.5.23"
    monkeypatch.setattr(internals, "for_version", lambda version: table)
    monkeypatch.setattr(fastoff, "build", lambda w, names, with_hidden=False: fastoff.FastOff(None, None, names=names))
    monkeypatch.setattr(fastoff, "all_ranks_agree", lambda ok: ok)
    w = worker()
    w.target_worker = target
    plug.off_path.after_init_cuda_graphs(None, w)
    assert plug.off_path.fast.names is table and plug.off_path.fast.grammar is served


@pytest.fixture
def plugin_run(monkeypatch):
    """A plugin with a built fast path (grammar as given) whose run() records its grammar barrier."""
    def make(grammar: bool = True, env: dict | None = None, overlap: bool = True):
        plug = active(Plugin({} if env is None else env))
        plug.off_path.fast = fastoff.FastOff(None, None, grammar=grammar)
        ran = []

        def fake_run(worker, fast, batch, on_publish, sync=False, kv=None, grammar_barrier=None, lean=False,
                     before_write=None):
            ran.append(grammar_barrier)
            return "fast-result"
        monkeypatch.setattr(fastoff, "run", fake_run)
        w = worker()
        w.activate_step_by_batch = lambda bs: plug.router.activate_step_by_batch(None, w, bs)
        w.target_worker = SimpleNamespace(enable_overlap=overlap)
        return plug, w, ran
    return make


def grammar_off_batch():
    return decode_batch(20, has_grammar=True)


def sglang(worker, batch, *args, **kwargs):
    return "sglang-result"


def test_grammar_batches_take_the_fast_path_with_the_schedulers_barrier(plugin_run):
    plug, w, ran = plugin_run()
    barrier = object()
    assert plug.off_path.forward_batch_generation(sglang, w, grammar_off_batch(), on_publish="pub",
                                                  grammar_barrier=barrier) == "fast-result"
    assert plug.off_path.forward_batch_generation(sglang, w, grammar_off_batch(), "pub", barrier) == "fast-result"
    assert ran == [barrier, barrier]
    c = plug.off_path.counters()
    assert (c["off_fallbacks"], c["off_fallbacks_grammar"]) == (0, 0)


@pytest.mark.parametrize("case", ["release lacks the seam", "switched off", "worker does not overlap"])
def test_grammar_batches_keep_steps_0_and_are_counted_where_the_seam_cannot_serve_them(plugin_run, case):
    env = {"switched off": {offgrammar.ENV: "0"}}.get(case)
    plug, w, ran = plugin_run(grammar=case != "release lacks the seam", env=env,
                              overlap=case != "worker does not overlap")
    assert plug.off_path.forward_batch_generation(sglang, w, grammar_off_batch(), "pub", object()) == "sglang-result"
    assert plug.off_path.forward_batch_generation(sglang, w, decode_batch(20), "pub", object()) == "fast-result"
    c = plug.off_path.counters()
    assert (c["off_fallbacks"], c["off_fallbacks_grammar"], len(ran)) == (1, 1, 1)


def test_a_grammar_batch_with_watermarked_logprobs_is_counted_as_logprobs(plugin_run):
    plug, w, ran = plugin_run()
    batch = decode_batch(20, has_grammar=True, return_logprob=True,
                         sampling_info=SimpleNamespace(has_watermark_candidates=True))
    plug.off_path.forward_batch_generation(sglang, w, batch, "pub", object())
    c = plug.off_path.counters()
    assert (c["off_fallbacks_logprob"], c["off_fallbacks_grammar"], ran) == (1, 0, [])
