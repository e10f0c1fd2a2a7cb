"""Outputs that hold only memory nobody wrote: a verdict must not rest on them.

A graph may return a buffer made by ``torch.empty`` that a kernel elsewhere fills (gpt-oss's
fp8 quantisation outputs and top-k scratch buffers inside nested Thunder pieces). Replay turns
such allocations into zeros where it can (``zeroed_allocation``), but that rewrite reaches only
the graph eager runs: a backend that compiles its own copy (Inductor, or a piece compiled by
the user's backend) returns whatever bytes its allocator had. Such an output is left out of the
comparison, and the verdict names it.

    >>> uninitialised_outputs(gm)
    {1: 'empty', 3: 'inductor_0.new_empty'}

An output counts only when every path to it ends in an allocation that nothing may write:
no in-place method, ``out=`` argument, mutating op schema, custom op or stand-in that writes,
in this graph or in the pieces the buffer is passed to.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.judge.op_names import call_name, op_name, op_parts

_ALLOCATORS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
_VIEWS = {"view", "reshape", "unsqueeze", "squeeze", "flatten", "contiguous", "transpose", "permute", "t",
          "expand", "narrow", "select", "unflatten", "as_strided", "detach", "alias", "getitem", "view_as"}
_MAX_DEPTH = 8


def uninitialised_outputs(gm: fx.GraphModule) -> dict[int, str]:
    """Output leaf index (``pytree.tree_leaves`` order) -> the allocation it holds, for every
    output that flows only from uninitialised memory."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    found: dict[int, str] = {}
    for i, leaf in enumerate(pytree.tree_leaves(output.args[0])):
        if isinstance(leaf, fx.Node):
            source = _source(gm, leaf, "", 0)
            if source is not None:
                found[i] = source
    return found


def set_aside(expected: Any, actual: Any, indices: set[int]) -> tuple[Any, Any]:
    """``expected`` and ``actual`` with the leaves at ``indices`` made None in both, so the
    other outputs keep their indices."""
    def blank(tree: Any) -> Any:
        leaves, spec = pytree.tree_flatten(tree)
        return pytree.tree_unflatten([None if i in indices else v for i, v in enumerate(leaves)], spec)

    return blank(expected), blank(actual)


def describe(found: dict[int, str]) -> str:
    shown = ", ".join(f"{i} ({name})" for i, name in sorted(found.items())[:8]) + (" ..." if len(found) > 8 else "")
    return (f"outputs not compared: {shown} hold only uninitialised memory (torch.empty-style allocations "
            "nothing in the graph writes), whose bytes differ from run to run")


def _source(gm: fx.GraphModule, node: fx.Node, prefix: str, depth: int) -> str | None:
    """The allocation ``node``'s value is, when it is one (or a view of one) nothing writes."""
    if depth > _MAX_DEPTH:
        return None
    if _is_allocation(node):
        return f"{prefix}{node.name}" if not _written(gm, node, depth) else None
    if call_name(node, overload=True) in _VIEWS and node.args and isinstance(node.args[0], fx.Node):
        if call_name(node, overload=True) == "getitem" and node.args[0].op == "call_module":  # item k of a piece's result
            found = _from_piece(gm, node.args[0], node.args[1], prefix, depth)
            return found if found is not None and not _written(gm, node, depth) else None
        base = _source(gm, node.args[0], prefix, depth)
        return base if base is not None and not _written(gm, node, depth) else None
    if node.op == "call_module":
        return _from_piece(gm, node, None, prefix, depth)
    return None


def _from_piece(gm: fx.GraphModule, call: fx.Node, item: Any, prefix: str, depth: int) -> str | None:
    """The allocation a nested piece returns (as its whole result, or as ``item`` of it)."""
    child = _submodule(gm, str(call.target))
    if not isinstance(child, fx.GraphModule):
        return None
    out = next(n for n in reversed(child.graph.nodes) if n.op == "output")
    result = out.args[0]
    if item is not None:
        if not isinstance(result, (tuple, list)) or not isinstance(item, int) or not -len(result) <= item < len(result):
            return None
        result = result[item]
    if not isinstance(result, fx.Node):
        return None
    found = _source(child, result, f"{prefix}{call.target}.", depth + 1)
    # the whole result: its users here may write it; an item's users are the caller's to check
    return found if found is not None and (item is not None or not _written(gm, call, depth)) else None


def _written(gm: fx.GraphModule, node: fx.Node, depth: int) -> bool:
    """Whether anything may write ``node``'s memory: its users, its views' users, the pieces it
    is passed to."""
    for user in node.users:
        if user.op == "output":
            continue
        if user.op == "call_module":
            if _written_in_piece(gm, user, node, depth):
                return True
            continue
        if call_name(user, overload=True) in _VIEWS and user.args and user.args[0] is node:
            if _written(gm, user, depth):
                return True
            continue
        if _may_write(user, node):
            return True
    return False


def _written_in_piece(gm: fx.GraphModule, call: fx.Node, node: fx.Node, depth: int) -> bool:
    child = _submodule(gm, str(call.target))
    if not isinstance(child, fx.GraphModule) or depth >= _MAX_DEPTH or node in call.kwargs.values():
        return True  # what it does with the buffer can't be seen: it may write it
    placeholders = [n for n in child.graph.nodes if n.op == "placeholder"]
    return any(arg is node and (i >= len(placeholders) or _written(child, placeholders[i], depth + 1))
               for i, arg in enumerate(call.args))


def _may_write(user: fx.Node, node: fx.Node) -> bool:
    """Whether the call ``user`` may write its argument ``node``."""
    if user.op == "call_method":
        return str(user.target).endswith("_") and bool(user.args) and user.args[0] is node or _passed_as_out(user, node)
    if user.op != "call_function":
        return True
    target = user.target
    writes = getattr(target, "graphdbg_writes", None)  # a stand-in says what it writes
    if writes is not None:
        return getattr(target, "graphdbg_kind", None) != "zeroed_allocation" and node in _flat(writes(user))
    if _passed_as_out(user, node):
        return True
    if target is operator.getitem or getattr(target, "__module__", None) in ("_operator", "operator", "math"):
        return False
    if isinstance(target, torch._ops.OpOverload):
        return _schema_writes(target, user, node)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return any(_schema_writes(getattr(target, o), user, node) for o in target.overloads())
    if getattr(target, "__module__", None) in ("torch", "torch._C._VariableFunctions", "torch.nn.functional", "torch._C._nn"):
        name = getattr(target, "__name__", "")
        return name.endswith("_") and bool(user.args) and user.args[0] is node
    return True  # a custom op, a higher-order op (a Triton kernel), a function graphdbg doesn't know


def _schema_writes(op: Any, user: fx.Node, node: fx.Node) -> bool:
    args = op._schema.arguments
    for i, arg in enumerate(args):
        given = user.args[i] if i < len(user.args) else user.kwargs.get(arg.name)
        if node in _flat(given) and arg.alias_info is not None and arg.alias_info.is_write:
            return True
    return False


def _passed_as_out(user: fx.Node, node: fx.Node) -> bool:
    return any(node in _flat(v) for k, v in user.kwargs.items() if k == "out" or k.startswith("out_"))


def _is_allocation(node: fx.Node) -> bool:
    if node.op == "call_function" and getattr(node.target, "graphdbg_kind", None) == "zeroed_allocation":
        return True
    name = call_name(node, overload=True)
    if node.op == "call_method":
        return name in ("new_empty", "new_empty_strided")
    if op_parts(node.target) is not None:  # an OpOverload or an OpOverloadPacket
        return op_name(node.target) in _ALLOCATORS and str(getattr(node.target, "namespace", "aten")) == "aten"
    return node.op == "call_function" and name in _ALLOCATORS and getattr(torch, name, None) is node.target


def _flat(value: Any) -> list[Any]:
    out: list[Any] = []
    fx.node.map_aggregate(value, lambda v: out.append(v) or v)
    return out


def _submodule(gm: fx.GraphModule, target: str) -> Any:
    try:
        return gm.get_submodule(target)
    except AttributeError:
        return None


def set_aside_uninitialised(outcome: Any, gm: fx.GraphModule, expected: Any, actual: Any) -> tuple[Any, Any]:
    """What ``replay.run`` judges: the outputs without those that hold only uninitialised memory,
    which ``outcome`` names (among its stand-ins, where every verdict lists what it didn't see)."""
    try:
        found = uninitialised_outputs(gm)
    except Exception:  # the data flow could not be followed: compare everything, as before
        return expected, actual
    if not found:
        return expected, actual
    line = describe(found)
    if line not in outcome.stand_ins:
        outcome.stand_ins.append(line)
    return set_aside(expected, actual, set(found))
