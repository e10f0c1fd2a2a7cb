"""A torch.compile backend with a bug, standing in for yours: a 'layout optimisation' that
pre-transposes the weights of linear layers but forgets that only square ones survive it."""

import torch
import torch.fx as fx


def my_backend(gm: fx.GraphModule, example_inputs):
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch._C._nn.linear:
            with gm.graph.inserting_before(node):
                transposed = gm.graph.call_method("t", (node.args[1],))
            node.args = (node.args[0], transposed, *node.args[2:])
    gm.recompile()
    return gm.forward
