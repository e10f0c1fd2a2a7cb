"""Symbolic sizes evaluated without code, and element counts bounded: torch-free, so that reading
a manifest (``store.schema``, ``graphdbg ls``) does not import torch. ``store.specs`` re-exports these."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Union

from graphdbg.errors import GraphdbgError

Dim = Union[int, str]

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.Div: operator.truediv,
}
_FUNCS = {"Max": max, "Min": min, "max": max, "min": min, "FloorDiv": operator.floordiv,
          "CeilDiv": lambda a, b: -(-a // b), "Mod": operator.mod, "PythonMod": operator.mod}

# Bounds of the size evaluator: sizes come from untrusted files (`9**9**9`, `2**2**100`), and
# one unbounded power or product hangs the process. Real sizes are far inside these.
MAX_EXPR_CHARS = 512
MAX_EXPR_NODES = 128
MAX_MAGNITUDE = 1 << 64  # any value met while evaluating
MAX_NUMEL = 1 << 36  # elements of one tensor graphdbg will make (as graphdbg.store.schema)


def eval_dim(dim: Dim, env: dict[str, int]) -> int:
    """Evaluate a symbolic dim like ``"8*s27"`` against concrete symbol values.

    Only arithmetic on names and integers is accepted; nothing is exec'd, and every value met
    on the way is bounded, so a hostile ``9**9**9`` is refused at once instead of computed.

        >>> eval_dim("8*s27", {"s27": 4})
        32
    """
    if isinstance(dim, bool):
        raise GraphdbgError(f"symbolic size {dim!r} is not a number")
    if isinstance(dim, int):
        return _bounded(dim, dim)
    text = str(dim)
    if len(text) > MAX_EXPR_CHARS:
        raise GraphdbgError(f"symbolic size {text[:40]!r}... is {len(text)} characters long (at most {MAX_EXPR_CHARS})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise GraphdbgError(f"cannot read symbolic size {shortened(text)}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_EXPR_NODES:
        raise GraphdbgError(f"symbolic size {shortened(text)} is too complex (more than {MAX_EXPR_NODES} terms)")

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return _bounded(node.value, text)
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise GraphdbgError(f"symbolic size {shortened(text)} uses {node.id}, which has no value")
            return _bounded(env[node.id], text)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow):
                _check_power(left, right, text)
            return _bounded(_BINOPS[type(node.op)](left, right), text)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
            return _bounded(_FUNCS[node.func.id](*[ev(a) for a in node.args]), text)
        raise GraphdbgError(f"cannot evaluate symbolic size {shortened(text)}")

    try:
        value = ev(tree.body)
        return int(value)
    except GraphdbgError:
        raise
    except (ArithmeticError, TypeError, ValueError) as e:  # 1//0, Max(), int(nan)
        raise GraphdbgError(f"cannot evaluate symbolic size {shortened(text)} ({type(e).__name__})") from None


def _check_power(base: int | float, exp: int | float, text: str) -> None:
    if abs(base) <= 1:
        return
    # |base| ** exp stays under MAX_MAGNITUDE iff exp * log2|base| < 64; checked before computing
    if exp > 64 or exp * math.log2(abs(base)) > MAX_MAGNITUDE.bit_length():
        raise GraphdbgError(f"symbolic size {shortened(text)} is too large (more than 2**64)")


def _bounded(value: Any, text: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise GraphdbgError(f"symbolic size {shortened(str(text))} is not finite")
    if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
        raise GraphdbgError(f"symbolic size {shortened(str(text))} is too large (more than 2**64)")
    return value


def shortened(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


def check_numel(shape: list[int], what: str = "tensor") -> int:
    """The element count of ``shape``; GraphdbgError if a size is negative or the count is past
    MAX_NUMEL (statistics of a 10**12-element tensor must not make replay build it)."""
    n = 1
    for d in shape:
        if d < 0:
            raise GraphdbgError(f"{what} has a negative size in {shape}")
        n *= d
        if n > MAX_NUMEL:
            raise GraphdbgError(f"{what} of shape {shortened(str(shape))} has more than 2**36 elements; graphdbg will not make it")
    return n
