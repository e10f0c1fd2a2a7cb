"""The package's layout: no import circles, each reader one file in the formats layer.

Imports are read from the source (``ast``), inside functions too, because a lazy import
is still a dependency; only ``if TYPE_CHECKING:`` blocks are left out. Importing
``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so those count as edges too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "graphdbg"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool, known: set[str]) -> set[str]:
    out: set[str] = set()

    def add(name: str) -> None:
        # the module itself, or the package it is in when the name is an attribute
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)
            parent = name.rpartition(".")[0]
            while parent:
                # a module inside a package is imported while that package is already running
                if parent in known and not module.startswith(parent + "."):
                    out.add(parent)
                parent = parent.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                add(f"{prefix}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(module)
    return {m for m in out if m.startswith("graphdbg")}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py") if "site" not in p.relative_to(PKG).parts}
    known = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py", known)
        # a package's parent packages run first, but that is not an import of the parent
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _without_root(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    # ``graphdbg/__init__`` is the public surface (load, capture, compare): it sits above every
    # layer, and every ``import graphdbg.x`` runs it first, which is not a dependency of x on it.
    return {m: {d for d in deps if d != "graphdbg"} for m, deps in graph.items()}


def test_no_import_circles():
    cycles = find_cycles(_without_root(import_graph()))
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_nouns_do_not_import_render_or_readers():
    graph = import_graph()
    for noun in ("graphdbg.dump", "graphdbg.case", "graphdbg.replay.outcome"):
        bad = {d for d in graph[noun] if d == "graphdbg.render" or d.startswith("graphdbg.formats.")}
        assert not bad, f"{noun} imports {sorted(bad)}"


def test_each_reader_is_one_file_in_formats():
    from graphdbg.formats import readers

    names = {r.name: r for r in readers()}
    assert {"dump", "printed_graph", "torch_minifier", "compile_cache"} <= set(names)
    for reader in names.values():
        assert reader.module.startswith("graphdbg.formats."), reader


def test_one_dump_class_serves_every_source():
    """Readers return ``graphdbg.dump.Dump`` itself; what differs per format is its manifest and
    its ``Contents``. Checked at run time (every reader imported) and in the source (a class
    whose bases name ``Dump``, in any module, imported or not)."""
    import importlib
    import pkgutil

    import graphdbg.formats as formats
    from graphdbg.dump import Dump
    from graphdbg.formats import readers

    readers()
    for info in pkgutil.iter_modules(formats.__path__, "graphdbg.formats."):
        importlib.import_module(info.name)

    def subclasses(cls: type) -> list[type]:
        return [s for sub in cls.__subclasses__() for s in (sub, *subclasses(sub))]

    assert [f"{c.__module__}.{c.__qualname__}" for c in subclasses(Dump)] == []
    declared = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases}
                if "Dump" in bases:
                    declared.append(f"{_module_name(path)}.{node.name}")
    assert declared == []
