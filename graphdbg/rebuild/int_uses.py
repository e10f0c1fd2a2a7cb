"""The uses of an integer input told apart by the name of what uses it: ``synthesize.IndexUses``
follows them to plan the input's values, and ``ls``'s scan (``formats/scan.shard_rank``) sends a
printed graph whose integer input has one of them to the full reader. Without torch, so that
both read the same lists."""

from __future__ import annotations

from typing import Any, Callable, Iterable

SAME_VALUES_METHODS = frozenset({
    "view", "reshape", "flatten", "unsqueeze", "squeeze", "contiguous", "long", "int", "to", "clone", "expand", "expand_as",
    "repeat", "t", "permute", "transpose", "narrow", "select", "view_as", "reshape_as", "detach", "type", "cuda", "cpu"})
SAME_VALUES_FUNCTIONS = frozenset({
    "flatten", "reshape", "squeeze", "unsqueeze", "clone", "narrow", "select", "t", "permute", "transpose", "detach",
    "contiguous", "_to_copy", "view", "_unsafe_view", "expand", "slice", "alias", "repeat"})
INDEX_METHODS = frozenset({  # t.index_select(dim, x): x indexes t along dim
    "index_select", "gather", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "scatter",
    "scatter_", "scatter_add", "scatter_add_"})
INDEX_FUNCTIONS = frozenset({"index_select", "gather", "index_add", "index_copy", "scatter", "scatter_add"})
SUBSCRIPT_METHODS = frozenset({"index_put", "index_put_"})  # t.index_put_((x,), v)
SUBSCRIPT_FUNCTIONS = frozenset({"getitem", "setitem", "index", "index_put", "index_put_", "_index_put_impl_"})  # t[x]
SHIFTS = frozenset({"add", "sub", "iadd", "isub"})  # x + c: the same values shifted
# every use IndexUses follows (embedding(x, weight): x indexes weight's rows)
FOLLOWED_METHODS = SAME_VALUES_METHODS | INDEX_METHODS | SUBSCRIPT_METHODS
FOLLOWED_FUNCTIONS = SAME_VALUES_FUNCTIONS | INDEX_FUNCTIONS | SUBSCRIPT_FUNCTIONS | {"embedding"}
FLIPPED = {"ge": "le", "gt": "lt", "lt": "gt", "le": "ge"}  # the comparisons, and each as its operands swapped read it


def tested_bound(kind: str, other: int) -> tuple[str, int]:
    """``x >= other`` (``kind`` "ge", or "gt", "lt", "le") as the bound it tests: ``("low", first
    value in range)`` or ``("high", first value past it)``."""
    return ("low", other + (kind == "gt")) if kind in ("ge", "gt") else ("high", other + (kind == "le"))


def settle(tests: dict[Any, tuple], partners: Callable[[Any], Iterable[Any]]) -> tuple[tuple | None, tuple | None]:
    """The range a graph tests a value against, as the low and the high test chosen (each
    ``(side, bound, ...)`` of ``tests``, by node), either None where there is none: the first low
    test ``&``-joined to a higher high one (``partners(node)``: the nodes joined to it; SGLang's
    ``(x >= start) & (x < end)`` shard masks, a graph may test several, some empty), else the
    tightest low and high of all."""
    for node, low in tests.items():
        for other in partners(node) if low[0] == "low" else ():
            high = tests.get(other)
            if high is not None and high[0] == "high" and low[1] < high[1]:
                return low, high
    lows = [t for t in tests.values() if t[0] == "low"]
    highs = [t for t in tests.values() if t[0] == "high"]
    return max(lows, key=lambda t: t[1:]) if lows else None, min(highs, key=lambda t: t[1:]) if highs else None
