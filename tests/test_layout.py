"""The package's layout: no import circles, each reader one file in the formats layer.

Imports are read from the source (``ast``), inside functions too, because a lazy import
is still a dependency; only ``if TYPE_CHECKING:`` blocks are left out. Importing
``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so those count as edges too.
"""

from __future__ import annotations

import ast
import re
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


ARCHITECTURE = PKG.parent / "ARCHITECTURE.md"


def layers_from_architecture(text: str | None = None) -> tuple[list[tuple[str, list[str]]], set[tuple[str, str]]]:
    """The layer table of ARCHITECTURE.md, bottom first, and its list of upward imports."""
    text = ARCHITECTURE.read_text() if text is None else text
    layers: list[tuple[str, list[str]]] = []
    upward: set[tuple[str, str]] = set()
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells[:2] == ["layer", "modules"]:
            in_table = True
            continue
        if in_table and cells and not set(cells[0]) <= set("- "):
            layers.append((cells[0], re.findall(r"`(graphdbg[\w.]*)`", cells[1])))
        elif in_table and not cells:
            in_table = False
        m = re.match(r"^- `(graphdbg[\w.]*)` → `(graphdbg[\w.]*)`", line)
        if m:
            upward.add((m.group(1), m.group(2)))
    return layers, upward


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int | None:
    """The index of the row whose most specific entry names ``module`` or a package holding it."""
    best: tuple[int, int] | None = None
    for i, (_, names) in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (i, len(name))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, list[str]]]) -> set[tuple[str, str]]:
    out = set()
    for module, deps in graph.items():
        for dep in deps:
            if layer_of(dep, layers) > layer_of(module, layers):
                out.add((module, dep))
    return out


def test_no_import_circles():
    # the listed upward imports are lazy by design (ARCHITECTURE.md); every other edge counts
    _, declared = layers_from_architecture()
    graph = {m: {d for d in deps if (m, d) not in declared and (m, d.rpartition(".")[0]) not in declared}
             for m, deps in import_graph().items()}
    cycles = find_cycles(graph)
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_every_module_has_a_layer_in_architecture_md():
    layers, _ = layers_from_architecture()
    assert [name for name, _ in layers][:2] == ["base", "judge"] and layers[-1][0] == "facade"
    unplaced = sorted(m for m in import_graph() if layer_of(m, layers) is None)
    assert unplaced == [], f"modules no row of ARCHITECTURE.md's layer table names: {unplaced}"


def test_imports_follow_the_layer_table():
    """An import that goes up a layer is a failure unless ARCHITECTURE.md lists it; a listed one
    that the code no longer makes is a failure too, so the document stays true."""
    layers, declared = layers_from_architecture()
    # a package's own __init__ is run by the import of any module in it: not an edge upward
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in import_graph().items()}
    found = {(m, d) for m, d in upward_imports(graph, layers) if not d.startswith(m + ".")}
    # ``from graphdbg.ui.render import x`` also names the package ``graphdbg.ui``: one import
    found = {(m, d) for m, d in found if not any(m2 == m and d2.startswith(d + ".") for m2, d2 in found)}
    assert sorted(found - declared) == [], "imports that go up a layer, not listed in ARCHITECTURE.md"
    assert sorted(declared - found) == [], "ARCHITECTURE.md lists upward imports the code no longer makes"


def test_the_layer_check_fails_on_an_import_that_goes_up():
    """The check itself, on a made-up table and graph: a store module that imports the CLI."""
    text = ("| layer | modules | holds |\n| --- | --- | --- |\n| store | `graphdbg.store` | x |\n"
            "| ui | `graphdbg.ui` | y |\n\n- `graphdbg.ui.cli` → `graphdbg.store.x`: fine, it goes down\n")
    layers, declared = layers_from_architecture(text)
    assert layers == [("store", ["graphdbg.store"]), ("ui", ["graphdbg.ui"])]
    graph = {"graphdbg.store.manifest": {"graphdbg.ui.cli"}, "graphdbg.ui.cli": {"graphdbg.store.manifest"}}
    assert upward_imports(graph, layers) == {("graphdbg.store.manifest", "graphdbg.ui.cli")}


def test_nothing_in_the_package_imports_the_facade_or_reaches_into_capture():
    graph = import_graph()
    facade = sorted(m for m, deps in graph.items() if "graphdbg" in deps)
    assert facade == [], f"modules that import the graphdbg facade: {facade}"
    allowed = ("graphdbg.capture", "graphdbg.ui.cli")
    into_capture = sorted((m, d) for m, deps in graph.items() for d in deps
                          if d.startswith("graphdbg.capture") and not (m == "graphdbg" or m.startswith(allowed)))
    assert into_capture == [], f"imports of capture/ from outside it: {into_capture}"


def test_nouns_do_not_import_render_or_readers():
    graph = import_graph()
    for noun in ("graphdbg.dump", "graphdbg.case", "graphdbg.replay.outcome"):
        bad = {d for d in graph[noun] if d == "graphdbg.ui.render" or d.startswith("graphdbg.formats.")}
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
