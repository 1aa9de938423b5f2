"""Contract with released SGLang wheels, on CPU: every hook target the plugin names exists
with the parameters it expects, in every release of the supported range (tests/sglang_wheels.py,
parsed with ast, not imported); the refusals mirror SGLang's own adaptive_unsupported_reason."""
import ast

import pytest

from controller.contract import parse_version
from controller.plugin.instance import Plugin
from controller.plugin.support import HOOK_TARGETS, USED_CALLABLES
from tests.sglang_wheels import VERSIONS, params, source as wheel_source

HOOKS = Plugin({"SPEC_CONTROLLER_LEAN_RESOLVE": "1"}).hooks()    # every hook (the lean resolve only where asked)


@pytest.fixture(scope="module", params=VERSIONS)
def source(request):
    return request.param, wheel_source(request.param)


@pytest.mark.parametrize("target,expected", sorted({**HOOK_TARGETS, **USED_CALLABLES}.items()))
def test_hook_targets_exist_with_expected_parameters(source, target, expected):
    version, src = source
    names = params(src.function(target))
    assert names[:len(expected)] == list(expected), f"sglang {version}: {target}{tuple(names)}"


def test_result_fields_the_telemetry_reads(source):
    version, src = source
    fn = src.function(HOOK_TARGETS_RESOLVE)
    text = ast.unparse(fn)
    assert "result.num_correct_drafts =" in text, version          # set before our AFTER hook runs
    assert "speculative_num_draft_tokens" in ast.unparse(src.locate(
        "sglang.srt.managers.scheduler_components.batch_result_processor")[0]), version


def test_set_internal_state_answers_with_updated_flag(source):
    version, src = source
    tree, _ = src.locate("sglang.srt.managers.io_struct")
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    fields = [n.target.id for n in classes["SetInternalStateReqOutput"].body if isinstance(n, ast.AnnAssign)]
    assert fields[0] == "updated" and set(fields) <= {"updated", "server_args"}, version   # plugin.state_output
    req = [n.target.id for n in classes["SetInternalStateReq"].body if isinstance(n, ast.AnnAssign)]
    assert "server_args" in req


def test_plugin_group_and_hook_registry(source):
    version, src = source
    tree, _ = src.locate("sglang.srt.plugins")
    text = ast.unparse(tree)
    assert 'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"' in text.replace("'", '"'), version
    reg = src.function("sglang.srt.plugins.hook_registry.HookRegistry.register")
    assert [a.arg for a in reg.args.args][:4] == ["cls", "target", "hook", "hook_type"]
    tree, _ = src.locate("sglang.srt.plugins.hook_registry")
    hook_type = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HookType")
    members = {t.id for n in hook_type.body if isinstance(n, ast.Assign) for t in n.targets}
    assert {kind for _, kind in HOOKS.values()} <= members, version


def test_every_registered_hook_is_a_checked_target():
    assert set(HOOKS) == set(HOOK_TARGETS)


HOOK_TARGETS_RESOLVE = next(t for t in HOOK_TARGETS if t.endswith("_resolve_spec_v2_tokens"))


def test_switch_side_effects_the_plugin_contains(source):
    """controller/switches.py: the per-switch log line it drops, and (0.5.17+) the override-log entry
    it trims, as each released version writes them."""
    from controller.plugin.support import EAGLE_WORKER
    from controller.plugin.switches import ADAPTIVE_SOURCE, SWITCH_LINE
    version, src = source
    text = ast.unparse(src.function(f"{EAGLE_WORKER}.apply_runtime_state"))
    assert f"log_info_on_rank0(logger, f'{SWITCH_LINE}" in text, version
    worker_module = ast.unparse(src.locate("sglang.srt.speculative.eagle_worker_v2")[0])
    assert "logger = logging.getLogger(__name__)" in worker_module, version
    if parse_version(version) < (0, 5, 16):
        assert ADAPTIVE_SOURCE not in text           # switches write server_args: nothing accumulates
        return
    if parse_version(version) == (0, 5, 16):
        # ServerArgs.override appends one entry per switch to a list of its own, which the plugin does
        # not trim (docs/sglang.md#state-switches: 0.5.16 is not trimmed)
        assert f"self.server_args.override('{ADAPTIVE_SOURCE}'" in text, version
        assert "log.append((source, dict(rest)))" in src.text("sglang.srt.server_args.ServerArgs.override")
        return
    assert f"get_context().override('{ADAPTIVE_SOURCE}'" in text, version
    override = ast.unparse(src.function("sglang.srt.runtime_context.RuntimeContext.override"))
    assert "self._overrides_log.append((source, dict(fields)))" in override, version
    src.function("sglang.srt.runtime_context.get_context")


GOOD = dict(speculative_algorithm="EAGLE3", speculative_eagle_topk=1, speculative_adaptive=True)
# Each condition SGLang's adaptive_unsupported_reason tests -> a configuration our refusal must catch
# (SGLang itself only warns and falls back to static speculation: the plugin would be inert)
MIRRORED = {
    "speculative_algorithm": {**GOOD, "speculative_algorithm": "STANDALONE"},
    "speculative_eagle_topk": {**GOOD, "speculative_eagle_topk": 4},
    "enable_dp_attention": {**GOOD, "enable_dp_attention": True},
    "attn_dp_enabled_of": {**GOOD, "attn_dp_size": 2},           # 0.5.22+: attn_dp_size > 1 or a scale joiner
    "ep_scale_joiner_of": {**GOOD, "ep_join_mode": "scale"},
    "enable_multi_layer_eagle": {**GOOD, "enable_multi_layer_eagle": True},
    "enable_two_batch_overlap": {**GOOD, "enable_two_batch_overlap": True},
    "enable_pdmux": {**GOOD, "enable_pdmux": True},
    "get_platform_worker_cls": "platform",                          # 0.5.23: checked from the entry points
}
HELPERS = {"resolved_view", "resolving_view", "from_string", "SpeculativeAlgorithm"}


def adaptive_conditions(src) -> set[str]:
    fn = src.function("sglang.srt.speculative.adaptive_spec_params.adaptive_unsupported_reason")
    names = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and n.attr not in ("__name__",)}
    names |= {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return names - HELPERS


def test_every_adaptive_refusal_of_the_wheel_is_refused_before_start(source):
    from controller import contract
    version, src = source
    found = adaptive_conditions(src)
    if "attn_dp_enabled_of" in found:       # its body (0.5.22+): attn_dp_size > 1 or ep_scale_joiner_of
        body = src.text("sglang.srt.runtime_context.attn_dp_enabled_of")
        assert "cfg.attn_dp_size > 1" in body and "ep_scale_joiner_of(cfg)" in body, version
        found.add("ep_scale_joiner_of")
    assert found <= set(MIRRORED), f"sglang {version} refuses adaptive for {found - set(MIRRORED)} too"
    for condition in found:
        example = MIRRORED[condition]
        if example == "platform":
            assert contract.platform_unsupported_reason(version, ["oot"]), version
        else:
            assert contract.unsupported_reason(example, version), f"{version}: {condition} not refused"
    assert contract.unsupported_reason(GOOD, version) is None


def test_rejection_sampling_is_read_from_the_name_the_release_uses(source):
    """offpath.rejection_sampling reads server_args.speculative_use_rejection_sampling (default False): the
    name must be the release's, or an engine verifying by rejection sampling would get the fast path."""
    version, src = source
    files = [n for n in src.names if n.startswith("sglang/srt/") and n.endswith(".py")
             and ("server_args" in n or "arg_groups/" in n)]
    assert any(b"speculative_use_rejection_sampling:" in src.zip.read(n) or
               b'"speculative_use_rejection_sampling"' in src.zip.read(n) for n in files), version
