"""The fast off path's version handling on CPU: which release gets which table (or which reason),
the build-time check of the live engine against its table (fake SGLang modules), the hand-over of
the scheduler's read-done event with each release's names (run() with numpy stand-ins for torch),
and the draft's TP context of each release."""
import logging
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from controller import contract
from controller.contract import decode
from controller.plugin import fastoff, internals
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
    def to(self, *args, **kwargs):
        return self


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
    torch = SimpleNamespace(int32="int32", int64="int64", ones=lambda n, dtype, device: tensor(np.ones(n, int)))
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
    with pytest.raises(internals.MissingInternal, match="get_server_return_hidden_states_mode"):
        internals.check_live(V17, live_worker(V17))          # 0.5.17's table on a 0.5.23 engine


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
