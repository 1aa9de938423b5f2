"""The fast off path's logprobs (controller/plugin/offlogprob.py) on CPU, beyond tests/test_fastoff_cpu.py:
the tests of its mutation-testing pass (bench/mutation.py, group offlogprob), one behaviour each."""
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from controller.plugin import internals, offlogprob
from tests.test_fastoff_cpu import LOGITS, V17, V23, compute_spec_logprobs, logprob_batch, tensor


def kept_logits() -> offlogprob.Kept:
    kept = offlogprob.Kept()
    kept.logits = tensor(LOGITS.copy())
    return kept


def logits_output() -> SimpleNamespace:
    return SimpleNamespace(next_token_logits=None, next_token_logprobs=None)


def recording_torch(calls: list) -> SimpleNamespace:
    def arange(n, dtype, device):
        calls.append((n, dtype, device))
        return tensor(np.arange(n, dtype=np.int32))
    return SimpleNamespace(int32="int32", arange=arange)


def test_the_releases_function_is_imported_by_its_dotted_name_once(monkeypatch):
    """fill finds the release's logprob function by the table's dotted path (internals._resolve) the
    first time, and keeps it: later batches do not import it again."""
    module_name, _, fn_name = internals.SPEC_LOGPROBS.rpartition(".")
    calls = []

    def fn(batch, logits_output, predict, *, accept_index=None):
        calls.append(np.asarray(accept_index).tolist())
        compute_spec_logprobs(batch, logits_output, predict, accept_index=accept_index)
    module = ModuleType(module_name)
    setattr(module, fn_name, fn)
    monkeypatch.setitem(sys.modules, module_name, module)
    monkeypatch.setattr(offlogprob, "_fns", {})
    batch, tokens = logprob_batch(True), tensor(LOGITS.argmax(axis=1).astype(np.int32))
    offlogprob.fill(V23, batch, logits_output(), kept_logits(), tokens, recording_torch([]))
    assert offlogprob._fns == {internals.SPEC_LOGPROBS: fn}
    monkeypatch.delitem(sys.modules, module_name)          # no longer importable: the kept one is used
    out = logits_output()
    offlogprob.fill(V23, batch, out, kept_logits(), tokens, recording_torch([]))
    assert calls == [[[0], [1], [2]]] * 2 and np.asarray(out.next_token_logprobs).shape == (3, 1)


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
def test_the_accept_index_is_int32_on_the_tokens_device(monkeypatch, names):
    """Steps-0's accept index: torch.arange(bs) as int32, on the device of the tokens (the GPU's)."""
    got = []
    monkeypatch.setattr(offlogprob, "_fns", {names.spec_logprobs: lambda *a, **kw: got.append((a, kw))})
    tokens = tensor(np.array([0, 3, 4], dtype=np.int32))
    tokens.device = "cuda:1"
    calls = []
    offlogprob.fill(names, logprob_batch(True), logits_output(), kept_logits(), tokens, recording_torch(calls))
    assert calls == [(3, "int32", "cuda:1")]
    (args, kwargs), = got
    accept_index = args[3] if names is V17 else kwargs["accept_index"]
    assert np.asarray(accept_index).tolist() == [[0], [1], [2]]


def test_fill_without_the_samplers_logits_says_so():
    with pytest.raises(RuntimeError) as raised:
        offlogprob.fill(V23, logprob_batch(True), logits_output(), offlogprob.Kept(), tensor([1, 2, 3]),
                        recording_torch([]))
    assert str(raised.value) == "the plain decode's sampler did not run: no logits for the logprobs"


def test_a_batch_without_return_logprob_keeps_the_sampler():
    """A batch object without the attribute (as without logprobs): nothing kept, the sampler untouched."""
    sampler = object()
    runner = SimpleNamespace(sampler=sampler)
    with offlogprob.keeping_logits(runner, SimpleNamespace()) as kept:
        assert kept is None and runner.sampler is sampler
    assert runner.sampler is sampler


def test_the_wrapped_sampler_passes_every_argument_on_but_return_logprob():
    """SGLang's own sampler gets what its caller passed, positional and keyword (return_logprob False),
    and its tokens are what the wrapper returns."""
    seen = []

    def sampler(*args, **kwargs):
        seen.append((args, kwargs))
        return "tokens"
    runner = SimpleNamespace(sampler=sampler)
    out, info = SimpleNamespace(next_token_logits=tensor(LOGITS.copy())), SimpleNamespace(is_all_greedy=True)
    with offlogprob.keeping_logits(runner, logprob_batch(True)) as kept:
        assert runner.sampler(out, info, True, [0, 2], [None, [1]], positions="positions") == "tokens"
    assert seen == [((out, info, False, [0, 2], [None, [1]]), {"positions": "positions"})]
    assert kept.logits is out.next_token_logits and runner.sampler is sampler


def test_a_batch_without_sampling_info_is_not_watermarked():
    assert offlogprob.unsupported_reason(SimpleNamespace(return_logprob=True)) is None
