"""The released SGLang wheels the contract tests read (parsed with ast, never imported).

RELEASES is the one list of versions they cover: every release of the supported range
(controller.contract.SUPPORTED). SPEC_CONTROLLER_SGLANG_VERSIONS=0.5.17,0.5.23 narrows a run.
Wheels are downloaded once (`pip download --no-deps`, 12-40 MB each) into .cache/sglang-wheels
(ignored by git; SGLANG_WHEEL_CACHE elsewhere)."""
from __future__ import annotations

import ast
import fcntl
import functools
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

RELEASES = ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21",
            "0.5.22", "0.5.23")
ENV_VERSIONS = "SPEC_CONTROLLER_SGLANG_VERSIONS"
VERSIONS = [v.strip() for v in os.environ.get(ENV_VERSIONS, ",".join(RELEASES)).split(",") if v.strip()]
CACHE = Path(os.environ.get("SGLANG_WHEEL_CACHE", Path(__file__).resolve().parent.parent / ".cache" / "sglang-wheels"))

Def = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def wheel(version: str) -> Path:
    """The cached wheel, downloaded first if needed. The tests run on several pytest-xdist workers: one
    downloads (under a lock, into a folder of its own, then renamed in) while the others wait for it."""
    pattern = f"sglang-{version}-*.whl"
    found = sorted(CACHE.glob(pattern))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".lock-{version}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = sorted(CACHE.glob(pattern))
        if not found:
            with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
                res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                      f"sglang=={version}", "-d", tmp], capture_output=True, text=True, timeout=600)
                assert res.returncode == 0, f"pip download sglang=={version} failed: {res.stderr[-500:]}"
                for whl in Path(tmp).glob(pattern):
                    os.replace(whl, CACHE / whl.name)
            found = sorted(CACHE.glob(pattern))
    assert found, f"pip download sglang=={version} left no {pattern} in {CACHE}"
    return found[0]


def params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


class Source:
    """The sglang package of one wheel, module by module (each parsed once)."""

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

    def node(self, dotted: str) -> ast.AST:
        tree, rest = self.locate(dotted)
        node: ast.AST = tree
        for name in rest:
            match = [n for n in getattr(node, "body", []) if isinstance(n, Def) and n.name == name]
            assert match, f"{dotted}: {name} not found"
            node = match[-1]
        return node

    def function(self, dotted: str) -> ast.FunctionDef:
        node = self.node(dotted)
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)), f"{dotted} is not a function"
        return node

    def text(self, dotted: str) -> str:
        return ast.unparse(self.node(dotted)).replace('"', "'")

    def class_attributes(self, dotted: str) -> set[str]:
        """Attributes a class sets on self in any of its methods, its fields, methods and properties."""
        cls = self.node(dotted)
        assert isinstance(cls, ast.ClassDef), f"{dotted} is not a class"
        out = {n.name for n in cls.body if isinstance(n, Def)}
        out |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for node in ast.walk(cls):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]   # a, b = ...
            out |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                    and t.value.id == "self"}
        return out

    def module_names(self, dotted: str) -> set[str]:
        """Names a module defines or imports at its top level (inside top-level if/try blocks too)."""
        tree, rest = self.locate(dotted)
        assert not rest, f"{dotted} is not a module"
        out: set[str] = set()
        pending = list(tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, Def):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.If, ast.Try)):
                pending += node.body + node.orelse + getattr(node, "finalbody", []) + \
                    [n for h in getattr(node, "handlers", []) for n in h.body]
        return out


@functools.lru_cache(maxsize=None)
def source(version: str) -> Source:
    """Each wheel opened once per test session (its parsed modules kept)."""
    return Source(wheel(version))


def name_problems(src: Source, callables: dict[str, tuple[str, ...]], attributes: dict[str, tuple[str, ...]],
                  module_names: dict[str, tuple[str, ...]] | None = None, facts=(), exact=()) -> list[str]:
    """Every entry a wheel does not bear out: callables' parameters (in this order; all of them, exactly,
    for the names in `exact`), attributes set by each class, names each module defines, and quoted facts
    (function, text, why; a text starting with '!' must be absent)."""
    out: list[str] = []
    for dotted, expected in callables.items():
        try:
            names = params(src.function(dotted))
        except AssertionError as e:
            out.append(str(e))
            continue
        if (names if dotted in exact else [n for n in names if n in expected]) != list(expected):
            out.append(f"{dotted}{tuple(names)} != {expected}")
    for cls, names in attributes.items():
        try:
            have = src.class_attributes(cls)
        except AssertionError as e:
            out.append(str(e))
            continue
        out += [f"{cls}.{n} is never set" for n in names if n not in have]
    for module, names in (module_names or {}).items():
        out += [f"{module} has no {n}" for n in names if n not in src.module_names(module)]
    for fn, quote, why in facts:
        try:
            text = src.text(fn)
        except AssertionError as e:
            out.append(str(e))
            continue
        absent = quote.startswith("!")
        if (quote[1:] in text) if absent else (quote.replace('"', "'") not in text):
            out.append(f"{fn}: {'has' if absent else 'lacks'} {quote!r} ({why})")
    return out

