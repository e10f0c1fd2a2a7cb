"""Example custom FX passes, importable by name ("passes_for_tests:gelu_to_relu") from the tests.

They are written the way serving stacks write theirs: functions over an ``fx.Graph`` or a
``GraphModule``, and a ``CustomGraphPass`` subclass with a ``uuid``.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._inductor.custom_graph_pass import CustomGraphPass

aten = torch.ops.aten

GELUS = (torch._C._nn.gelu, F.gelu, aten.gelu.default)
RELUS = (torch.relu, F.relu, aten.relu.default)


def gelu_to_relu(gm: fx.GraphModule) -> None:
    """Replace every gelu with relu (takes a GraphModule, returns nothing)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in GELUS:
            node.target = aten.relu.default if node.target is aten.gelu.default else torch.relu
            node.kwargs = {}  # gelu's `approximate` means nothing to relu


def count_nodes(graph: fx.Graph) -> int:
    """A read-only pass over an fx.Graph that returns a number, as a pattern matcher's apply does."""
    return len(graph.nodes)


def clone_output(graph: fx.Graph) -> None:
    """Insert a clone before the output: one more node, one more Tensor.clone."""
    out = graph.output_node()
    value = out.args[0]
    first = value[0] if isinstance(value, (tuple, list)) else value
    with graph.inserting_before(out):
        cloned = graph.call_method("clone", (first,))
    out.replace_input_with(first, cloned)


def boom(graph: fx.Graph) -> None:
    """A pass that fails halfway: it has already inserted a node when it raises."""
    with graph.inserting_before(graph.output_node()):
        graph.call_function(torch.relu, (next(iter(graph.nodes)),))
    raise ValueError("boom: no pattern for rms_norm\nsecond line of detail")


def dangling_use(gm: fx.GraphModule) -> None:
    """Leaves a node that uses a value defined after it: caught by lint, not by the pass."""
    nodes = list(gm.graph.nodes)
    first_call = next(n for n in nodes if n.op in ("call_function", "call_method"))
    last_call = [n for n in nodes if n.op in ("call_function", "call_method")][-1]
    first_call.args = (last_call, *first_call.args[1:])


def retrace(gm: fx.GraphModule) -> fx.GraphModule:
    """Returns a new GraphModule (a copy) instead of editing in place."""
    new = fx.Graph()
    new.output(new.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, new)


class ReluToSigmoid(CustomGraphPass):
    """A post-grad pass in Inductor's own interface: aten.relu -> aten.sigmoid."""

    def __call__(self, graph: fx.Graph) -> None:
        for node in graph.nodes:
            if node.op == "call_function" and node.target in RELUS:
                node.target = aten.sigmoid.default

    def uuid(self) -> str:
        return "passes_for_tests.ReluToSigmoid/1"


relu_to_sigmoid = ReluToSigmoid()


class NeedsArgs:
    def __init__(self, strength: float):
        self.strength = strength

    def __call__(self, graph: fx.Graph) -> None:
        pass


not_a_pass = 42
