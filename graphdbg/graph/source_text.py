"""A printed graph's text as Python can parse it, and the small syntax questions both of its
readers ask (the parser, ``graph/parser.py``, and ``ls``'s scan, ``formats/scan.py``), without
torch (``ls`` reads files without importing the parser)."""

from __future__ import annotations

import ast
import re

_ANGLED_CLASS = re.compile(r"^(\s*class\s+)<(\w+)>(\s*\()", re.M)
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours (ANSI select-graphic-rendition), nothing else


def readable_source(source: str) -> str:
    """``print_readable()`` output as Python can parse it, line for line: terminal colours
    (``colored=True``, a log copied from a terminal) dropped, and the class of a GraphModule
    made from a lambda (Inductor's ``fx_graph_readable.py``: ``class <lambda>(torch.nn.Module):``)
    given a name (``_lambda_``)."""
    if "\x1b" in source:
        source = _SGR.sub("", source)
    if "class <" in source:
        source = _ANGLED_CLASS.sub(r"\1_\2_\3", source)
    return source


def dotted_name(expr: ast.expr) -> str | None:
    """``torch.ops.aten.add`` for the expression that spells it, None for anything else."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])


def is_alias(stmt: ast.stmt) -> bool:
    """``a = b`` or ``a: T = b``: one name bound to another (what fx prints for an alias)."""
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and isinstance(stmt.value, ast.Name)
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Name))
