"""The fast off path's version handling on CPU: which release gets which table (or which reason),
the build-time check of the live engine against its table (fake SGLang modules), the hand-over of
the scheduler's read-done event with each release's names (run() with numpy stand-ins for torch),
the draft's TP context of each release, and the logprobs of an off batch (offlogprob.py): steps-0's
values and layout, as the scheduler's spec-v2 result processing reads them."""
import dataclasses
import logging
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from controller import contract
from controller.contract import decode
from controller.plugin import fastoff, internals, offlogprob
from controller.plugin.instance import Plugin
from tests.test_plugin_cpu import active, decode_batch, worker

V17, V23 = internals.TABLES[0], internals.TABLES[-1]


@pytest.mark.parametrize("version,table,reason", [
    ("0.5.14", None, contract.REASON_NO_CAPTURE_MODE), ("0.5.15.post1", None, contract.REASON_NO_CAPTURE_MODE),
    ("0.5.16", None, contract.REASON_0_5_16), ("0.5.17", ("0.5.17", "0.5.17"), None),
    ("0.5.19", ("0.5.18", "0.5.20"), None), ("0.5.21", ("0.5.21", "0.5.21"), None),
    ("0.5.22", ("0.5.22", "0.5.22"), None), ("0.5.23.post1", ("0.5.23", "0.5.23"), None)])
def test_each_release_gets_its_table_or_the_reason_it_has_none(version, table, reason):
    found = internals.for_version(contract.parse_version(version))
    assert (found.versions if found else None) == table
    if reason is not None:
        assert internals.no_table_reason(contract.parse_version(version)) == reason


def building(plug, monkeypatch, version: str, build) -> list:
    """after_init_cuda_graphs on `version`, with `build` standing in for fastoff.build; the tables it got."""
    got = []
    plug.router.version = lambda: version
    monkeypatch.setattr(fastoff, "build", lambda w, names, with_hidden=False: got.append(names) or build())
    monkeypatch.setattr(fastoff, "all_ranks_agree", lambda ok: ok)
    plug.off_path.after_init_cuda_graphs(None, worker())
    return got


def test_the_newest_release_builds_with_its_own_table(monkeypatch):
    plug = active(Plugin({}))
    got = building(plug, monkeypatch, "0.5.23", lambda: fastoff.FastOff(None, None, names=V23))
    assert got == [V23] and plug.off_path.fast is not None
    stats = decode(plug.telemetry.stats_message())
    assert (stats["sglang"], stats["off_path"], stats["off_reason"]) == ("0.5.23", contract.OFF_PATHS[1], "")
    assert stats["off_path_evidence"] == "contract-checked against the 0.5.23 wheel, not measured on a GPU"


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16"])
def test_releases_without_a_table_keep_steps_0_and_say_why(monkeypatch, version):
    plug = active(Plugin({}))
    assert building(plug, monkeypatch, version, lambda: pytest.fail("must not capture")) == []
    stats = decode(plug.telemetry.stats_message())
    assert (stats["off_path"], stats["sglang"], stats["off_path_evidence"]) == ("steps-0", version, "")
    assert stats["off_reason"] == contract.OFF_REASONS[internals.no_table_reason(contract.parse_version(version))]


def test_a_missing_internal_keeps_steps_0_logged_once_and_shown(monkeypatch, caplog):
    plug = active(Plugin({}))

    def missing():
        raise internals.MissingInternal("ModelRunner.shared_read_done_event")
    with caplog.at_level(logging.WARNING, logger="spec_controller.plugin"):
        building(plug, monkeypatch, "0.5.20", missing)
    assert plug.off_path.fast is None and plug.failures.places == set()       # a refusal, not a crash
    assert [r.getMessage() for r in caplog.records if "lacks ModelRunner.shared_read_done_event" in r.getMessage()]
    assert decode(plug.telemetry.stats_message())["off_reason"] == contract.OFF_REASONS[contract.REASON_MISSING_INTERNAL]


def test_capture_failure_leaves_steps_0_and_says_so(monkeypatch):
    plug = active(Plugin({}))
    building(plug, monkeypatch, "0.5.17", lambda: 1 / 0)
    assert plug.off_path.fast is None and "fast off capture" in plug.failures.places
    assert plug.off_path.reason == contract.REASON_CAPTURE_FAILED


def test_the_config_choice_and_an_inactive_plugin_are_reasons_too(monkeypatch):
    steps0 = active(Plugin({contract.ENV_FAST_OFF: "0"}))
    assert building(steps0, monkeypatch, "0.5.17", lambda: pytest.fail("must not capture")) == []
    assert decode(steps0.telemetry.stats_message())["off_reason"] == "off_path = steps0 in the config"
    inert = active(Plugin({}))
    inert.router.inert_reason = "speculative_adaptive is off"
    assert decode(inert.telemetry.stats_message())["off_reason"] == contract.OFF_REASONS[contract.REASON_INACTIVE]


def test_tp_ranks_use_the_fast_path_only_if_all_built_it():
    ranks = [True, False]                       # rank 1 failed to capture its graphs
    group_min = lambda v: min(1 if ok else 0 for ok in ranks)
    assert [fastoff.all_ranks_agree(ok, group_min) for ok in ranks] == [False, False]
    ranks = [True, True]
    assert [fastoff.all_ranks_agree(ok, group_min) for ok in ranks] == [True, True]


# --- run() on CPU: numpy arrays stand in for torch tensors ---------------------------------------
class Tensor(np.ndarray):
    device = "cpu"

    def to(self, *args, **kwargs):
        return self

    def clone(self):
        return self.copy()

    def view(self, *args, **kwargs):       # torch's view(shape) (numpy's view(dtype) otherwise)
        if args and all(isinstance(a, int) for a in args):
            return self.reshape(args)
        return super().view(*args, **kwargs)


def tensor(values) -> Tensor:
    return np.asarray(values).view(Tensor)


def engine(names: internals.FastOffInternals, publish: bool) -> tuple:
    """A worker whose target decode publishes a read-done event (a graph replay) or none (eager)."""
    runner = SimpleNamespace(req_to_token_pool=SimpleNamespace(req_to_token=tensor(np.arange(40).reshape(4, 10))),
                             attn_backend="verify backend", decode_cuda_graph_runner="verify graphs")
    setattr(runner, names.read_done_event, "stale verify event")      # left by the previous verify replay
    seen = {}

    def forward(batch, capture_hidden_mode):
        seen.update(mode=batch.forward_mode, seq_lens=list(batch.seq_lens), loc=list(batch.out_cache_loc),
                    spec_info=batch.spec_info, backend=runner.attn_backend, hidden=capture_hidden_mode)
        if publish:                  # an eager forward leaves the attribute as it found it
            setattr(runner, names.read_done_event, "decode event")
        return SimpleNamespace(next_token_ids=tensor([7, 8]), logits_output="logits", can_run_cuda_graph=publish)
    last = SimpleNamespace(**{names.read_done_event: None})
    w = SimpleNamespace(target_worker=SimpleNamespace(model_runner=runner, forward_batch_generation=forward),
                        _stub_skipped_draft_extend=lambda batch, result: seen.update(stubbed=True))
    setattr(w, names.last_reader, last)
    return w, runner, last, seen


@pytest.fixture
def fake_torch(monkeypatch):
    torch = SimpleNamespace(int32="int32", int64="int64", ones=lambda n, dtype, device: tensor(np.ones(n, int)),
                            arange=lambda n, dtype, device: tensor(np.arange(n, dtype=np.int32)))
    for key, value in dict(torch=torch, DECODE="DECODE", NO_HIDDEN="NULL", FULL_HIDDEN="FULL",
                           Result=lambda **kw: SimpleNamespace(**kw), DraftInput=lambda **kw: SimpleNamespace(**kw)).items():
        monkeypatch.setitem(fastoff._sg, key, value)


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
@pytest.mark.parametrize("publish", [True, False], ids=["graph", "eager"])
def test_run_hands_over_only_the_event_its_own_forward_published(fake_torch, names, publish):
    w, runner, last, seen = engine(names, publish)
    batch = decode_batch(2, seq_lens=tensor([3, 5]), seq_lens_cpu=None, seq_lens_sum=None,
                         req_pool_indices=tensor([1, 2]), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6])))
    fast = fastoff.FastOff("decode backend", "decode graphs", names=names)
    result = fastoff.run(w, fast, batch, on_publish=None)
    assert seen["mode"] == "DECODE" and seen["seq_lens"] == [4, 6] and seen["spec_info"] is None
    assert seen["loc"] == [13, 25] and seen["backend"] == "decode backend" and seen["stubbed"]
    assert getattr(last, names.read_done_event) == ("decode event" if publish else None)   # never the stale one
    assert getattr(runner, names.read_done_event) is None
    assert (runner.attn_backend, batch.seq_lens.tolist()) == ("verify backend", [3, 5])     # restored
    assert list(result.new_seq_lens) == [4, 6] and list(result.accept_lens) == [1, 1]


def test_run_writes_the_draft_kv_of_the_decoded_position_before_it_publishes(fake_torch, monkeypatch):
    # off path kv: the writer gets the target's hidden states, the NEW tokens, the decoded positions
    # (seq_lens, int64) and the slots the target wrote, inside the draft's TP context, before on_publish
    names, order = V17, []
    w, runner, last, seen = engine(names, True)
    forward = w.target_worker.forward_batch_generation

    def with_hidden(batch, capture_hidden_mode):
        out = forward(batch, capture_hidden_mode)
        return SimpleNamespace(**{**vars(out), "logits_output": SimpleNamespace(hidden_states="aux")})
    w.target_worker.forward_batch_generation = with_hidden

    class Context:
        def __enter__(self):
            order.append("enter")

        def __exit__(self, *exc):
            order.append("exit")
    w.draft_worker = SimpleNamespace(draft_tp_context=lambda group: Context(), draft_runner=SimpleNamespace(tp_group="g"))
    writer = SimpleNamespace(write=lambda hidden, tokens, positions, loc: order.append(
        ("write", hidden, list(tokens), list(positions), list(loc))))
    batch = decode_batch(2, seq_lens=tensor([3, 5]), seq_lens_cpu=None, seq_lens_sum=None,
                         req_pool_indices=tensor([1, 2]), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6])))
    fast = fastoff.FastOff("decode backend", "decode graphs", with_hidden=True, names=names)
    clock = iter([100, 600, 1000, 1300])                    # around the target's forward, around the writes
    monkeypatch.setattr(fastoff, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    fastoff.run(w, fast, batch, on_publish=lambda lens: order.append(("publish", list(lens))), kv_writer=writer)
    assert (fast.target_ns, fast.kv_ns) == (500, 300)       # status splits the off launch's CPU by them
    assert seen["hidden"] == "FULL"                         # the decode returned the hidden states
    assert order == ["enter", ("write", "aux", [7, 8], [3, 5], [13, 25]), "exit", ("publish", [4, 6])]
    assert seen["stubbed"]                                  # the draft's next proposal: SGLang's stub
    # a held prompt (promptkv): staged once the forward is queued, before this batch's own rows; its CPU is not
    # this batch's write's
    del order[:]
    batch = decode_batch(2, seq_lens=tensor([3, 5]), seq_lens_cpu=None, seq_lens_sum=None,
                         req_pool_indices=tensor([1, 2]), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6])))
    clock = iter([2000, 2500, 3000, 3100, 3250, 3400])    # forward; writes 3000-3400 with the staging 3100-3250 inside
    monkeypatch.setattr(fastoff, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    fastoff.run(w, fast, batch, on_publish=lambda lens: order.append(("publish", list(lens))), kv_writer=writer,
                before_write=lambda: order.append("staged"))
    assert order == ["enter", "staged", ("write", "aux", [7, 8], [3, 5], [13, 25]), "exit", ("publish", [4, 6])]
    assert (fast.target_ns, fast.kv_ns) == (1000, 300 + 250)


# --- the build-time check of the live engine, on fake SGLang modules ------------------------------
def fake_modules(table: internals.FastOffInternals, monkeypatch) -> dict[str, ModuleType]:
    """Modules holding exactly what `table` names (classes capitalised, functions with its parameters)."""
    modules: dict[str, ModuleType] = {}

    def module(name: str) -> ModuleType:
        if name not in modules:
            modules[name] = ModuleType(name)
            monkeypatch.setitem(sys.modules, name, modules[name])
        return modules[name]
    callables = {**table.callables, internals.HIDDEN_MODE: table.hidden_mode_params}
    for dotted, params in callables.items():
        parts = dotted.split(".")
        cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts) - 1)
        owner: object = module(".".join(parts[:cut]))
        for name in parts[cut:-1]:
            if not hasattr(owner, name):
                setattr(owner, name, type(name, (), {}))
            owner = getattr(owner, name)
        namespace: dict = {}
        exec(f"def fn({', '.join(params)}): pass", namespace)
        setattr(owner, parts[-1], namespace["fn"])
    for name, names in table.module_names.items():
        for attr in names:
            setattr(module(name), attr, object())
    batch_module, _, batch_cls = internals.SCHEDULE_BATCH.rpartition(".")
    setattr(module(batch_module), batch_cls, type(batch_cls, (), dict.fromkeys(table.attributes[internals.SCHEDULE_BATCH])))
    return modules


def live_worker(table: internals.FastOffInternals) -> SimpleNamespace:
    runner = SimpleNamespace(**dict.fromkeys(table.attributes[internals.RUNNER]))
    draft = SimpleNamespace(draft_runner=SimpleNamespace(tp_group="tp"), draft_tp_context=None,
                            draft_owns_attention=True, parallel_layout="layout")
    cls = type("Worker", (), {table.last_reader: property(lambda self: None)})
    w = cls()
    w.target_worker, w.draft_worker = SimpleNamespace(model_runner=runner), draft
    return w


@pytest.mark.parametrize("table", internals.TABLES, ids=lambda t: t.versions[0])
def test_the_live_check_passes_on_the_tables_names_and_fails_loudly_without_one(table, monkeypatch):
    modules = fake_modules(table, monkeypatch)
    internals.check_live(table, live_worker(table))
    broken = live_worker(table)
    delattr(broken.target_worker.model_runner, table.read_done_event)
    with pytest.raises(internals.MissingInternal, match=table.read_done_event):
        internals.check_live(table, broken)
    delattr(modules[internals.SCHEDULE_BATCH.rpartition(".")[0]].ScheduleBatch, "return_logprob")
    with pytest.raises(internals.MissingInternal, match="ScheduleBatch.return_logprob"):
        internals.check_live(table, live_worker(table))
    fake_modules(table, monkeypatch)
    worker_module = sys.modules[internals.EAGLE_V2]
    delattr(worker_module, "EagleDraftInput")
    with pytest.raises(internals.MissingInternal, match="EagleDraftInput"):
        internals.check_live(table, live_worker(table))


def test_the_live_check_refuses_changed_parameters(monkeypatch):
    modules = fake_modules(V23, monkeypatch)
    runner_cls = modules["sglang.srt.model_executor.runner.decode_cuda_graph_runner"].DecodeCudaGraphRunner
    runner_cls.__init__ = lambda self, model_runner, attn_backend: None          # lost the spec parameters
    with pytest.raises(internals.MissingInternal, match="speculative_num_steps"):
        internals.check_live(V23, live_worker(V23))
    fake_modules(V23, monkeypatch)
    with pytest.raises(internals.MissingInternal, match="compute_spec_v2_logprobs"):
        internals.check_live(V17, live_worker(V17))          # 0.5.17's table on a 0.5.23 engine
    with pytest.raises(internals.MissingInternal, match="get_server_return_hidden_states_mode"):
        internals.check_live(dataclasses.replace(V17, callables=V23.callables), live_worker(V17))


def test_each_release_enters_the_drafts_tp_context_as_sglang_does(monkeypatch):
    calls = []
    draft = SimpleNamespace(draft_runner=SimpleNamespace(tp_group="tp"), draft_owns_attention=True,
                            parallel_layout="layout",
                            draft_tp_context=lambda *a, **k: calls.append(("method", a, k)))
    module = ModuleType(internals.EAGLE_V2)
    module.draft_tp_context = lambda *a, **k: calls.append(("function", a, k))
    monkeypatch.setitem(sys.modules, internals.EAGLE_V2, module)
    for table in internals.TABLES:
        table.draft_context.enter(draft)
    assert calls == [("method", ("tp",), {})] * 2 + [("method", ("tp",), {"owns_attention": True}),
                                                     ("function", (True,), {}), ("function", ("layout",), {})]


def test_the_hidden_state_mode_stand_in_has_the_releases_signature():
    assert internals.hidden_mode_full(V17, "FULL")("server args") == "FULL"
    assert internals.hidden_mode_full(V23, "FULL")() == "FULL"


# --- logprobs (offlogprob.py): steps-0's values and layout ----------------------------------------
LOGITS = np.array([[2.0, 0.5, -1.0, 1.0, 0.0], [-0.5, 1.5, 0.25, 3.0, -2.0], [0.0, 0.1, 0.2, 0.3, 0.4]])
BIAS = np.array([0.0, 0.0, 0.75, 0.0, -0.25])       # penalties / logit bias, applied before the sampler
TEMPERATURES = np.array([[0.5], [2.0], [0.8]])     # SGLang's (bs, 1)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def steps0_logprobs(batch, logits_output, predict, accept_index) -> None:
    """numpy port of SGLang's compute_spec_logprobs (0.5.18+; compute_spec_v2_logprobs of 0.5.17 computes
    the same): what the steps-0 verify writes to its logits output."""
    bs, max_accept = len(batch.seq_lens), accept_index.shape[1]
    flat = np.asarray(accept_index).astype(int).reshape(-1)
    gathered = np.asarray(logits_output.next_token_logits)[flat]
    info = batch.sampling_info
    x = gathered if info.is_all_greedy else gathered / np.repeat(info.temperatures, max_accept, axis=0)
    lp = np.maximum(log_softmax(x), np.finfo(np.float64).min)
    logits_output.next_token_logprobs = lp[np.arange(bs * max_accept), np.asarray(predict)[flat]].reshape(bs, max_accept)
    nums = [n for n in batch.top_logprobs_nums for _ in range(max_accept)]
    if any(n > 0 for n in nums):
        order = np.argsort(-lp, axis=1, kind="stable")
        logits_output.next_token_top_logprobs_val = [lp[r, order[r, :n]] for r, n in enumerate(nums)]
        logits_output.next_token_top_logprobs_idx = [order[r, :n].tolist() for r, n in enumerate(nums)]
    ids = [i for i in batch.token_ids_logprobs for _ in range(max_accept)]
    if any(i is not None for i in ids):
        logits_output.next_token_token_ids_logprobs_val = [None if i is None else lp[r, i] for r, i in enumerate(ids)]
        logits_output.next_token_token_ids_logprobs_idx = ids


def compute_spec_v2_logprobs(batch, logits_output, predict, accept_index, speculative_num_steps):   # 0.5.17
    assert speculative_num_steps == 0, "steps-0 passes num_steps = 0"
    steps0_logprobs(batch, logits_output, predict, accept_index)


def compute_spec_logprobs(batch, logits_output, predict, *, accept_index=None, chain_stride=None):   # 0.5.18+
    assert chain_stride is None and accept_index is not None, "steps-0 passes accept_index="
    steps0_logprobs(batch, logits_output, predict, accept_index)


class Sampler:
    """SGLang's Sampler.forward as far as logits go: greedy takes the argmax and leaves them; sampled
    divides by the temperatures and overwrites them with probabilities, in place. With return_logprob
    it writes the layout of an engine without speculation (flat, log of the probabilities)."""
    def __init__(self):
        self.calls = []

    def __call__(self, logits_output, sampling_info, return_logprob, top_logprobs_nums, token_ids_logprobs, positions):
        self.calls.append(return_logprob)
        logits = logits_output.next_token_logits
        if not sampling_info.is_all_greedy:
            logits /= sampling_info.temperatures
            logits[:] = np.exp(log_softmax(logits))
        ids = tensor(np.asarray(logits).argmax(axis=1))
        if return_logprob:
            logits_output.next_token_logprobs = np.log(logits)[np.arange(len(ids)), ids]
        return ids


def logprob_engine(names: internals.FastOffInternals):
    """A worker whose decode runs as tp_worker + ModelRunner.sample do: logits, biased in place, then
    runner.sampler called positionally."""
    w, runner, _, seen = engine(names, publish=True)
    runner.sampler = sampler = Sampler()

    def forward(batch, capture_hidden_mode):
        seen.update(sampler=runner.sampler, return_logprob=batch.return_logprob)
        out = SimpleNamespace(next_token_logits=tensor(LOGITS.copy()), hidden_states=None, next_token_logprobs=None,
                              next_token_top_logprobs_val=None, next_token_token_ids_logprobs_val=None)
        out.next_token_logits += BIAS                        # _preprocess_logits
        seen["logits"] = out.next_token_logits
        ids = runner.sampler(out, batch.sampling_info, batch.return_logprob, batch.top_logprobs_nums,
                             batch.token_ids_logprobs, batch.seq_lens)
        return SimpleNamespace(next_token_ids=ids, logits_output=out, can_run_cuda_graph=True)
    w.target_worker.forward_batch_generation = forward
    return w, runner, sampler, seen


def logprob_batch(greedy: bool, top=(0, 2, 3), token_ids=(None, [1, 4], None), **extra):
    fields = dict(seq_lens=tensor([3, 5, 2]), seq_lens_cpu=None, seq_lens_sum=None, req_pool_indices=tensor([1, 2, 3]),
                  spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6, 1])), return_logprob=True,
                  top_logprobs_nums=list(top), token_ids_logprobs=list(token_ids),
                  sampling_info=SimpleNamespace(is_all_greedy=greedy, temperatures=TEMPERATURES))
    return decode_batch(3, **{**fields, **extra})


def scheduler_reads(batch, result) -> list[dict]:
    """What SGLang's spec-v2 decode result processing takes per request (0.5.17's
    _normalize_decode_outputs and the spec branch of _apply_decode_logprobs, after copy_to_cpu)."""
    out, stride = result.logits_output, result.speculative_num_draft_tokens
    tokens, accept = np.asarray(result.next_token_ids).tolist(), np.asarray(result.accept_lens).tolist()
    logprobs = np.asarray(out.next_token_logprobs).tolist()
    reqs = []
    for i in range(len(batch.seq_lens)):
        accepted_logprobs, ids = logprobs[i], tokens[i * stride:i * stride + accept[i]]
        max_accept, req = len(accepted_logprobs), {"val": [], "idx": [], "top_val": [], "top_idx": [], "ids_val": []}
        for j, tok in enumerate(ids):
            req["val"].append(accepted_logprobs[j])
            req["idx"].append(tok)
            if batch.top_logprobs_nums[i] > 0:
                req["top_val"].append(np.asarray(out.next_token_top_logprobs_val[i * max_accept + j]).tolist())
                req["top_idx"].append(out.next_token_top_logprobs_idx[i * max_accept + j])
            if batch.token_ids_logprobs[i] is not None:
                req["ids_val"].append(np.asarray(out.next_token_token_ids_logprobs_val[i * max_accept + j]).tolist())
        reqs.append(req)
    return reqs


@pytest.fixture
def sglang_logprob_functions(monkeypatch):
    monkeypatch.setattr(offlogprob, "_fns", {internals.SPEC_V2_LOGPROBS: compute_spec_v2_logprobs,
                                             internals.SPEC_LOGPROBS: compute_spec_logprobs})


@pytest.mark.parametrize("names", internals.TABLES, ids=lambda t: t.versions[0])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_a_logprob_batch_gets_steps_0s_logprobs_in_steps_0s_layout(fake_torch, sglang_logprob_functions, names, greedy):
    w, runner, sampler, seen = logprob_engine(names)
    batch = logprob_batch(greedy)
    result = fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=names), batch, on_publish=None)
    # the sampler chose from the biased logits, without temperature for greedy, with it when sampled
    chosen = LOGITS + BIAS if greedy else (LOGITS + BIAS) / TEMPERATURES
    expected = log_softmax(chosen)
    tokens = chosen.argmax(axis=1)
    assert sampler.calls == [False] and seen["return_logprob"] is True   # no logprobs of its own; batch untouched
    assert runner.sampler is sampler                                     # restored
    assert np.asarray(result.logits_output.next_token_logprobs).shape == (3, 1)    # spec-v2: (bs, accept)
    assert (result.logits_output.next_token_logits is seen["logits"]) == greedy    # a copy only when sampled
    assert np.allclose(result.logits_output.next_token_logits, LOGITS + BIAS)     # the logits, never probabilities
    reqs = scheduler_reads(batch, result)
    assert [r["idx"] for r in reqs] == [[t] for t in tokens]
    assert np.allclose([r["val"] for r in reqs], expected[np.arange(3), tokens].reshape(3, 1))
    assert [r["top_idx"] for r in reqs] == [[], [np.argsort(-expected[1])[:2].tolist()],
                                            [np.argsort(-expected[2])[:3].tolist()]]
    assert np.allclose(reqs[2]["top_val"][0], np.sort(expected[2])[::-1][:3])
    assert reqs[0]["ids_val"] == reqs[2]["ids_val"] == [] and np.allclose(reqs[1]["ids_val"], [expected[1, [1, 4]]])


def test_a_batch_without_logprobs_keeps_the_sampler_and_computes_none(fake_torch, sglang_logprob_functions):
    w, runner, sampler, seen = logprob_engine(V23)
    batch = logprob_batch(False, return_logprob=False)
    result = fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=V23), batch, on_publish=None)
    assert seen["sampler"] is sampler and sampler.calls == [False]
    assert result.logits_output.next_token_logprobs is None


def test_the_sampler_is_restored_when_the_decode_fails(fake_torch, sglang_logprob_functions):
    w, runner, sampler, _ = logprob_engine(V17)
    w.target_worker.forward_batch_generation = lambda batch, capture_hidden_mode: 1 / 0
    with pytest.raises(ZeroDivisionError):
        fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=V17), logprob_batch(True), None)
    assert runner.sampler is sampler


def test_logprob_batches_take_the_fast_path_unless_watermarked():
    assert fastoff.batch_unsupported_reason(logprob_batch(True)) is None
    assert fastoff.batch_unsupported_reason(logprob_batch(False, top=(5, 5, 5))) is None
    marked = logprob_batch(False)
    marked.sampling_info.has_watermark_candidates = True                 # 0.5.22+
    assert fastoff.batch_unsupported_reason(marked) == fastoff.LOGPROB == offlogprob.WATERMARK
    marked.return_logprob = False                                        # a watermark alone: its token is the decode's
    assert fastoff.batch_unsupported_reason(marked) is None
    assert fastoff.batch_unsupported_reason(logprob_batch(True, has_grammar=True)) == fastoff.GRAMMAR


def test_each_table_names_its_releases_steps_0_logprob_function():
    assert V17.spec_logprobs == internals.SPEC_V2_LOGPROBS
    assert all(t.spec_logprobs == internals.SPEC_LOGPROBS for t in internals.TABLES[1:])
    assert all(t.spec_logprobs in t.callables for t in internals.TABLES)


class RecordingBatch(SimpleNamespace):
    """A batch that lists every field anyone sets on it."""
    def __setattr__(self, name, value):
        self.__dict__.setdefault("_set", set()).add(name)
        super().__setattr__(name, value)


@pytest.mark.parametrize("lean", [False, True])
def test_the_fast_step_sets_no_batch_field_but_the_ones_the_light_isolation_puts_back(fake_torch, monkeypatch, lean):
    """offresolve's light forward isolation puts back fastoff.FAST_FIELDS only: run() may set nothing else."""
    from controller.plugin import offstubs
    w, runner, last, seen = engine(V17, True)
    batch = decode_batch(2, seq_lens=tensor([3, 5]), seq_lens_cpu=tensor([3, 5]), seq_lens_sum=8,
                         req_pool_indices=tensor([1, 2]), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6])))
    batch = RecordingBatch(**vars(batch))
    batch.__dict__["_set"] = set()
    if lean:
        monkeypatch.setattr(offstubs, "applies", lambda *a: True)
        w.draft_worker = "draft worker"
        monkeypatch.setattr(fastoff, "_stubs", lambda draft, fast: SimpleNamespace(fields=lambda bs, device: ("ones", {})))
    fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=V17), batch,
                on_publish=(lambda lens: None) if lean else None, lean=lean)
    assert batch._set and batch._set <= set(fastoff.FAST_FIELDS), batch._set - set(fastoff.FAST_FIELDS)
