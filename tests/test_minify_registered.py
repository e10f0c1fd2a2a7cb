"""A backend registered by name in the user's own process reaches graphdbg's sandboxed workers
(issue 52): the name goes to the child as where it is defined (``module:callable``, or the
running script's ``path.py:callable``), which the child imports under the user's trust; one no
other process can import is one line saying what to do. ``benchmarks/minify_vs_torch.py``'s
graphdbg path, which registers its backends in its own script, runs on one small program.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import ROOT
from torch._dynamo import register_backend

from graphdbg.errors import GraphdbgError
from graphdbg.execution.isolation import child_specs
from graphdbg.replay.options import ReplayOptions


def registered_here_only(gm, example_inputs):
    return gm.forward


register_backend(name="graphdbg_test_registered_here")(registered_here_only)


def test_registered_name_goes_to_the_child_as_its_definition():
    backend, _ = child_specs("graphdbg_test_registered_here", ReplayOptions())
    assert backend == f"{__name__}:registered_here_only"
    # torch's own names and names nobody registered stay names: a fresh process knows the former
    assert child_specs("inductor", ReplayOptions())[0] == "inductor"
    assert child_specs("no_such_backend_anywhere", ReplayOptions())[0] == "no_such_backend_anywhere"


def test_registered_lambda_is_one_line_saying_what_to_do():
    register_backend(name="graphdbg_test_registered_lambda")(lambda gm, example_inputs: gm.forward)
    with pytest.raises(GraphdbgError) as err:
        child_specs("graphdbg_test_registered_lambda", ReplayOptions())
    message = str(err.value)
    assert "\n" not in message and "registered in this process only" in message and "isolate=False" in message


@pytest.mark.slow
def test_minify_vs_torch_graphdbg_path_runs(tmp_path):
    """The benchmark's own graphdbg path on its smallest program: capture, then minify isolated
    (the backend registered by name in the benchmark's script, found by the sandboxed workers;
    the queries counted from the workers' answers) and in-process (counted by the backend)."""
    spec = importlib.util.spec_from_file_location("minify_vs_torch_bench", ROOT / "benchmarks" / "minify_vs_torch.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
        row = bench.bench_graphdbg("compile/norm_mlp", "norm_mlp", "bench_refuses_gelu", "error", tmp_path, 600)
    finally:
        sys.modules.pop(spec.name, None)
    assert "error" not in row, row.get("error")
    assert row["final_nodes"] < row["start_nodes"] and row["inproc_final_nodes"] == row["final_nodes"]
    assert row["queries"] > 0 and row["backend_calls"] == row["queries"]  # every query ran in a sandboxed worker
    assert row["inproc_backend_calls"] >= row["inproc_queries"] > 0


class Configured:
    def __init__(self, level: int):
        self.level = level

    def __call__(self, gm, example_inputs):
        return gm.forward


def test_registered_instance_is_refused_not_rebuilt_without_its_arguments():
    """A configured instance would come back as ``Configured()`` in the child, without its
    arguments: refused with the same one line, so a default minify runs it in this process."""
    register_backend(name="graphdbg_test_registered_instance")(Configured(level=3))
    with pytest.raises(GraphdbgError, match="registered in this process only"):
        child_specs("graphdbg_test_registered_instance", ReplayOptions())
