"""fast/graph/ is one package without import cycles (fast/graph/__init__.py, docs/architecture.md).

The import graph is read from the source of every fast/graph/*.py: every `import` statement counts,
at module level, inside functions and under `if TYPE_CHECKING:` alike, and so does a constant name
given to `importlib.import_module`. An edge goes to the package module named (`from fast.graph import
node` and `import fast.graph.node` both name node.py; a name that is not a module, such as
`from fast.graph import LazyBuffer`, names __init__.py, which imports the others). The graph must be
acyclic: the modules form layers, each importing only modules below it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "fast.graph"
DIRECTORY = Path(__file__).resolve().parents[2] / "fast" / "graph"
INIT = "__init__"


def package_modules(directory: Path = DIRECTORY) -> dict[str, Path]:
    """Module name (file stem) -> path, for every .py file of the package."""
    return {path.stem: path for path in sorted(directory.glob("*.py"))}


def _target(dotted: str, modules: dict[str, Path]) -> str | None:
    """The package module that importing `dotted` names, or None when it is outside the package."""
    if dotted == PACKAGE:
        return INIT
    if not dotted.startswith(PACKAGE + "."):
        return None
    stem = dotted[len(PACKAGE) + 1:].split(".")[0]
    return stem if stem in modules else INIT


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The absolute module of a `from ... import` (relative ones resolved against the package)."""
    if not node.level:
        return node.module or ""
    parts = PACKAGE.split(".")
    if module != INIT:  # a module's package is PACKAGE; so is the __init__'s
        parts = parts + [module]
    base = parts[:len(parts) - node.level]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(source: str, module: str, modules: dict[str, Path]) -> set[str]:
    """The package modules that `source` (the text of package module `module`) imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [_target(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module)
            if origin == PACKAGE:  # `from fast.graph import x`: x is a module, or a name of __init__
                targets = [alias.name if alias.name in modules else INIT for alias in node.names]
            elif origin == "fast" and any(alias.name == "graph" for alias in node.names):
                targets = [INIT]
            else:
                targets = [_target(origin, modules)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            targets = [_target(str(node.args[0].value), modules)]
        found.update(target for target in targets if target is not None and target != module)
    return found


def import_graph(directory: Path = DIRECTORY) -> dict[str, set[str]]:
    """Package module -> the package modules it imports."""
    modules = package_modules(directory)
    return {name: imports_of(path.read_text(), name, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a path that ends where it starts, or None when the graph is acyclic."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = "open"
        path.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        state[name] = "done"
        path.pop()
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)) is not None:
            return cycle
    return None


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules by layer: layer 0 imports no package module, layer k only modules of lower layers."""
    level: dict[str, int] = {}
    while len(level) < len(graph):
        ready = [name for name in graph if name not in level and all(t in level for t in graph[name])]
        assert ready, "cyclic"  # (callers check find_cycle first)
        for name in ready:
            level[name] = max((level[t] + 1 for t in graph[name]), default=0)
    return [sorted(n for n in level if level[n] == k) for k in range(max(level.values()) + 1)]


# ---------------------------------------------------------------- the property

def test_the_graph_package_has_no_import_cycle() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle in {PACKAGE}: {' -> '.join(cycle)} (full graph: {graph})"


def test_the_layers_are_the_documented_ones() -> None:
    """The layering that fast/graph/__init__.py describes (update both together)."""
    assert layers(import_graph()) == [
        ["checks", "keys", "rules", "versions"],
        ["node"],
        ["allreduce", "gather", "operations"],
        ["multi_checks", "products"],
        ["multi"],
        [INIT],
    ]


OLD_MODULES = ("lazy", "lazy_checks", "lazy_ops", "lazy_rules", "lazy_keys", "lazy_versions", "multi", "multi_checks",
               "allreduce")


def test_the_old_modules_are_gone() -> None:
    """No module is left at an old path (fast/lazy.py, ...): the package is the only home. (Files, not
    `find_spec`: an editable install of another checkout may still resolve `fast.lazy` to its copy.)"""
    assert [name for name in OLD_MODULES if (DIRECTORY.parent / f"{name}.py").exists()] == []


def _old_imports(source: str) -> list[str]:
    """The old module paths (`fast.lazy`, ...) that `source` imports."""
    old = {f"fast.{name}" for name in OLD_MODULES}
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name in old]
        elif isinstance(node, ast.ImportFrom) and node.module == "fast" and not node.level:
            found += [f"fast.{alias.name}" for alias in node.names if f"fast.{alias.name}" in old]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [node.module] if ".".join(node.module.split(".")[:2]) in old else []
    return found


def test_nothing_imports_the_old_modules() -> None:
    """Every importer in the repository uses fast.graph (an import of `fast.lazy` could still resolve,
    to another checkout's file, where an editable install is shared: so it is checked by reading)."""
    root = DIRECTORY.parents[1]
    folders = ("fast", "tests", "conformance", "bench", "examples")
    paths = [path for folder in folders for path in sorted((root / folder).rglob("*.py"))]
    offenders = {str(path.relative_to(root)): imports for path in paths
                 if (imports := _old_imports(path.read_text(encoding="utf-8")))}
    assert offenders == {}


def test_the_public_names_still_import() -> None:
    import fast
    from fast.graph import LazyBuffer, MultiLazyBuffer, from_numpy

    assert (fast.LazyBuffer, fast.MultiLazyBuffer, fast.from_numpy) == (LazyBuffer, MultiLazyBuffer, from_numpy)


def test_every_operation_is_in_the_table() -> None:
    """node.OPERATIONS is filled when the package is imported: every entry is the function beside it."""
    from fast.graph import gather, node, operations, products

    homes = {"gather": gather, "matmul": products}
    for name in node.Operations.__slots__:
        module = homes.get(name, operations)
        assert getattr(node.OPERATIONS, name) is getattr(module, name), name


# ---------------------------------------------------------------- the reader itself sees every import

SOURCE = '''
import fast.graph.keys
from fast.graph import rules as r, LazyBuffer
from . import checks
from .node import create
from fast.dtype import dtypes
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from fast.graph.multi import MultiLazyBuffer

def late():
    from fast.graph.versions import stale_reads
    import importlib
    return importlib.import_module("fast.graph.allreduce")
'''


def test_old_imports_are_seen() -> None:
    source = "import fast.lazy\nfrom fast import multi, dtype\nfrom fast.lazy_ops import x\nfrom fast.graph import y\n"
    assert _old_imports(source) == ["fast.lazy", "fast.multi", "fast.lazy_ops"]


def test_imports_of_sees_every_kind_of_import() -> None:
    modules = {name: Path(name) for name in ("keys", "rules", "checks", "node", "multi", "versions", "allreduce",
                                              "operations", INIT)}
    assert imports_of(SOURCE, "operations", modules) == {
        "keys", "rules", INIT, "checks", "node", "multi", "versions", "allreduce"}


@pytest.mark.parametrize(("graph", "cycle"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b", "c"}, "b": set(), "c": {"c2"}, "c2": {"c"}}, ["c", "c2", "c"]),
])
def test_find_cycle(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle
