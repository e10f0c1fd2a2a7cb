"""Backends with seeded bugs: accuracy bugs of different sizes in the same place (each rewrites
the graph after its GELU and runs it, so a replay can see every node's value), and one that
fails its own check at compile time. Importable by child processes (tests/helpers/ is on their PYTHONPATH)."""

import operator

import torch
import torch.fx as fx


def _after_gelu(gm: fx.GraphModule, op, value) -> fx.GraphModule:
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and "gelu" in getattr(node.target, "__name__", ""):
            with gm.graph.inserting_after(node):
                changed = gm.graph.call_function(op, (node, value))
            node.replace_all_uses_with(changed, delete_user_cb=lambda user: user is not changed)
    gm.recompile()
    return gm


def scales_gelu(gm: fx.GraphModule, example_inputs):
    """A rounding bug: the GELU's output comes out 1% too large."""
    return _after_gelu(gm, operator.mul, 1.01).forward


def scales_gelu_more(gm: fx.GraphModule, example_inputs):
    """The same bug, a little larger (1.5%): the same kind of difference."""
    return _after_gelu(gm, operator.mul, 1.015).forward


def shifts_gelu(gm: fx.GraphModule, example_inputs):
    """Another bug in the same place: 0.5 added to every element of the GELU's output."""
    return _after_gelu(gm, operator.add, 0.5).forward


def nan_gelu(gm: fx.GraphModule, example_inputs):
    """Another kind of bug there: NaN where the GELU's output is negative."""
    return _nan_where_negative(gm).forward


def _nan_where_negative(gm: fx.GraphModule) -> fx.GraphModule:
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and "gelu" in getattr(node.target, "__name__", ""):
            with gm.graph.inserting_after(node):
                neg = gm.graph.call_function(operator.lt, (node, 0))
            with gm.graph.inserting_after(neg):
                changed = gm.graph.call_function(torch.Tensor.masked_fill, (node, neg, float("nan")))
            node.replace_all_uses_with(changed, delete_user_cb=lambda user: user not in (changed, neg))
    gm.recompile()
    return gm


def checks_its_rewrite(gm: fx.GraphModule, example_inputs):
    """The quickstart's bug (every linear's weight transposed), which this backend finds itself
    at compile time: it runs the rewritten graph on the example inputs (ShapeProp, an
    fx.Interpreter) and so fails in the compile, in the first non-square linear."""
    from torch.fx.passes.shape_prop import ShapeProp

    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch._C._nn.linear:
            with gm.graph.inserting_before(node):
                transposed = gm.graph.call_method("t", (node.args[1],))
            node.args = (node.args[0], transposed, *node.args[2:])
    gm.recompile()
    ShapeProp(gm).propagate(*example_inputs)
    return gm.forward
