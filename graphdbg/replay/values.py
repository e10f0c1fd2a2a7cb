"""Every node's value in one eager run: the ground truth that cut points and bisection read.

    >>> rec = ValueRecorder(case.gm)
    >>> out = rec.run(*case.inputs)
    >>> rec.values["rsqrt"].shape      # any intermediate, by node name
    torch.Size([2, 8, 1])

An ``fx.Interpreter`` subclass, so each node kind is run by fx's own method and only the
recording is ours. ``transform`` maps each value as it is stored (``.detach().clone()`` by
default, so an in-place op later in the graph can't change a recorded value).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.graph.allow_list import check_graph_module

COMPUTE_OPS = ("call_function", "call_method", "call_module", "get_attr")  # the nodes that compute a value


def _snapshot(value: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), value)


class ValueRecorder(fx.Interpreter):
    """Runs a GraphModule node by node and keeps each node's value under its name."""

    def __init__(self, gm: fx.GraphModule, transform: Callable[[Any], Any] = _snapshot):
        super().__init__(gm, garbage_collect_values=False)
        self.values: dict[str, Any] = {}
        self.order: list[str] = []
        self._transform = transform

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "output":
            self.values[n.name] = self._transform(result)
            self.order.append(n.name)
        return result


def record_values(gm: fx.GraphModule, inputs: list[Any], *, grad: bool = False) -> dict[str, Any]:
    """``{node name: value}`` for one eager run of ``gm`` on ``inputs``, after the allow-list's
    check of what is about to run (an index backward's indices among them)."""
    check_graph_module(gm, inputs)
    rec = ValueRecorder(gm)
    with torch.set_grad_enabled(grad):
        rec.run(*inputs)
    return rec.values
