"""A backend whose bug shows only on the real weights, for graphdbg share's bisection.

``sparse_lowering`` compiles a pruned model's matmuls as sparse ones; its generated code fails on
a weight with a row that was pruned to all zeros. Weights regenerated from statistics have no
such row, so the failure needs that one weight's real values.
"""

import torch


def sparse_lowering(gm, example_inputs):
    def run(*args):
        for a in args:
            if isinstance(a, torch.Tensor) and a.dim() == 2 and a.is_floating_point() and (a == 0).all(dim=1).any():
                raise RuntimeError("sparse lowering: a weight has an empty row")
        return gm(*args)

    return run
