"""How a graph uses the result of a call, followed across the submodules of a split graph.

A stand-in for a missing op must return what the graph reads from it. Thunder's splitter
cuts a graph so that a tuple made in one piece is indexed in the next:

    inductor_3 = self.inductor_3(x, residual)          # returns the op's tuple as it is
    thunder_4 = self.thunder_4(inductor_3, w)          # getitem = inductor_3[0]; getitem_1 = ...[1]

``ItemUses(root).of(node)`` finds the ``getitem`` indices read from ``node``'s value anywhere
(in its own graph, through ``return`` into the calling graph, and into the pieces it is passed
to), each with its annotation where the printed graph gave one.

    >>> ItemUses(gm).of(node)
    {0: TensorSpec('bf16', [1, 2880]), 1: TensorSpec('bf16', [1, 2880])}
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.store.specs import TensorSpec

_MAX_HOPS = 16  # modules a value may cross; a split graph nests two or three deep


class ItemUses:
    """The getitem uses of values in ``root`` and the GraphModules nested in it."""

    def __init__(self, root: fx.GraphModule):
        # each nested module's callers: (calling module, call_module node)
        self._callers: dict[int, list[tuple[fx.GraphModule, fx.Node]]] = {}
        for mod in root.modules():
            if not isinstance(mod, fx.GraphModule):
                continue
            for node in mod.graph.nodes:
                if node.op == "call_module":
                    child = _submodule(mod, str(node.target))
                    if isinstance(child, fx.GraphModule):
                        self._callers.setdefault(id(child), []).append((mod, node))
        self._owner = {id(m.graph): m for m in root.modules() if isinstance(m, fx.GraphModule)}

    def of(self, node: fx.Node) -> dict[int, TensorSpec | None] | None:
        """Index -> annotation of every ``getitem`` read of ``node``'s value; None when none is."""
        items: dict[int, TensorSpec | None] = {}
        self._follow(node, items, set(), 0)
        return items or None

    def _follow(self, value: fx.Node, items: dict[int, TensorSpec | None], seen: set[int], hops: int) -> None:
        if id(value) in seen or hops > _MAX_HOPS:
            return
        seen.add(id(value))
        mod = self._owner.get(id(value.graph))
        for user in value.users:
            if _is_getitem(user) and user.args[0] is value and isinstance(user.args[1], int):
                spec = user.meta.get("graphdbg_spec")
                if items.get(user.args[1]) is None:
                    items[user.args[1]] = spec if isinstance(spec, TensorSpec) else None
            elif user.op == "call_module" and mod is not None:
                self._into_piece(mod, user, value, items, seen, hops)
            elif user.op == "output" and mod is not None:
                self._out_of_piece(mod, user, value, items, seen, hops)

    def _into_piece(self, mod: fx.GraphModule, call: fx.Node, value: fx.Node, items: dict, seen: set, hops: int) -> None:
        child = _submodule(mod, str(call.target))
        if not isinstance(child, fx.GraphModule):
            return
        placeholders = [n for n in child.graph.nodes if n.op == "placeholder"]
        for position, arg in enumerate(call.args):
            if arg is value and position < len(placeholders):
                self._follow(placeholders[position], items, seen, hops + 1)

    def _out_of_piece(self, mod: fx.GraphModule, output: fx.Node, value: fx.Node, items: dict, seen: set, hops: int) -> None:
        result = output.args[0] if output.args else None
        for _, call in self._callers.get(id(mod), []):
            if result is value:  # the piece returns the value itself: the call is the value
                self._follow(call, items, seen, hops + 1)
            elif isinstance(result, (tuple, list)):
                for k, r in enumerate(result):
                    if r is value:  # returned as item k: the caller's call[k] is the value
                        for u in call.users:
                            if _is_getitem(u) and u.args[1] == k:
                                self._follow(u, items, seen, hops + 1)


def outputs_as_used(node: fx.Node, uses: dict[int, TensorSpec | None] | None,
                    device: torch.device) -> tuple[Callable[..., Any], str]:
    """(stand-in function, what it returns) for a missing op: shaped by its own line's annotation,
    else a tuple as long as the graph indexes, each item by its use's annotation; an item nothing
    annotates is a copy of the op's tensor argument in the same position, and the line says so."""
    own = node.meta.get("graphdbg_spec")
    if isinstance(own, TensorSpec):
        shape, dtype = _concrete(own, node)
        return (lambda *a, **k: torch.zeros(shape, dtype=dtype, device=device)), f"returns zeros {own.annotation()}"
    if not uses:
        return _does_nothing, "in-place or unused result, does nothing"
    made: list[tuple[list[int], torch.dtype] | None] = []
    said: list[str] = []
    for i in range(max(uses) + 1):
        spec = uses.get(i)
        if isinstance(spec, TensorSpec):
            made.append(_concrete(spec, node))
            said.append(f"zeros {spec.annotation()}")
        else:
            made.append(None)
            said.append(f"a copy of tensor argument {i} (nothing tells item {i}'s dtype and shape)")

    def items(*args: Any, **kwargs: Any) -> tuple:
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        out = []
        for i, m in enumerate(made):
            if m is not None:
                out.append(torch.zeros(m[0], dtype=m[1], device=device))
            elif tensors:
                out.append(tensors[min(i, len(tensors) - 1)].clone())
            else:
                raise GraphdbgError(f"node {node.name}: item {i} of its result has no annotation and the call no tensor argument")
        return tuple(out)

    return items, f"returns a tuple of {len(made)} as the graph indexes it: " + "; ".join(said)


def _concrete(spec: TensorSpec, node: fx.Node) -> tuple[list[int], torch.dtype]:
    if not spec.is_static():
        raise GraphdbgError(f"node {node.name}: a stand-in needs a static annotation, got {spec.annotation()}")
    return spec.concrete_shape(), spec.torch_dtype


def _does_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _is_getitem(node: fx.Node) -> bool:
    return node.op == "call_function" and (node.target is operator.getitem or getattr(node.target, "__name__", "") == "getitem") \
        and len(node.args) == 2


def _submodule(mod: fx.GraphModule, target: str) -> Any:
    try:
        return mod.get_submodule(target)
    except AttributeError:
        return None
