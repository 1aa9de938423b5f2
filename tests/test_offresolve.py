"""offresolve: the future map gathers only the bonus tokens of a batch the fast off path takes, SGLang's whole gather
otherwise, and SGLang's gather after all where such a batch ends up on SGLang's own path. No torch: the buffers are
lists indexed by a list of rows, the stream a recorder (a fake torch module for the record_stream SGLang does too)."""
import dataclasses
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from controller import contract
from controller.plugin import fastoff, offresolve
from tests.test_plugin_cpu import Lens, Mode, decode_batch, fast, plug, routed_worker  # noqa: F401 (fixtures)


class Rows(list):
    """indices: .shape and the rows, recording the stream it was kept alive for."""
    def __init__(self, rows):
        super().__init__(rows)
        self.shape, self.streams, self.device = (len(rows),), [], SimpleNamespace(type="cuda")

    def record_stream(self, stream):
        self.streams.append(stream)


class Buffer(list):
    def __getitem__(self, rows):
        return [list.__getitem__(self, r) for r in rows] if isinstance(rows, list) else list.__getitem__(self, rows)


class BareFutureMap:
    """A future map without the optional fields (a release or configuration that lacks them)."""
    device, spec_algo = "cuda:0", SimpleNamespace(is_ngram=lambda: False)

    def __init__(self):
        self.output_tokens_buf = Buffer([100 + i for i in range(256)])
        self.calls, self.passed = [], []


class FutureMap(BareFutureMap):
    need_topk, dsa_topk_indices_buf, draft_probs_buf = True, None, None


def sglangs_gather(future_map, batch, *args, **kwargs):
    """SGLang's _resolve_spec_extras, as far as these tests read it (the arguments it was handed recorded)."""
    future_map.calls.append(batch)
    future_map.passed.append((args, kwargs))
    draft = getattr(batch, "spec_info", None)
    if hasattr(draft, "future_indices"):
        draft.topk_p, draft.bonus_tokens = "gathered", future_map.output_tokens_buf[list(draft.future_indices)]


@pytest.fixture
def fake_torch(monkeypatch):
    torch = ModuleType("torch")
    torch.get_device_module = lambda device: SimpleNamespace(current_stream=lambda: f"forward stream of {device}")
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(fastoff._sg, "torch", torch)            # as the fast path's build binds it
    monkeypatch.setattr(offresolve, "sys", SimpleNamespace(modules={**sys.modules, __name__: sys.modules[__name__]}))


def batch_of(rows, **draft):
    return SimpleNamespace(spec_info=SimpleNamespace(future_indices=Rows(rows), topk_p="stale", bonus_tokens=None,
                                                     dsa_topk_indices="stale", **draft))


_DEBUG_ASSERT = False      # what FutureMap's module (this one, for the stand-in) says of SGLang's debug asserts


def test_a_taken_batch_gets_its_bonus_tokens_alone_and_sglangs_gather_if_sglang_takes_it_after_all(fake_torch):
    fm, lean = FutureMap(), offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    batch = batch_of([3, 5])
    assert lean.around(sglangs_gather, fm, batch) is None
    assert batch.spec_info.bonus_tokens == [103, 105] and batch.spec_info.topk_p == "stale" and fm.calls == []
    assert batch.spec_info.dsa_topk_indices is None and batch.spec_info.future_indices.streams == ["forward stream of cuda:0"]
    assert (lean.batches, lean.restored) == (1, 0)
    lean.restore(batch_of([3, 5]))                 # another batch's draft input: nothing of ours to redo
    assert fm.calls == [] and lean.restored == 0
    lean.around(sglangs_gather, fm, batch)
    lean.restore(SimpleNamespace())                # a batch without a draft input: nothing of ours either
    assert fm.calls == [] and lean.restored == 0 and lean.batches == 2
    lean.around(sglangs_gather, fm, batch)
    lean.restore(batch)                            # SGLang's path takes it after all: its gather first
    assert fm.calls == [batch] and batch.spec_info.topk_p == "gathered" and lean.restored == 1
    lean.restore(batch)                            # once
    assert fm.calls == [batch]
    lean.around(sglangs_gather, fm, batch)         # every skip and every restore counted
    lean.restore(batch)
    assert fm.calls == [batch, batch] and (lean.batches, lean.restored) == (4, 2)


def test_indices_on_the_cpu_are_gathered_without_a_stream_record(fake_torch):
    """As SGLang's own gather (0.5.22+): record_stream is for device tensors, torch rejects it on a CPU tensor."""
    fm, lean = FutureMap(), offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    batch = batch_of([7])
    batch.spec_info.future_indices.device = SimpleNamespace(type="cpu")
    batch.spec_info.future_indices.record_stream = lambda stream: pytest.fail("record_stream on a CPU tensor")
    assert lean.around(sglangs_gather, fm, batch) is None
    assert batch.spec_info.bonus_tokens == [107] and fm.calls == [] and lean.batches == 1


@pytest.mark.parametrize("why", ["switched off", "not switched on", "not taken", "no topk", "no topk field",
                                 "dsa indices", "draft probs", "verified ids", "n-gram", "debug asserts",
                                 "no debug flag", "dsa relayed", "empty batch", "no draft input", "no future indices"])
def test_sglangs_whole_gather_wherever_the_off_path_may_need_more_than_the_bonus_tokens(fake_torch, monkeypatch, why):
    def takes(batch):
        return why != "not taken"
    lean = (offresolve.LeanResolve(takes) if why == "not switched on"       # (the default: off)
            else offresolve.LeanResolve(takes=takes, enabled=why != "switched off"))
    if why == "no debug flag":       # a future map whose module does not say whether it asserts: as if it did
        module = ModuleType("overlap_utils_without_the_flag")
        monkeypatch.setitem(offresolve.sys.modules, module.__name__, module)
        fm = type("FutureMap", (FutureMap,), {"__module__": module.__name__})()
    else:
        fm = BareFutureMap() if why == "no topk field" else FutureMap()
    batch = batch_of([] if why == "empty batch" else [2],
                     future_dsa_topk_indices_available=why == "dsa relayed")
    if why == "no draft input":
        del batch.spec_info
    elif why == "no future indices":
        del batch.spec_info.future_indices
    if why != "no topk field":
        fm.need_topk = why != "no topk"
    fm.dsa_topk_indices_buf = "buffer" if why == "dsa indices" else None
    fm.draft_probs_buf = "buffer" if why == "draft probs" else None
    fm.need_verified_id = why == "verified ids"
    fm.spec_algo = SimpleNamespace(is_ngram=lambda: why == "n-gram")
    monkeypatch.setitem(globals(), "_DEBUG_ASSERT", why == "debug asserts")
    lean.around(sglangs_gather, fm, batch, "an argument", key="a keyword")
    assert fm.calls == [batch] and lean.batches == 0
    assert fm.passed == [(("an argument",), {"key": "a keyword"})]      # SGLang's call, as it was made


def test_the_map_is_read_again_until_sglangs_first_stash_has_set_its_buffers(fake_torch):
    """SGLang sets need_topk (and the draft-probs buffer) at the map's first stash, after the first prefill's resolve:
    a map read once before that would never skip (12-04f's first GPU call: 0 of 12,036 off batches skipped)."""
    fm = BareFutureMap()                      # as __init__ leaves it: no need_topk yet
    fm.dsa_topk_indices_buf, fm._forward_buf_initialized = None, False
    lean = offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    prefill = SimpleNamespace(spec_info=None)
    lean.around(sglangs_gather, fm, prefill)
    early = batch_of([1])                     # (a decode before any stash: none in SGLang, but whole gather if so)
    lean.around(sglangs_gather, fm, early)
    assert fm.calls == [prefill, early] and lean.batches == 0
    fm.need_topk, fm.draft_probs_buf, fm._forward_buf_initialized = True, None, True     # the first stash
    batch = batch_of([4])
    assert lean.around(sglangs_gather, fm, batch) is None
    assert batch.spec_info.bonus_tokens == [104] and fm.calls == [prefill, early] and lean.batches == 1


def test_what_was_read_of_one_map_is_not_taken_for_another(fake_torch):
    """The settings are read per map: a map that holds does not vouch for the next one (one per engine in SGLang,
    but a cache keyed on nothing would skip a gather that map needs)."""
    lean = offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    plain, with_probs = FutureMap(), FutureMap()
    with_probs.draft_probs_buf = "buffer"
    assert lean.around(sglangs_gather, plain, batch_of([1])) is None and lean.batches == 1
    batch = batch_of([2])
    lean.around(sglangs_gather, with_probs, batch)
    assert with_probs.calls == [batch] and lean.batches == 1


def test_a_future_map_without_the_optional_buffers_has_nothing_more_to_gather(fake_torch):
    """No DSA indices, draft probs or verified-id relay buffers at all (a release without them): the bonus tokens
    are all an off batch needs."""
    fm = type("OlderFutureMap", (BareFutureMap,), {"need_topk": True})()
    lean = offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    batch = batch_of([4, 1])
    assert lean.around(sglangs_gather, fm, batch) is None
    assert batch.spec_info.bonus_tokens == [104, 101] and fm.calls == [] and lean.batches == 1


def engine(plug, threshold):
    """The plugin's off path with a fast path built and the router decided (the first decode batch checked)."""
    off = plug.off_path
    off.resolve.enabled, plug.router.threshold = True, threshold
    plug.router.check(routed_worker(plug))
    return off


@pytest.mark.parametrize("threshold, size, extra, grammar_served", [  # (a copy per case: extra is popped)
    (0, 30, {}, False),                                 # off: the fast path takes it
    (64, 30, {}, False),                                # speculating: SGLang's verify
    (16, 16, {}, False),                                # at the threshold it speculates
    (16, 17, {}, False),
    (0, 30, {"is_extend_in_batch": True}, False),       # a prefill inside the batch
    (0, 30, {"forward_mode": Mode("idle")}, False),
    (0, 30, {"return_hidden_states": True}, False),     # steps-0's (fastoff.batch_unsupported_reason)
    (0, 30, {"has_grammar": True}, True),               # grammar: served where SGLang's delayed sample was found
    (0, 30, {"has_grammar": True}, False),
    (0, 30, {"inert": "not this plugin's engine"}, False),   # the router found the engine is not ours
])
def test_the_resolve_skips_the_gather_exactly_for_the_batches_the_forward_gives_the_fast_path(
        fast, fake_torch, threshold, size, extra, grammar_served):
    """Resolve, then SGLang's run_batch's forward: a skipped gather goes with the fast path taking the batch, a
    batch SGLang takes had its whole gather (before its path ran)."""
    plug, ran = fast
    off, log, fm = engine(plug, threshold), [], FutureMap()
    off.fast.grammar = grammar_served
    plug.router.inert_reason = extra.pop("inert", None)
    batch = decode_batch(size, **extra)
    batch.spec_info.future_indices = Rows(list(range(size)))
    off.resolve.around(lambda m, b: log.append("gather"), fm, batch)
    skipped = log == []
    w = routed_worker(plug)
    w.target_worker = SimpleNamespace(enable_overlap=True)     # the overlap scheduler: it hands over its barrier
    off.forward_batch_generation(lambda worker, b, *a, **k: log.append("sglang"), w, batch, "publish", lambda: None)
    assert skipped is bool(ran)                      # skipped <=> the fast path ran it
    assert log == ([] if ran else ["gather", "sglang"])
    assert off.resolve.restored == 0                 # never a skip that SGLang's path had to undo


def test_an_engine_the_router_has_not_decided_gathers_as_sglang(fast):
    plug, _ = fast
    plug.router.checked = False
    plug.off_path.resolve.enabled = True
    assert not plug.off_path.takes_resolved(decode_batch(30))


@pytest.mark.parametrize("failure", ["speculates after all", "unsupported", "fast step raised"])
def test_a_skipped_batch_that_sglang_takes_after_all_is_gathered_before_sglangs_path(fast, fake_torch, monkeypatch,
                                                                                    failure):
    plug, _ = fast
    off, log, fm = engine(plug, 0), [], FutureMap()
    batch = decode_batch(2)
    batch.spec_info.future_indices = Rows([1, 2])
    off.resolve.around(lambda m, b: log.append("gather"), fm, batch)
    assert log == [] and off.resolve.batches == 1
    if failure == "speculates after all":          # (no set_internal_state runs inside run_batch: belt and braces)
        plug.router.threshold = 64
    elif failure == "unsupported":
        monkeypatch.setattr(fastoff, "batch_unsupported_reason", lambda batch, grammar=False: "hidden states requested")
    else:
        monkeypatch.setattr(fastoff, "run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    off.forward_batch_generation(lambda worker, b, *a, **k: log.append("sglang's path"), routed_worker(plug), batch)
    assert log == ["gather", "sglang's path"] and off.resolve.restored == 1


def test_after_a_failed_fast_step_the_next_batches_gather_as_sglang(fast, fake_torch, monkeypatch):
    """The fast path gone (fast is None) on an engine serving grammar batches on it: every later batch is SGLang's,
    its whole gather included."""
    plug, _ = fast
    off, log, fm = engine(plug, 0), [], FutureMap()
    off.fast_grammar = off.fast.grammar = True
    monkeypatch.setattr(fastoff, "run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    batch = decode_batch(2)
    batch.spec_info.future_indices = Rows([1, 2])
    off.resolve.around(lambda m, b: log.append("gather"), fm, batch)
    off.forward_batch_generation(lambda worker, b, *a, **k: log.append("sglang's path"), routed_worker(plug), batch)
    assert off.fast is None and log == ["gather", "sglang's path"]
    log.clear()
    later = decode_batch(2, has_grammar=True)
    later.spec_info.future_indices = Rows([3, 4])
    assert not off.takes_resolved(later)
    off.resolve.around(lambda m, b: log.append("gather"), fm, later)
    assert log == ["gather"] and off.resolve.batches == 1


def test_the_switch_is_a_plugin_key_of_engines_started_with_it(fast):
    from controller.plugin.instance import Plugin
    from controller.plugin.support import FUTURE_MAP
    plug, _ = fast
    assert contract.LEAN_RESOLVE_KEY in contract.BOOL_KEYS
    target = f"{FUTURE_MAP}._resolve_spec_extras"
    assert target not in plug.hooks() and not plug.off_path.resolve.enabled      # the default: not even hooked
    assert "start it with SPEC_CONTROLLER_LEAN_RESOLVE=1" in plug.validate_own_keys({contract.LEAN_RESOLVE_KEY: True})
    started = Plugin({contract.ENV_LEAN_RESOLVE: "1"})
    assert started.off_path.resolve.enabled and started.hooks()[target] == (started.off_path.resolve.around, "AROUND")
    assert started.validate_own_keys({contract.LEAN_RESOLVE_KEY: 1.5})
    started.router.checked = False                 # (before the first decode batch: keys are accepted)
    assert started.validate_own_keys({contract.LEAN_RESOLVE_KEY: False}) is None
    started.apply_own_keys({contract.LEAN_RESOLVE_KEY: False})
    assert not started.off_path.resolve.enabled and started.off_path.resolve.registered
    started.apply_own_keys({contract.LEAN_RESOLVE_KEY: True})
    assert started.off_path.resolve.enabled


# --- the light forward isolation -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Batch:
    """A ScheduleBatch's shape for the isolation: its fields, a sampling info and a speculative algorithm."""
    spec_algorithm: Any
    spec_info: Any = None
    sampling_info: Any = None
    input_ids: Any = "input ids"
    out_cache_loc: Any = "slots"
    seq_lens: Any = "lens"
    seq_lens_cpu: Any = "cpu lens"
    seq_lens_sum: Any = 7
    forward_mode: Any = "target verify"
    reqs: Any = "requests"
    return_logprob: bool = False


class Info:
    def copy_for_forward(self):
        return ("forward copy of", self)


class Scheduler:
    def __init__(self):
        self.pinned = []

    def record_batch_in_overlap(self, batch):
        self.pinned.append((batch, batch.sampling_info))


SPEC, PLAIN = SimpleNamespace(is_none=lambda: False), SimpleNamespace(is_none=lambda: True)


def _fast_versions():
    from controller.contract import parse_version
    from controller.plugin import internals
    from tests.sglang_wheels import VERSIONS
    return [v for v in VERSIONS if internals.for_version(parse_version(v))]


def sglangs_isolation(version):
    """Scheduler._forward_isolation as the wheel writes it, compiled (its module's names: contextmanager, dataclasses)."""
    from contextlib import contextmanager
    from tests.sglang_wheels import source
    import ast
    fn = source(version).function("sglang.srt.managers.scheduler.Scheduler._forward_isolation")
    module = ast.Module(body=[fn], type_ignores=[])
    scope = {"contextmanager": contextmanager, "dataclasses": dataclasses, "ScheduleBatch": Batch}
    exec(compile(ast.fix_missing_locations(module), f"<sglang {version}>", "exec"), scope)
    return scope["_forward_isolation"]


def shallow(batch):
    return tuple(getattr(batch, f.name) for f in dataclasses.fields(batch))     # (astuple deep-copies)


def rebind(batch, fields):
    for name in fields:
        setattr(batch, name, f"rebound {name}")


@pytest.mark.parametrize("version", _fast_versions())
@pytest.mark.parametrize("overlap", [True, False])
def test_the_light_isolation_is_sglangs_plain_branch_and_puts_back_what_the_fast_path_rebinds(version, overlap):
    """Against the wheel's own function: for what the fast path touches, the light isolation ends as SGLang's full
    one (every FAST_FIELDS value put back); before and around the forward it does what SGLang's non-speculative
    branch does (the sampling info's forward-only copy, the pin)."""
    isolation = sglangs_isolation(version)
    runs = {}
    for kind in ("sglang plain", "sglang full", "light"):
        info, scheduler = Info(), Scheduler()
        batch = Batch(SPEC if kind == "sglang full" else PLAIN, spec_info="draft input", sampling_info=info)
        lean = offresolve.LeanResolve(takes=lambda b: True, enabled=True)
        lean._pending = (batch.spec_info, None, None)
        manager = (lean.isolation(pytest.fail, scheduler, batch, overlap=overlap) if kind == "light"
                   else isolation(scheduler, batch, overlap=overlap))
        with manager:
            copied = batch.sampling_info == ("forward copy of", info)
            pinned = scheduler.pinned == ([(batch, ("forward copy of", info))] if overlap else [])
            rebind(batch, offresolve.FAST_FIELDS)
        fields = dataclasses.astuple(dataclasses.replace(batch, spec_algorithm=None, sampling_info=None))
        runs[kind] = (copied, pinned, batch.sampling_info is info, fields)
    plain, full, light = runs["sglang plain"], runs["sglang full"], runs["light"]
    assert light[:3] == plain[:3] == (True, True, True)    # the forward-only copy inside, the pin, put back after
    assert light[3] == full[3]                               # every field as SGLang's full snapshot leaves it
    assert plain[3] != full[3]                               # (SGLang's plain branch alone would not)


def test_the_light_isolation_is_only_for_the_batch_whose_gather_was_skipped():
    lean, scheduler = offresolve.LeanResolve(takes=lambda b: True, enabled=True), Scheduler()
    batch = Batch(SPEC, spec_info="draft input", sampling_info=Info())
    sglangs = lambda sched, b, *a, **k: ("sglang's isolation", b, k)
    assert lean.isolation(sglangs, scheduler, batch, overlap=True) == ("sglang's isolation", batch, {"overlap": True})
    lean._pending = ("another batch's draft input", None, None)
    assert lean.isolation(sglangs, scheduler, batch, overlap=True)[0] == "sglang's isolation"
    lean._pending, lean.enabled = (batch.spec_info, None, None), False
    assert lean.isolation(sglangs, scheduler, batch, overlap=True)[0] == "sglang's isolation"


def test_a_failing_forward_inside_the_light_isolation_leaves_the_batch_as_it_found_it():
    lean, info = offresolve.LeanResolve(takes=lambda b: True, enabled=True), Info()
    batch = Batch(SPEC, spec_info="draft input", sampling_info=info)
    before = shallow(batch)
    lean._pending = (batch.spec_info, None, None)
    with pytest.raises(RuntimeError):
        with lean.isolation(None, Scheduler(), batch, overlap=True):
            rebind(batch, offresolve.FAST_FIELDS)
            raise RuntimeError("boom")
    assert shallow(batch) == before and lean.light is None


def test_sglangs_path_inside_a_light_isolation_gets_the_full_snapshot_and_the_gather(fake_torch):
    """A batch the resolve took for the fast path's that SGLang's worker takes after all (a failed fast step): its
    worker's mid-forward rebinding of any field is undone as SGLang's own isolation would, its extras gathered."""
    lean, log = offresolve.LeanResolve(takes=lambda b: True, enabled=True), []
    batch = Batch(SPEC, spec_info=SimpleNamespace(future_indices=Rows([1]), bonus_tokens=None), sampling_info=Info())
    lean.around(lambda fm, b: log.append("gather"), FutureMap(), batch)
    with lean.isolation(None, Scheduler(), batch, overlap=True):
        before = shallow(batch)
        assert lean.guard(batch, lambda: rebind(batch, ["reqs", "return_logprob", "seq_lens"]) or "sglang") == "sglang"
        assert shallow(batch) == before and log == ["gather"]
    outside = Batch(SPEC, sampling_info=Info())
    assert lean.guard(outside, lambda: rebind(outside, ["reqs"]) or "sglang") == "sglang"
    assert outside.reqs == "rebound reqs"          # outside a light isolation SGLang's own isolation does that


def test_not_with_the_draft_synced_whose_extend_rebinds_more_than_the_fast_paths_fields(fast):
    plug, _ = fast
    off = engine(plug, 0)
    assert off.takes_resolved(decode_batch(30))
    off.sync_draft = True
    assert not off.takes_resolved(decode_batch(30))


def test_the_isolation_hook_hands_sglang_its_arguments_and_reads_overlap_as_sglang_passes_it():
    lean, scheduler, calls = offresolve.LeanResolve(takes=lambda b: True, enabled=True), Scheduler(), []
    batch = Batch(SPEC, spec_info="draft input", sampling_info=Info())
    sglangs = lambda *a, **k: calls.append((a, k)) or "sglang's isolation"
    assert lean.isolation(sglangs, scheduler, batch, True, extra=1) == "sglang's isolation"
    assert calls == [((scheduler, batch, True), {"extra": 1})]
    assert lean.isolation(sglangs, scheduler, SimpleNamespace(), overlap=True) == "sglang's isolation"  # no draft input
    lean._pending = (batch.spec_info, None, None)
    assert lean.isolation(sglangs, scheduler, SimpleNamespace(), overlap=True) == "sglang's isolation"
    for args, kwargs, pinned in (((True,), {}, 1), ((), {}, 0), ((False,), {}, 0), ((), {"overlap": True}, 1)):
        scheduler.pinned = []
        with lean.isolation(None, scheduler, batch, *args, **kwargs):
            pass
        assert len(scheduler.pinned) == pinned, (args, kwargs)


@pytest.mark.parametrize("failure", ["unsupported", "fast step raised"])
def test_sglangs_path_taken_inside_the_light_isolation_ends_the_batch_as_sglangs_isolation_would(
        fast, fake_torch, monkeypatch, failure):
    """The whole run_batch order on OffPath: resolve (skipped), the light isolation, the forward that falls back to
    SGLang's worker, which rebinds fields outside the fast path's: after the isolation every field is as before."""
    plug, _ = fast
    off, log = engine(plug, 0), []
    batch = Batch(SPEC, spec_info=SimpleNamespace(future_indices=Rows([1, 2]), bonus_tokens=[0, 0]),
                  sampling_info=Info(), seq_lens=Lens(2))
    batch.forward_mode, batch.is_extend_in_batch, batch.has_grammar, batch.return_hidden_states = \
        Mode("decode"), False, False, False
    off.resolve.around(lambda m, b: log.append("gather"), FutureMap(), batch)
    before = shallow(batch)
    if failure == "unsupported":
        monkeypatch.setattr(fastoff, "batch_unsupported_reason", lambda batch, grammar=False: "hidden states requested")
    else:
        monkeypatch.setattr(fastoff, "run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))

    def sglangs_worker(worker, b, *a, **k):      # EAGLE's v2 worker rebinds fields mid-forward
        rebind(b, ["reqs", "return_logprob", "seq_lens", "spec_info"])
        return "sglang's result"
    with off.resolve.isolation(None, Scheduler(), batch, overlap=True):
        assert off.forward_batch_generation(sglangs_worker, routed_worker(plug), batch) == "sglang's result"
    assert shallow(batch) == before and log == ["gather"]


@pytest.mark.parametrize("version", _fast_versions())
def test_the_plain_decode_sets_no_batch_field_outside_the_fast_paths_but_the_sum_it_puts_back(version):
    """Per wheel: what SGLang's side of the plain decode (the target worker, ForwardBatch.init_new) assigns on the
    ScheduleBatch directly: seq_lens_sum only (in fastoff.FAST_FIELDS); sampling_info's own fields land on the
    forward-only copy in both isolations."""
    import ast
    from tests.sglang_wheels import source
    src, written = source(version), set()
    for dotted in ("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
                   "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"):
        for node in ast.walk(src.function(dotted)):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "batch":
                        written.add(t.attr)
    assert written <= set(fastoff.FAST_FIELDS), (version, written)


def test_the_engine_log_says_once_that_it_engaged(fake_torch, caplog):
    import logging
    caplog.set_level(logging.INFO, logger="spec_controller.plugin")
    fm, lean = FutureMap(), offresolve.LeanResolve(takes=lambda batch: True, enabled=True)
    line = ("spec-controller: fast-path batches get their bonus tokens alone and a light forward isolation "
            "(SPEC_CONTROLLER_LEAN_RESOLVE)")
    for n in range(3):
        lean.around(sglangs_gather, fm, batch_of([1]))
        assert [r.getMessage() for r in caplog.records].count(line) == 1, n      # at the first, and only then
