"""Backends whose failure depends on the environment, not on the graph: one fails only under a
matmul precision, one only under an environment variable, one on a seeded share of its calls.
Importable by replay children (tests/helpers/ is on their PYTHONPATH)."""

from __future__ import annotations

import os
import random

import torch
import torch.fx as fx

FAIL_VAR = "TORCHINDUCTOR_GRAPHDBG_TEST_FAIL"  # a variable of Inductor's prefix that no torch reads


def fails_under_medium_precision(gm: fx.GraphModule, example_inputs):
    """Refuses to compile while matmuls may use bfloat16 passes (``set_float32_matmul_precision("medium")``)."""
    if torch.get_float32_matmul_precision() == "medium":
        raise RuntimeError("reduced-precision matmul lowering is broken")
    return gm.forward


def fails_under_env_var(gm: fx.GraphModule, example_inputs):
    if os.environ.get(FAIL_VAR):
        raise RuntimeError("broken when the test variable is set")
    return gm.forward


def always_fails(gm: fx.GraphModule, example_inputs):
    raise NotImplementedError("no lowering for this graph")


_draws = random.Random(0)


def reseed(seed: int) -> None:
    _draws.seed(seed)


def fails_on_30_percent(gm: fx.GraphModule, example_inputs):
    """A race's stand-in: each compile fails with probability 0.3, from a seeded stream."""
    if _draws.random() < 0.3:
        raise RuntimeError("lost a race in the scheduler")
    return gm.forward


def runs_fail_on_30_percent(gm: fx.GraphModule, example_inputs):
    """Compiles, then each call of the compiled code fails with probability 0.3 (seeded)."""

    def run(*args):
        if _draws.random() < 0.3:
            raise RuntimeError("lost a race in the compiled code")
        return gm.forward(*args)

    return run


if __name__ == "__main__":  # a user's program: 20 calls of one compiled graph, a failure on some
    import json
    import sys

    import graphdbg

    reseed(7)
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(4, 8)
    compiled = torch.compile(model, backend=graphdbg.capture(runs_fail_on_30_percent, dump_dir=sys.argv[1]))
    failed = 0
    for _ in range(20):
        try:
            compiled(x)
        except RuntimeError:
            failed += 1
    print(json.dumps({"failed": failed, "passed": 20 - failed}))
