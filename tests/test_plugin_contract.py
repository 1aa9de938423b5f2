"""Contract with released SGLang wheels, on CPU: every hook target the plugin names exists
with the parameters it expects, in 0.5.14, 0.5.17 and 0.5.23 (parsed with ast, not imported)."""
import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from controller.plugin.fastoff import FAST_OFF_CALLABLES, FAST_OFF_VERSIONS
from controller.plugin.instance import Plugin
from controller.plugin.support import HOOK_TARGETS, USED_CALLABLES

HOOKS = Plugin({}).hooks()

VERSIONS = ["0.5.14", "0.5.17", "0.5.23"]
CACHE = Path(os.environ.get("SGLANG_WHEEL_CACHE", Path(__file__).resolve().parent.parent / ".cache" / "sglang-wheels"))


def wheel(version: str) -> Path:
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}",
                              "-d", str(CACHE)], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"pip download sglang=={version} failed: {res.stderr[-500:]}"
        found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    return found[0]


class Source:
    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees: dict[str, ast.Module] = {}

    def locate(self, dotted: str) -> tuple[ast.Module, list[str]]:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            base = "/".join(parts[:i])
            name = base + ".py" if base + ".py" in self.names else base + "/__init__.py"
            if name in self.names:
                if name not in self._trees:
                    self._trees[name] = ast.parse(self.zip.read(name))
                return self._trees[name], parts[i:]
        raise AssertionError(f"no module for {dotted}")

    def function(self, dotted: str) -> ast.FunctionDef:
        tree, rest = self.locate(dotted)
        node: ast.AST = tree
        for name in rest:
            body = getattr(node, "body", [])
            match = [n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == name]
            assert match, f"{dotted}: {name} not found"
            node = match[-1]
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)), f"{dotted} is not a function"
        return node


@pytest.fixture(scope="module", params=VERSIONS)
def source(request):
    return request.param, Source(wheel(request.param))


@pytest.mark.parametrize("target,params", sorted({**HOOK_TARGETS, **USED_CALLABLES}.items()))
def test_hook_targets_exist_with_expected_parameters(source, target, params):
    version, src = source
    fn = src.function(target)
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    assert names[:len(params)] == list(params), f"sglang {version}: {target}{tuple(names)}"


@pytest.mark.parametrize("target,params", sorted(FAST_OFF_CALLABLES.items()))
def test_fast_off_callables_exist_where_it_is_enabled(target, params):
    for version in sorted(FAST_OFF_VERSIONS):
        fn = Source(wheel(".".join(map(str, version)))).function(target)
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
        assert [n for n in names if n in params] == list(params), f"sglang {version}: {target}{tuple(names)}"


def test_fast_off_result_fields(source):
    """The steps-0-shaped result the fast path builds: GenerationBatchResult's fields, all versions."""
    version, src = source
    tree, _ = src.locate("sglang.srt.managers.utils")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GenerationBatchResult")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    assert {"logits_output", "next_token_ids", "can_run_cuda_graph", "speculative_num_draft_tokens",
            "next_draft_input", "accept_lens", "new_seq_lens", "extra_keep_alive_refs"} <= fields, version


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
    if version == "0.5.14":
        assert ADAPTIVE_SOURCE not in text           # switches write server_args: nothing accumulates
        return
    assert f"get_context().override('{ADAPTIVE_SOURCE}'" in text, version
    override = ast.unparse(src.function("sglang.srt.runtime_context.RuntimeContext.override"))
    assert "self._overrides_log.append((source, dict(fields)))" in override, version
    src.function("sglang.srt.runtime_context.get_context")
