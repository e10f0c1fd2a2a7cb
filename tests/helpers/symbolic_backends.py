"""A backend whose compiled kernel has a fixed bound on a dynamic size: the failure needs the
graph compiled with symbolic sizes (tests/test_minify_symbolic.py).

``seq_bounded_softmax`` compiles, for a graph traced with symbolic sizes, a softmax "kernel"
with room for at most ``BOUND`` elements along the reduced dim (a fixed scratch buffer, as a
hand-written kernel might have); called with a longer sequence it fails at run time. A graph
compiled with static sizes gets a kernel of exactly its size and never fails.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx

BOUND = 16


def bounded_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if x.shape[dim] > BOUND:
        raise RuntimeError(f"softmax kernel compiled for at most {BOUND} elements along dim {dim}, got {x.shape[dim]}")
    return torch.softmax(x, dim)


def _symbolic(example_inputs: list[Any]) -> bool:
    for v in example_inputs:
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape):
            return True
    return False


def seq_bounded_softmax(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    if not _symbolic(example_inputs):
        return gm.forward  # sizes known: a kernel of exactly this size
    for node in list(gm.graph.nodes):
        is_softmax = (node.op == "call_method" and node.target == "softmax") or (
            node.op == "call_function" and getattr(node.target, "__name__", "") == "softmax")
        if is_softmax:
            node.op, node.target = "call_function", bounded_softmax
    gm.recompile()
    return gm.forward
