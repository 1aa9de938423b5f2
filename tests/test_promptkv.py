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
