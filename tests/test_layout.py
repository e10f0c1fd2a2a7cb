"""The package's layout: the import contracts in pyproject.toml (``[tool.importlinter]``: the
layers, no import circles, the nouns' imports) hold, and each reader is one file in the
formats layer.

import-linter reads imports from the source, inside functions too (a lazy import is still a
dependency), and leaves ``if TYPE_CHECKING:`` blocks out.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")  # import-linter's graph library: a dev dependency, absent on the GPU machine

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "graphdbg"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def lint_imports(project: Path, package_parent: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with ``project``'s pyproject.toml, on the graphdbg found in ``package_parent``."""
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                           "--no-cache", "--no-logo"], cwd=project, env={**os.environ, "PYTHONPATH": str(package_parent)},
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    r = lint_imports(ROOT, ROOT)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert r.stdout.count(" KEPT") >= 3, r.stdout


def test_the_contracts_fail_on_an_upward_import_a_circle_and_an_unplaced_module(tmp_path):
    """The contracts themselves, on a copy of the package with three faults: a store module
    that imports the CLI's renderer, two store modules that import each other, and a new
    top-level module no layer names."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    copy = tmp_path / "graphdbg"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "store" / "specs.py", "a") as f:
        f.write("\n\ndef _faults():\n    from graphdbg.store import write  # noqa\n    from graphdbg.ui import render  # noqa\n")
    (copy / "unplaced.py").write_text("")
    r = lint_imports(tmp_path, tmp_path)
    assert r.returncode != 0, r.stdout
    assert "graphdbg.store.specs -> graphdbg.ui.render" in r.stdout, r.stdout
    assert "No cycles are allowed in graphdbg.store." in r.stdout and ".specs -> .write" in r.stdout, r.stdout
    assert "graphdbg.unplaced" in r.stdout, r.stdout


def test_nothing_in_the_package_imports_the_facade_or_reaches_into_capture():
    graph = grimp.build_graph("graphdbg", exclude_type_checking_imports=True, cache_dir=None)
    facade = sorted(graph.find_modules_that_directly_import("graphdbg"))
    assert facade == [], f"modules that import the graphdbg facade: {facade}"
    allowed = ("graphdbg.capture", "graphdbg.ui.commands.capture")
    into_capture = sorted((m, d) for m in graph.modules for d in graph.find_modules_directly_imported_by(m)
                          if d.startswith("graphdbg.capture") and not (m == "graphdbg" or m.startswith(allowed)))
    assert into_capture == [], f"imports of capture/ from outside it: {into_capture}"


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
