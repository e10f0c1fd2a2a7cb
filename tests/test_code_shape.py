"""No function in graphdbg/ is over 80 lines: a long function is cut into named steps.

Complexity (over 25) is ruff's C901, configured in pyproject.toml; this test counts lines, which
ruff does not. Lines run from ``def`` (or its first decorator) to the last line of the body,
docstring included; a nested function counts on its own and inside the one that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "graphdbg"
MAX_LINES = 80

# files whose imports inside functions are not checked: the CLI and its commands, whose module comment says why for all
UNCHECKED_IMPORTS = ("ui/cli.py", "ui/commands/")

# functions allowed over the limit (none today; an entry needs a reason beside it)
ALLOWED: set[str] = set()


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            yield f"{prefix}{node.name}", node.end_lineno - first + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def function_lengths(package: Path = PACKAGE) -> dict[str, int]:
    """``{"folder/module.py:Class.method": lines}`` for every function in ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for name, lines in _functions(ast.parse(path.read_text(), filename=str(path))):
            out[f"{rel}:{name}"] = lines
    return out


def test_no_function_is_over_80_lines():
    lengths = function_lengths()
    assert len(lengths) > 500, "the package's functions were not found"
    long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in ALLOWED}
    assert not long, "cut these into named steps (at most 80 lines each): " + ", ".join(
        f"{name} ({n} lines)" for name, n in sorted(long.items(), key=lambda kv: -kv[1]))


def test_the_allow_list_names_only_functions_still_too_long():
    lengths = function_lengths()
    stale = sorted(name for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES)
    if stale:
        pytest.fail(f"no longer over {MAX_LINES} lines (or gone), remove from ALLOWED: {', '.join(stale)}")


def test_the_counter_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"class A:\n    @staticmethod\n    def f():\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    assert function_lengths(tmp_path) == {"long.py:A.f": MAX_LINES + 2}


def _said_why(lines: list[str], node: ast.stmt) -> bool:
    """A comment on the import's last line, or above it in the run of imports it belongs to."""
    if "#" in lines[node.end_lineno - 1]:
        return True
    i = node.lineno - 2
    while i >= 0 and (lines[i].strip().startswith(("#", "import ", "from ")) or not lines[i].strip()):
        if lines[i].strip().startswith("#"):
            return True
        i -= 1
    return False


def lazy_imports_without_a_reason(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith(UNCHECKED_IMPORTS):
            continue
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and not _said_why(lines, node):
                        out.append(f"{rel}:{node.lineno}")
    return sorted(set(out))


def test_an_import_inside_a_function_says_why():
    missing = lazy_imports_without_a_reason()
    assert not missing, "move these imports to the top of the module, or say why they stay (a comment): " + ", ".join(missing)


def test_the_import_check_sees_a_silent_lazy_import(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    import os\n\n    return os\n\n\ndef g():\n    import re  # cheap, but a test\n")
    assert lazy_imports_without_a_reason(tmp_path) == ["m.py:2"]
