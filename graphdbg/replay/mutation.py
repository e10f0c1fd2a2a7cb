"""Which of a graph's inputs does it write? Read off the graph, never by running it.

Replay runs a graph several times on the same inputs (eager reference, backend, float64
reference). Only an input the graph writes needs a fresh copy per run; a serving graph's
multi-GiB KV and Mamba caches are mostly only read, and copying them three times is what
ran real replays out of memory.

    >>> mutated_inputs(gm)            # placeholders written in place, through views too
    {3}
    >>> writes(node)                  # the argument nodes one call writes
    [cache]

A write is an in-place method or function (``x.add_(y)``, ``torch.relu_``), ``copy_``,
``x[i] = v`` (``operator.setitem``), augmented assignment on a tensor (``operator.iadd``), an
``out=`` argument, an ``inplace=True`` functional, an op whose schema marks an argument as
written, a Triton kernel wrapper's arguments, or what a stand-in says it writes.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from graphdbg.judge.op_names import call_name
from graphdbg.rebuild.stand_ins import stand_in_writes

# Calls whose result shares storage with their first argument: a write to the result is a
# write to the argument.
VIEW_OPS = frozenset({
    "view", "reshape", "select", "slice", "narrow", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand",
    "expand_as", "contiguous", "flatten", "unflatten", "split", "chunk", "unbind", "getitem", "as_strided", "detach",
    "alias", "view_as", "reshape_as", "movedim", "swapaxes", "diagonal", "unfold", "_unsafe_view", "split_with_sizes",
    "tensor_split", "real", "imag", "view_as_real", "view_as_complex", "T", "mT", "H", "to",
})

_AUGMENTED = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
              operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
              operator.imatmul, operator.setitem}


def writes(node: fx.Node) -> list[Any]:
    """The argument values (fx Nodes among them) that ``node`` writes in place."""
    if node.op not in ("call_function", "call_method"):
        return []
    by_stand_in = stand_in_writes(node) if node.op == "call_function" else None
    if by_stand_in is not None:
        return _flat(by_stand_in)
    name = call_name(node)
    first = node.args[0] if node.args else next(iter(node.kwargs.values()), None)
    out: list[Any] = []
    if "out" in node.kwargs:
        out += _flat(node.kwargs["out"])
    if node.kwargs.get("inplace") is True:
        out.append(first)
    if node.op == "call_function" and node.target in _AUGMENTED:
        out.append(first)
    elif name.endswith("_") and not name.endswith("__"):
        out += _flat(first)  # x.add_(y), torch.relu_(x), torch._foreach_add_([xs], ...)
    elif name in ("__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"):
        out.append(first)
    elif name.startswith("triton_kernel_wrapper_mutation"):
        out += _flat(node.kwargs.get("kwargs") or {})
    else:
        out += _schema_writes(node)
    return [v for v in out if isinstance(v, fx.Node)]


def _schema_writes(node: fx.Node) -> list[Any]:
    target = node.target
    if isinstance(target, torch._ops.OpOverloadPacket):
        target = getattr(target, "default", None)
    if not isinstance(target, torch._ops.OpOverload):
        return []
    found = []
    for i, arg in enumerate(target._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            found += _flat(value)
    return found


def alias_roots(gm: fx.GraphModule) -> dict[fx.Node, fx.Node]:
    """Each node that may share storage with an earlier one, mapped to that earliest node."""
    roots: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and call_name(node) in VIEW_OPS and node.args \
                and isinstance(node.args[0], fx.Node):
            src = node.args[0]
            roots[node] = roots.get(src, src)
    return roots


def mutated_inputs(gm: fx.GraphModule) -> set[int]:
    """Positions of the placeholders of ``gm`` that it (or a nested graph it calls) may write."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    roots = alias_roots(gm)
    found: set[int] = set()

    def mark(value: Any) -> None:
        if isinstance(value, fx.Node):
            root = roots.get(value, value)
            if root in index:
                found.add(index[root])

    for node in gm.graph.nodes:
        if node.op == "call_module":
            sub = gm.get_submodule(str(node.target))
            if isinstance(sub, fx.GraphModule):
                inner = mutated_inputs(sub)
                for i, arg in enumerate(node.args):
                    if i in inner:
                        mark(arg)
            continue
        for value in writes(node):
            mark(value)
    return found


def _flat(value: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(value, dict):
        value = list(value.values())
    fx.node.map_aggregate(value, lambda v: out.append(v) or v)
    return out
