"""The SGLang names the draft-KV writer (controller/plugin/draftkv.py) relies on, against every wheel
the fast off path supports: parameters in order, attributes set, and the source facts that make its k, v
the ones SGLang's own draft forward would store."""
import ast

import pytest

from controller.contract import parse_version
from controller.plugin import draftkv, internals
from tests.sglang_wheels import VERSIONS, name_problems, source
from tests.test_offpath_cpu import eagle3_draft

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]


def problems(version: str) -> list[str]:
    return name_problems(source(version), draftkv.CALLABLES, draftkv.ATTRIBUTES, facts=draftkv.FACTS)


@pytest.mark.parametrize("version", FAST)
def test_the_writers_sglang_names_hold_in_every_fast_wheel(version):
    assert problems(version) == [], version


def test_the_check_can_fail():
    # a fact or parameter that no wheel has is reported (the check is not vacuous)
    saved = draftkv.CALLABLES, draftkv.FACTS
    try:
        draftkv.CALLABLES = {**saved[0], "sglang.srt.models.llama.LlamaAttention.forward_prepare_native":
                             ("self", "hidden_states", "positions")}
        draftkv.FACTS = saved[1] + (("sglang.srt.models.llama.LlamaAttention.forward", "no such line", "x"),)
        found = problems(FAST[0])
    finally:
        draftkv.CALLABLES, draftkv.FACTS = saved
    assert len(found) == 2


# SGLang's check of --enable-unified-memory: ServerArgs' method up to 0.5.18, an arg_groups hook from 0.5.19
UNIFIED_CHECKS = ("sglang.srt.server_args.ServerArgs._handle_unified_memory_pool",
                  "sglang.srt.arg_groups.kv_cache_hook.handle_unified_memory_pool")
CONFIGURATOR = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"


def unified_memory_algorithms(src) -> set | None:
    """The speculative algorithms a wheel lets --enable-unified-memory run with (its assert on
    speculative_algorithm), or None where it has no such check."""
    for dotted in UNIFIED_CHECKS:
        try:
            fn = src.function(dotted)
        except AssertionError:
            continue
        for node in ast.walk(fn):
            test = node.test if isinstance(node, ast.Assert) else None
            if isinstance(test, ast.Compare) and ast.unparse(test.left).endswith(".speculative_algorithm"):
                return {None} if isinstance(test.ops[0], ast.Is) else set(ast.literal_eval(test.comparators[0]))
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_unified_memory_never_gives_the_writer_a_draft_pool_that_compaction_moves(version):
    """Lazy compaction moves KV pages between batches, gated on an event after the forward that neither a held
    (coalesced) row nor a side-stream replay is behind. Up to 0.5.21 SGLang refuses the option with EAGLE(3); from
    0.5.22 an EAGLE draft must fuse into the target's pages, bound by pools that take physical ids only, and the
    writer refuses each of them by that attribute (they subclass the plain pool), saying why."""
    src = source(version)
    algorithms = unified_memory_algorithms(src)
    files = [n for n in src.names if n.startswith("sglang/srt/") and ("server_args" in n or "arg_groups/" in n)]
    assert (algorithms is None) == (not any(b"enable_unified_memory:" in src.zip.read(n) for n in files)), version
    if algorithms is None or not algorithms & {"EAGLE", "EAGLE3"}:
        return
    for factory in ("_fused_draft_for_swa_factory", "_fused_draft_for_mamba_factory"):
        assert "needs the draft's KV fused into the target's pages" in src.text(f"{CONFIGURATOR}.{factory}"), version
    tree, _ = src.locate("sglang.srt.mem_cache.unified_draft_pool")
    pools = [c for c in tree.body if isinstance(c, ast.ClassDef)
             and any(ast.unparse(b).endswith("KVPool") for b in c.bases)]
    assert pools, version
    for cls in pools:
        assert "requires_physical_write_loc = True" in ast.unparse(cls), (version, cls.name)
        runner = eagle3_draft()
        runner.token_to_kv_pool = type(cls.name, (), {"requires_physical_write_loc": True})()
        assert "takes physical slot ids only" in draftkv.unsupported_reason(runner), (version, cls.name)


DRAFT_PLAN = "sglang.srt.speculative.base_spec_worker.BaseSpecWorker._build_hicache_draft_plan"   # 0.5.18+
# A value that turns each setting on, and what SGLang requires beside it (host-pool retraction: a PD decode server)
TURNED_ON = {"disaggregation_decode_retraction_backup": {"disaggregation_decode_retraction_backup": "host_pool",
                                                         "disaggregation_mode": "decode"}}


def draft_plan_settings(src) -> set[str]:
    """The server args under which a wheel gives the draft's device pool a host / external tier (the settings its
    _build_hicache_draft_plan returns no plan without), or none before it had one."""
    try:
        fn = src.function(DRAFT_PLAN)
    except AssertionError:
        return set()
    gate = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and isinstance(n.test, ast.UnaryOp))
    return {n.attr for n in ast.walk(gate.test) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_setting_that_copies_the_drafts_kv_elsewhere_keeps_its_writes_per_batch(version):
    """SGLang backs the draft's pool up and loads it back, on streams of its own, under each setting its draft plan
    is gated on (the hierarchical cache; 0.5.20+ the external cache linker, which 0.5.23 gives an EAGLE3 draft's
    pool as a sidecar; PD decode's host-pool retraction): held rows and side-stream replays are behind none of it."""
    from types import SimpleNamespace
    from controller.plugin import draftkv_coalesce
    settings = draft_plan_settings(source(version))
    assert settings or parse_version(version) < (0, 5, 18), version
    for name in settings:
        args = SimpleNamespace(**TURNED_ON.get(name, {name: True}))
        assert draftkv_coalesce.unsupported_reason(args, 1), (version, name)
