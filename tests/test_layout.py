"""The import graph says which process a module runs in (docs/layout.md):
- controller.plugin runs inside SGLang's scheduler processes; of the project it imports only the
  contract, and nothing else imports it;
- controller.contract and controller.status are leaves (standard library only);
- specctl's start-up path imports nothing heavy at module level (status answers in a blink)."""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("controller", "policies", "state")
HEAVY = {"numpy", "scipy", "sqlite_utils", "matplotlib", "policies", "state", "apscheduler", "prometheus_client",
         "zmq", "torch", "sglang"}


def modules() -> dict[str, Path]:
    out = {}
    for top in PROJECT:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """Absolute names of every module `name` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out |= {f"{module}.{a.name}" for a in node.names}       # `from . import fastoff`
    return out


ALL = modules()


def project_imports(name: str, **kw) -> set[str]:
    return {m for m in imports(name, ALL[name], **kw) if m.split(".")[0] in PROJECT and m in ALL}


def test_the_graph_is_read():
    assert "controller.plugin.router" in ALL and "controller.contract" in project_imports("controller.plugin.router")


@pytest.mark.parametrize("name", sorted(n for n in ALL if n.startswith("controller.plugin")))
def test_the_in_engine_package_imports_only_the_contract(name):
    outside = {m for m in project_imports(name) if not m.startswith("controller.plugin")}
    # (envwords: the environment variables the plugin reads, checked by the daemon too; contract was full)
    assert outside <= {"controller", "controller.contract", "controller.envwords"}, f"{name} imports {outside}"


@pytest.mark.parametrize("name", sorted(n for n in ALL if not n.startswith("controller.plugin")))
def test_nothing_else_imports_the_in_engine_package(name):
    assert not {m for m in project_imports(name) if m.startswith("controller.plugin")}, name


@pytest.mark.parametrize("name", ["controller.contract", "controller.status", "controller.paths",
                                  "controller.numtext", "controller.envwords", "controller.closename"])
def test_shared_leaves_use_the_standard_library_only(name):
    for module in imports(name, ALL[name]):
        if module in ("controller", "controller.__version__") or (      # the version; envwords: the contract's names
                name == "controller.envwords" and module.split(".")[:2] in (["controller", "contract"],  # and the
                                                                            ["controller", "numtext"])):  # integer rule
            continue
        top = module.split(".")[0]
        assert top == "__future__" or top in sys.stdlib_module_names, f"{name} imports {module}"


@pytest.mark.parametrize("name", ["controller.cli.main", "controller.cli.common", "controller.cli.client",
                                  "controller.cli.status", "controller.cli.steer", "controller.cli.offline",
                                  "controller.cli.pluginlines"])
def test_specctl_start_up_path_imports_nothing_heavy(name):
    heavy = {m for m in imports(name, ALL[name], top_level_only=True) if m.split(".")[0] in HEAVY}
    assert not heavy, f"{name} imports {heavy} at module level"


@pytest.mark.parametrize("name", sorted(ALL))
def test_no_module_is_a_god_module(name):
    lines = len(ALL[name].read_text().splitlines())
    assert lines <= 320, f"{name}: {lines} lines"
