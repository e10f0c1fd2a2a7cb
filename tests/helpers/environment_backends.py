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


# a variable on graphdbg's allow-list (backends/restored_vars.py) that a backend of Python's own ignores
ALLOWED_FAIL_VAR = "TORCHINDUCTOR_UNIQUE_KERNEL_NAMES"


def fails_under_allowed_env_var(gm: fx.GraphModule, example_inputs):
    if os.environ.get(ALLOWED_FAIL_VAR) == "1":
        raise RuntimeError("broken when unique kernel names are asked for")
    return gm.forward


def reports_env(gm: fx.GraphModule, example_inputs):
    """Fails with the environment variables it sees of torch's, Triton's and CUDA's prefixes and
    the OpenMP/MKL ones, as JSON: what a replay restored, seen from inside the replay child."""
    import json

    # CUDA's: the two a manifest may carry, not the image's own (NVIDIA_REQUIRE_CUDA, CUDA_VERSION: long, and no replay's doing)
    seen = {k: v for k, v in sorted(os.environ.items()) if (k.startswith(("TORCH", "PYTORCH", "TRITON", "CUBLAS", "OMP", "KMP",
                                                                           "MKL", "LD_PRELOAD"))
                                                            or k in ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING"))
            and "CACHE" not in k}  # the child's own cache folders, graphdbg's doing
    raise RuntimeError("seen " + json.dumps(seen))


def always_fails(gm: fx.GraphModule, example_inputs):
    raise NotImplementedError("no lowering for this graph")


# Seeded by the test (``reseed``), else from $ENVTEST_DRAWS_SEED, so that a replay child or a
# repro.py run in a fresh interpreter draws a known stream; else the system's entropy.
DRAWS_SEED = "ENVTEST_DRAWS_SEED"
_draws = random.Random(os.environ.get(DRAWS_SEED))


def reseed(seed: int) -> None:
    _draws.seed(seed)


def fails_on_30_percent(gm: fx.GraphModule, example_inputs):
    """A race's stand-in: each compile fails with probability 0.3, from a seeded stream."""
    if _draws.random() < 0.3:
        raise RuntimeError("lost a race in the scheduler")
    return gm.forward


def aborts_on_30_percent(gm: fx.GraphModule, example_inputs):
    """Kills its process (SIGABRT) on a seeded 30% of compiles: a race that crashes."""
    if _draws.random() < 0.3:
        os.abort()
    return gm.forward


def clone_fails_on_30_percent(gm: fx.GraphModule, example_inputs):
    """Fails a seeded 30% of compiles of a graph that clones a value (a pass put it there)."""
    if any(n.target == "clone" or "clone" in str(n.target) for n in gm.graph.nodes if n.op.startswith("call")):
        if _draws.random() < 0.3:
            raise RuntimeError("clone lowering raced its allocator")
    return gm.forward


def runs_fail_on_30_percent(gm: fx.GraphModule, example_inputs):
    """Compiles, then each call of the compiled code fails with probability 0.3 (seeded)."""

    def run(*args):
        if _draws.random() < 0.3:
            raise RuntimeError("lost a race in the compiled code")
        return gm.forward(*args)

    return run


def program(dump_dir: str, calls: int = 20) -> dict:
    """A user's program: ``calls`` calls of one compiled graph, a failure on some."""
    import graphdbg

    reseed(7)
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(4, 8)
    compiled = torch.compile(model, backend=graphdbg.capture(runs_fail_on_30_percent, dump_dir=dump_dir))
    failed = 0
    for _ in range(calls):
        try:
            compiled(x)
        except RuntimeError:
            failed += 1
    return {"failed": failed, "passed": calls - failed}


if __name__ == "__main__":
    import json
    import sys

    import environment_backends  # by its name: the dump records the backend as environment_backends:..., not __main__

    print(json.dumps(environment_backends.program(sys.argv[1])))


def captured_flaky_dump(dump_dir):
    """The dump of a graph compiled until ``fails_on_30_percent`` fires (seeded), as a user's program would meet it."""
    import graphdbg  # here: the replay child imports this module as a backend, without graphdbg's capture
    from graphdbg.store.manifest import find_dumps

    reseed(41)
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), torch.randn(4, 8)
    for _ in range(20):
        torch._dynamo.reset()
        try:
            torch.compile(model, backend=graphdbg.capture(fails_on_30_percent, dump_dir=dump_dir))(x)
        except RuntimeError:
            break
    (dump,) = find_dumps(dump_dir)
    return dump
