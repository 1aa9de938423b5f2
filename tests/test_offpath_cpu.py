"""The off path's choices (controller/plugin/offpath.py) and the draft-KV writer's support check
(controller/plugin/draftkv.py), pinned down by the mutation-testing pass (bench/mutation.py --groups
offpath): each unsupported draft's reason, the writer's fields, defaults, the TP size, rank agreement,
the hooks' arguments to SGLang's own paths, counters and logged failures."""
import logging
from types import SimpleNamespace

import pytest

from controller import contract
from controller.contract import decode
from controller.plugin import draftkv, fastoff, internals
from controller.plugin.instance import Plugin
from tests.test_plugin_cpu import (GOOD, WATERMARKED, Recorder, active, decode_batch, fast, plug,  # noqa: F401
                                   routed_worker, worker)   # fast, plug: fixtures

def eagle3_draft(drop=(), layer_drop=(), attn_drop=(), dcp=1, **inner_extra):
    """A stand-in for a one-layer EAGLE3 draft runner on a plain MHA pool; drop names an inner-model,
    layer or attention attribute (or the runner's: "model", "pool", "dcp_size") to leave out."""
    attn = SimpleNamespace(**{k: 1 for k in ("forward_prepare_native", "attn") if k not in attn_drop})
    layer = SimpleNamespace(**{k: 1 for k in ("hidden_norm", "input_layernorm") if k not in layer_drop})
    if "self_attn" not in layer_drop:
        layer.self_attn = attn
    inner = SimpleNamespace(**{k: v for k, v in dict(embed_tokens=1, fc=1, input_norm=None, fc_norm=None,
                                                     num_aux_hidden_states=3, layers=[layer]).items()
                               if k not in drop}, **inner_extra)
    model = type("LlamaForCausalLMEagle3", (), {})()
    if "inner" not in drop:
        model.model = inner
    runner = SimpleNamespace(model=model, token_to_kv_pool=type("MHATokenToKVPool", (), {})(), dcp_size=dcp)
    for name, attr in (("model", "model"), ("pool", "token_to_kv_pool"), ("dcp_size", "dcp_size")):
        if name in drop:
            delattr(runner, attr)
    return runner


def test_each_unsupported_draft_gets_its_own_reason():
    reason = draftkv.unsupported_reason
    assert reason(SimpleNamespace(model=object())) == "the draft is object, not LlamaForCausalLMEagle3"
    assert reason(eagle3_draft(drop=("model",))) == "the draft is NoneType, not LlamaForCausalLMEagle3"
    assert reason(eagle3_draft(drop=("inner",))) == "the draft has no layers (one is supported)"
    assert reason(eagle3_draft(drop=("layers",))) == "the draft has no layers (one is supported)"
    assert reason(eagle3_draft(layer_drop=("self_attn",))) == "the draft layer has no forward_prepare_native"
    assert reason(eagle3_draft(is_mrope_enabled=True)) == "the draft uses multimodal RoPE"
    assert reason(eagle3_draft(drop=("pool",))) == "the draft's KV pool is NoneType, not MHATokenToKVPool"
    quantised = eagle3_draft()
    quantised.token_to_kv_pool.is_quantized_kv_cache = True
    assert reason(quantised) == "the draft's KV cache is quantised"
    unified = eagle3_draft()        # the plain pool's name, as a subclass may have: the attribute refuses it
    unified.token_to_kv_pool.requires_physical_write_loc = True
    assert reason(unified) == ("the draft's KV pool (MHATokenToKVPool) takes physical slot ids only: SGLang's unified "
                               "memory pool, whose compaction moves the draft's KV between batches")
    unified.token_to_kv_pool.requires_physical_write_loc = False      # the plain pool's own value (0.5.22+)
    assert reason(unified) is None
    assert reason(eagle3_draft(dcp=2)) == "decode context parallelism shards the KV cache"
    for dcp_unset in (eagle3_draft(dcp=None), eagle3_draft(dcp=0), eagle3_draft(drop=("dcp_size",))):
        assert reason(dcp_unset) is None          # no decode context parallelism: one shard


def test_the_built_writer_holds_the_drafts_inner_model_its_layer_and_pool():
    runner = eagle3_draft()
    w = draftkv.build(runner)
    assert w.model is runner.model.model and w.layer is runner.model.model.layers[0]
    assert w.pool is runner.token_to_kv_pool


def test_off_path_defaults_and_which_choices_capture_hidden_states(plug):
    from controller.plugin.offpath import OffPath
    bare = OffPath(plug.router, plug.failures)
    assert (bare.enabled, bare.sync_draft, bare.lean_prefill, bare.draft_kv, bare.capture_hidden) == \
        (True, False, False, False, False)
    assert OffPath(plug.router, plug.failures, capture_hidden=True).capture_hidden
    assert OffPath(plug.router, plug.failures, sync_draft=True).capture_hidden
    assert OffPath(plug.router, plug.failures, draft_kv=True).capture_hidden
    default = Plugin({}).off_path                 # not built yet: a writer can be, graphs with hidden states
    assert default.fast is None and default.can_write_kv()
    default.fast = fastoff.FastOff(None, None, with_hidden=True)
    assert not default.can_write_kv()             # built, but no writer


def logged_failure(caplog, where: str, exc: BaseException) -> None:
    """The failure was logged once, under its place, with the exception and its traceback."""
    hits = [r for r in caplog.records if f"{where} failed ({exc})" in r.getMessage()]
    assert len(hits) == 1 and hits[0].exc_info is not None and hits[0].exc_info[1] is exc


def built(plug, monkeypatch, w, agree=lambda ok: ok, build=None):
    """after_init_cuda_graphs on 0.5.17 with fastoff.build recorded (graphs with hidden states)."""
    got = []
    plug.router.version = lambda: "0.5.17"
    monkeypatch.setattr(fastoff, "build", build or (lambda worker, names, with_hidden=False: got.append(
        (worker, names, with_hidden)) or fastoff.FastOff(None, None, with_hidden=True)))
    monkeypatch.setattr(fastoff, "all_ranks_agree", agree)
    plug.off_path.after_init_cuda_graphs(None, w)
    return got


def internals_for(version):
    return internals.for_version(contract.parse_version(version))


def test_the_build_gets_the_worker_and_the_writer_the_workers_draft(plug, monkeypatch):
    w = worker()
    w.server_args = SimpleNamespace(tp_size=2)
    w.draft_worker = SimpleNamespace(draft_runner=eagle3_draft())
    got = built(plug, monkeypatch, w)
    off = plug.off_path
    assert got == [(w, internals_for("0.5.17"), True)]          # with hidden states: the kv default
    assert off.fast is not None and off.kv_writer is not None
    assert off.kv_writer.pool is w.draft_worker.draft_runner.token_to_kv_pool
    assert off.tp_size == 2
    for args, tp in ((None, 1), (SimpleNamespace(), 1), (SimpleNamespace(tp_size=None), 1)):
        p = active(Plugin({}))
        v = worker()
        if args is not None:
            v.server_args = args
        v.draft_worker = SimpleNamespace(draft_runner=eagle3_draft())
        built(p, monkeypatch, v)
        assert p.off_path.tp_size == tp


def test_tp_ranks_that_disagree_or_cannot_agree_keep_steps_0(plug, monkeypatch, caplog):
    w = worker()
    built(plug, monkeypatch, w, agree=lambda ok: False)
    assert plug.off_path.fast is None and plug.off_path.reason == contract.REASON_OTHER_RANK
    err = RuntimeError("no group")

    def broken(ok):
        raise err
    p = active(Plugin({}))
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        built(p, monkeypatch, worker(), agree=broken)
    assert p.off_path.fast is None and p.off_path.reason == contract.REASON_OTHER_RANK
    assert p.failures.places == {"fast off agreement"}
    logged_failure(caplog, "fast off agreement", err)


def test_a_capture_or_writer_failure_is_logged_with_its_traceback(plug, monkeypatch, caplog):
    err = RuntimeError("capture")

    def fails(*a, **k):
        raise err
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        built(plug, monkeypatch, worker(), build=fails)
    assert plug.failures.places == {"fast off capture"} and plug.off_path.reason == contract.REASON_CAPTURE_FAILED
    logged_failure(caplog, "fast off capture", err)
    p = active(Plugin({}))
    werr = RuntimeError("pool")
    monkeypatch.setattr(draftkv, "build", lambda runner: (_ for _ in ()).throw(werr))
    w = worker()
    w.draft_worker = SimpleNamespace(draft_runner=eagle3_draft())
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        built(p, monkeypatch, w)
    assert p.failures.places == {"draft KV writer"} and p.off_path.kv_writer is None
    assert p.off_path.fast is not None and not p.off_path.sync_draft       # the fast path without the draft's KV
    logged_failure(caplog, "draft KV writer", werr)


def refused_worker():
    """A worker whose engine the plugin refuses (SGLang's adaptive speculation is off)."""
    w = worker()
    w.server_args = SimpleNamespace(**{**GOOD, "speculative_adaptive": False})
    return w


def test_an_unchecked_plugin_checks_the_worker_it_is_handed():
    plug = Plugin({})
    plug.router.version = lambda: "0.5.17"
    plug.off_path.after_init_cuda_graphs(None, refused_worker())
    assert plug.off_path.reason == contract.REASON_INACTIVE and plug.off_path.fast is None
    plug = Plugin({})                                     # a fast path, and the first decode batch's check
    plug.router.version = lambda: "0.5.17"
    plug.off_path.fast = fastoff.FastOff(None, None)
    rec, w = Recorder(), refused_worker()
    plug.off_path.forward_batch_generation(rec.original, w, decode_batch(4))
    assert rec.calls == [("sglang", 4)] and plug.router.inert_reason.startswith("speculative_adaptive is off")


class ArgsRecorder:
    def __init__(self, result="sglang-result"):
        self.calls, self.result = [], result

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def test_every_sglang_path_gets_the_hooks_own_arguments(fast, monkeypatch):
    plug, _ = fast
    off, rec, w = plug.off_path, ArgsRecorder(), routed_worker(plug)
    on = decode_batch(4)                                   # speculates
    assert off.forward_batch_generation(rec, w, on, "pub", x=1) == "sglang-result"
    wm = decode_batch(20, return_logprob=True, sampling_info=WATERMARKED)
    off.forward_batch_generation(rec, w, wm, "pub", x=1)   # steps-0 for its logprobs
    monkeypatch.setattr(fastoff, "run", lambda *a, **k: 1 / 0)
    plain = decode_batch(20)
    off.forward_batch_generation(rec, w, plain, "pub", x=1)  # the fast path failed: SGLang's
    assert rec.calls == [((w, on, "pub"), {"x": 1}), ((w, wm, "pub"), {"x": 1}), ((w, plain, "pub"), {"x": 1})]


def test_the_fast_path_gets_the_worker_and_a_positional_on_publish(fast, monkeypatch):
    plug, _ = fast
    got = []

    def run(worker, f, batch, on_publish, sync=False, kv=None, grammar_barrier=None, lean=False, before_write=None):
        got.append((worker, batch, on_publish, grammar_barrier, lean))
        f.batches += 1
        return "fast"
    monkeypatch.setattr(fastoff, "run", run)
    w, b = routed_worker(plug), decode_batch(30)
    assert plug.off_path.forward_batch_generation(Recorder().original, w, b, "pub", "other") == "fast"
    assert got == [(w, b, "pub", "other", True)]     # the second positional: SGLang's grammar_barrier; lean: default
    plug.off_path.lean_off = False                   # the run-time switch reaches the step
    plug.off_path.forward_batch_generation(Recorder().original, w, b, "pub")
    assert got[-1] == (w, b, "pub", None, False)
    assert plug.off_path.counters()["draft_kv_writes"] == 0        # no writer: nothing written


def test_fallbacks_are_counted_per_batch_and_per_reason(fast):
    plug, _ = fast
    for _ in range(2):
        plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug),
                                               decode_batch(20, return_logprob=True, sampling_info=WATERMARKED))
    c = plug.off_path.counters()
    assert (c["off_fallbacks"], c["off_fallbacks_logprob"], c["off_fallbacks_grammar"]) == (2, 2, 0)


def test_counters_name_every_off_path_figure(fast):
    plug, _ = fast
    off = plug.off_path
    off.lean_prefills, off.kv_writes, off.fast.cpu_ns, off.fast.graph_batches = 5, 7, 11, 3
    off.fast.target_ns, off.fast.kv_ns, off.prompts.ns = 6, 4, 13
    off.prompts.eager, off.prompts.eager_ns, off.prompts.held, off.fast.lean_batches = 2, 9, 4, 8
    off.resolve.batches, off.prompts.writer_ns = 6, 10
    off.plain = SimpleNamespace(batches=5)       # (plainoff.PlainOff where the engine was started with it)
    assert off.counters() == {"plain_off_batches": 5, "off_fallbacks": 0, "lean_prefills": 5, "off_fallbacks_logprob": 0,
                              "off_fallbacks_grammar": 0, "draft_kv_writes": 7, "fast_off_batches": 0,
                              "fast_off_graph_batches": 3, "fast_off_cpu_ns": 11, "fast_off_target_ns": 6,
                              "draft_kv_ns": 4, "draft_kv_prefill_ns": 13, "draft_kv_prefill_eager": 2,
                              "draft_kv_prefill_eager_ns": 9, "draft_kv_prefill_held": 4, "lean_resolves": 6,
                              "draft_kv_prefill_writer_ns": 10,
                              "draft_kv_graph_writes": 0,
                              "draft_kv_side_writes": 0,
                              "draft_kv_graph_launches": 0, "draft_kv_prefill_direct": 0,
                              "prefills_pay_draft": contract.PAYS_DRAFT,   # no KV writer built here
                              "fast_off_lean_batches": 8}


def test_launch_time_adds_each_batchs_cpu_time(fast, monkeypatch):
    from controller.plugin import offpath
    plug, _ = fast
    clock = iter([1000, 1250, 5000, 5100])
    monkeypatch.setattr(offpath, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    plug.off_path.fast.cpu_ns = 100
    for _ in range(2):
        plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    assert plug.off_path.fast.cpu_ns == 100 + 250 + 100


def test_a_progress_line_after_the_first_fast_batch_and_every_log_every(fast, caplog):
    from controller.plugin import offpath
    plug, _ = fast
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        for _ in range(3):
            plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
        plug.off_path.fast.batches = offpath.LOG_EVERY       # the next one is LOG_EVERY + 1
        plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    lines = [r.getMessage() for r in caplog.records if "spec-controller fast off:" in r.getMessage()]
    assert lines == ["spec-controller fast off: 1 batches (0 on CUDA graphs), 0 fell back to steps-0",
                     f"spec-controller fast off: {offpath.LOG_EVERY + 1} batches (0 on CUDA graphs), "
                     "0 fell back to steps-0"]


def test_a_fast_path_failure_is_logged_with_its_traceback(fast, monkeypatch, caplog):
    plug, _ = fast
    err = RuntimeError("launch")
    monkeypatch.setattr(fastoff, "run", lambda *a, **k: (_ for _ in ()).throw(err))
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    assert plug.failures.places == {"fast off"}
    logged_failure(caplog, "fast off", err)


def test_a_fast_path_failure_at_tp_above_1_is_raised_not_degraded_on_one_rank(fast, monkeypatch):
    # one rank on steps-0 while the others stay on the fast path would issue other collectives and hang
    # the group silently: the failure is recorded and raised (SGLang's scheduler dies, the daemon says so)
    plug, _ = fast
    plug.off_path.tp_size = 2
    monkeypatch.setattr(fastoff, "run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("launch")))
    rec = Recorder()
    with pytest.raises(RuntimeError, match="launch"):
        plug.off_path.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(30))
    assert rec.calls == [] and plug.failures.places == {"fast off"} and plug.off_path.fast is None


def test_every_draft_prefill_path_gets_the_hooks_own_arguments(fast, monkeypatch, caplog):
    plug, _ = fast
    off, rec = plug.off_path, ArgsRecorder("draft forward")
    plug.router.threshold = 8                                          # speculating: the draft runs
    assert off.draft_extend_for_prefill(rec, "draft", "batch", "hidden", [7], "mm", x=1) == "draft forward"
    plug.router.threshold = 0
    off.fast.with_hidden, off.kv_writer = True, object()
    off.draft_extend_for_prefill(rec, "draft", "batch", "hidden", [7], "mm", x=1)   # multimodal: the draft
    assert decode(plug.telemetry.stats_message())["off_reason"] == ""
    err = RuntimeError("no pool")
    monkeypatch.setattr(draftkv, "write_prefill", lambda *a: (_ for _ in ()).throw(err))
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        off.draft_extend_for_prefill(rec, "draft", "batch", "hidden", [7], None, x=1)   # the write failed
    assert rec.calls == [(("draft", "batch", "hidden", [7], "mm"), {"x": 1})] * 2 + \
        [(("draft", "batch", "hidden", [7], None), {"x": 1})]
    assert plug.failures.places == {"draft KV prefill"}
    logged_failure(caplog, "draft KV prefill", err)
    # the operator's status says why the draft is no longer written while off (the path alone would not)
    stats = decode(plug.telemetry.stats_message())
    assert stats["off_path"] == contract.OFF_PATHS[1]
    assert stats["off_reason"] == contract.OFF_REASONS[contract.REASON_KV_WRITE_FAILED]


def test_lean_prefills_stub_the_draft_workers_input_and_are_counted(fast, monkeypatch):
    plug, _ = fast
    off = plug.off_path
    plug.router.threshold = 0
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: ("stub", draft, ids, *stubs))
    original = ArgsRecorder("draft forward")
    for _ in range(2):
        assert off.draft_extend_for_prefill(original, "draft", "batch", "hidden", [7]) == ("stub", "draft", [7], None)
    assert off.lean_prefills == 2 and off.counters()["lean_prefills"] == 2 and original.calls == []
    # under the overlap scheduler with the lean off step on (the default): the fast path's made-once stubs
    from types import SimpleNamespace
    overlapped = SimpleNamespace(enable_overlap=True)
    assert off.lean_off and off.fast is not None
    assert off.draft_extend_for_prefill(original, "draft", overlapped, "hidden", [7]) == ("stub", "draft", [7], off.fast)


def test_counters_count_the_writes_replayed_from_graphs(fast):
    from types import SimpleNamespace
    off = fast[0].off_path
    off.kv_graph = SimpleNamespace(replays=42, side_replays=40, launches=6, direct_prompts=5)
    assert off.counters()["draft_kv_graph_writes"] == 42 and off.counters()["draft_kv_side_writes"] == 40
    assert off.counters()["draft_kv_graph_launches"] == 6 and off.counters()["draft_kv_prefill_direct"] == 5


def test_side_stream_writes_are_waited_for_before_sglangs_own_batches_not_before_the_next_off_batch(fast, monkeypatch):
    from tests.test_draftkv_graph import sided
    plug, _ = fast
    off, log = plug.off_path, None
    off.kv_graph, log = sided()
    off.kv_graph.overlap, off.kv_writer, off.draft_kv = True, "eager", True

    def run(worker, f, batch, on_publish, sync=False, kv=None, grammar_barrier=None, lean=False, before_write=None):
        log.append(("fast", batch.seq_lens.shape[0]))
        if kv is off.kv_graph:
            kv.side.pending = True                      # as a replay on the side stream leaves it
        return "fast"
    monkeypatch.setattr(fastoff, "run", run)
    w = routed_worker(plug)
    for bs in (30, 31):
        off.forward_batch_generation(Recorder().original, w, decode_batch(bs), "pub")
    assert log == [("fast", 30), ("fast", 31)]          # off batch after off batch: the replays run on beside
    rec = Recorder()
    off.forward_batch_generation(rec.original, w, decode_batch(4), "pub")             # speculates: SGLang's
    assert log[-1] == ("forward", "waits", "done") and rec.calls == [("sglang", 4)]
    off.forward_batch_generation(rec.original, w, decode_batch(30), "pub")
    off.forward_batch_generation(rec.original, w, decode_batch(30, return_logprob=True, sampling_info=WATERMARKED),
                                 "pub")                                               # steps-0 for its logprobs
    assert log[-2:] == [("fast", 30), ("forward", "waits", "done")] and rec.calls[-1] == ("sglang", 30)
    off.forward_batch_generation(rec.original, w, decode_batch(30), "pub")
    plug.apply_own_keys({contract.DRAFT_KV_GRAPH_KEY: False})                        # the eager writer now
    off.forward_batch_generation(rec.original, w, decode_batch(30), "pub")
    assert log[-3:] == [("fast", 30), ("forward", "waits", "done"), ("fast", 30)] and off.fast is not None


def test_a_fast_path_failure_waits_for_the_side_stream_before_sglangs_path(fast, monkeypatch):
    from tests.test_draftkv_graph import sided
    plug, _ = fast
    off = plug.off_path
    off.kv_graph, log = sided()
    off.kv_graph.overlap, off.kv_writer, off.draft_kv = True, "eager", True

    def run(worker, f, batch, on_publish, sync=False, kv=None, grammar_barrier=None, lean=False, before_write=None):
        kv.side.pending = True                          # a replay went out, then the step failed
        raise RuntimeError("boom")
    monkeypatch.setattr(fastoff, "run", run)
    rec = Recorder()
    off.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(30), "pub")
    assert log == [("forward", "waits", "done")] and rec.calls == [("sglang", 30)]


def test_a_failed_prompt_write_waits_for_its_replayed_chunks_before_the_drafts_own_extend(fast, monkeypatch):
    from tests.test_draftkv_graph import sided
    plug, _ = fast
    off = plug.off_path
    off.kv_graph, log = sided()
    off.kv_graph.overlap, off.kv_writer, off.draft_kv, off.fast.with_hidden = True, "eager", True, True
    plug.apply_own_keys({contract.SYNC_DRAFT_KEY: False, contract.LEAN_PREFILL_KEY: True})
    plug.router.threshold = 0

    def write(w, batch, hidden, ids):
        w.side.pending = True                           # some chunks replayed, then the write failed
        raise RuntimeError("boom")
    monkeypatch.setattr(draftkv, "write_prefill", write)
    original = lambda *a, **k: log.append("draft extend") or "draft forward"
    assert off.draft_extend_for_prefill(original, None, "batch", "hidden", [7]) == "draft forward"
    assert log == [("forward", "waits", "done"), "draft extend"]
