"""bisect passes / nodes / ranks on real graphs (the fixture dumps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.fx as fx

import graphdbg
from fixtures import programs as P
from graphdbg.case import save_case
from graphdbg.minify import bisect_nodes, bisect_passes, bisect_ranks

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


pytestmark = pytest.mark.usefixtures("child_pythonpath")


def fast_rsqrt(gm: fx.GraphModule) -> None:
    """bad_rewrite_backend's rewrite, as a pass: rsqrt(x) -> 1/sqrt(x + 1e-2)."""
    P.bad_rewrite_backend(gm, [])


def test_bisect_passes_names_the_buggy_pass():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, "eager", "passes_for_tests:count_nodes,passes_for_tests:clone_output,passes_for_tests:gelu_to_relu")
    assert r.culprit == "passes_for_tests:gelu_to_relu" and r.index == 2
    assert r.outcome.status == "mismatch" and r.good_outcome.status == "pass"
    assert r.runs <= 4  # none, all, then a binary search over three


def test_bisect_passes_says_when_the_backend_is_at_fault():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, P.refuses_gelu, "passes_for_tests:count_nodes")
    assert r.culprit is None and "without any pass" in r.note


def test_bisect_passes_finds_the_pattern_and_match_in_a_pattern_matcher_pass():
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, PatternMatcherPass, register_graph_pattern

    pmp = PatternMatcherPass(pass_name="test_patterns")
    harmless = CallFunction(torch.ops.aten.relu.default, KeywordArg("x"))

    @register_graph_pattern(harmless, pass_dict=pmp)
    def relu_noop(match, x):  # matches nothing in this graph
        pass

    @register_graph_pattern(CallFunction(torch.rsqrt, KeywordArg("x")), pass_dict=pmp)
    def rsqrt_fast(match, x):
        node = match.nodes[0]
        graph = node.graph
        with graph.inserting_before(node):
            new = graph.call_function(torch.reciprocal, (graph.call_function(torch.sqrt, (graph.call_function(torch.add, (x, 1e-2)),)),))
        node.replace_all_uses_with(new)
        graph.erase_node(node)

    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, "eager", ["passes_for_tests:count_nodes", pmp])
    assert r.index == 1
    assert r.pattern is not None and "rsqrt_fast" in r.pattern
    assert r.match_index is not None  # a block has two rsqrts; the first replacement already breaks it


def test_bisect_nodes_names_the_rewritten_rsqrt_with_its_source_line():
    d = bisect_nodes(FIXTURES / "block_accuracy", "eager", passes=[fast_rsqrt])
    assert d.replaced == "rsqrt"
    assert d.node == "mul"  # the first reference node whose value is off reads the rewrite
    # the committed fixture was captured in another checkout: its source paths are that checkout's
    assert d.source.endswith("fixtures/programs.py:31") and "torch.rsqrt" in d.code
    assert d.module == "norm1"
    assert set(d.new_nodes) >= {"reciprocal", "sqrt"}
    assert d.max_abs_error > 1e-3


def test_bisect_nodes_through_a_backend_that_rewrites_its_graph():
    d = bisect_nodes(FIXTURES / "block_accuracy", P.bad_rewrite_backend)
    assert d.method == "interpreter" and d.replaced == "rsqrt" and d.source.endswith("programs.py:31")


def test_bisect_nodes_on_an_opaque_backend_bisects_prefixes():
    def opaque(gm, example_inputs):  # hides its graph behind a plain function
        P.bad_rewrite_backend(gm, example_inputs)
        return lambda *args: gm(*args)

    d = bisect_nodes(FIXTURES / "block_accuracy", opaque)
    assert d.method == "prefix-bisect"
    assert d.node == "rsqrt" and d.source.endswith("programs.py:31")
    assert d.compared <= 8  # log2 of the graph, not one compile per node


def test_bisect_nodes_when_nothing_diverges():
    d = bisect_nodes(FIXTURES / "block_accuracy", "eager")
    assert d.node is None and d.compared > 20


def test_bisect_nodes_on_a_crash_dump_names_the_node_the_graph_crashes_at(cli):
    # the backend rewrites the graph (transposes every linear weight): the first node that can't run is the answer
    r = cli("bisect", "nodes", FIXTURES / "block_runtime_error", "--trust-backend", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["node"] == "linear" and found["source"].endswith("programs.py:43")
    assert found["note"].startswith("the graph crashes here: RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def _rank_dumps(tmp_path, monkeypatch, change):
    """Three ranks of the same block; ``change(case)`` alters rank 2's copy."""
    root = tmp_path / "dumps"
    for rank in range(3):
        case = graphdbg.load(FIXTURES / "block_compile_error").case()
        if rank == 2:
            change(case)
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        save_case(case, root)
    return root


def test_bisect_ranks_finds_the_rank_with_other_input_values(tmp_path, monkeypatch):
    def nan_input(case):
        case.inputs[0] = case.inputs[0].clone()
        case.inputs[0][0, 0, 0] = float("nan")

    report = bisect_ranks(_rank_dumps(tmp_path, monkeypatch, nan_input))
    assert report.ranks == [0, 1, 2] and report.odd == [2]
    assert report.differences[2] == ["input values: L_x_"]


def test_bisect_ranks_finds_the_rank_with_another_graph(tmp_path, monkeypatch):
    from passes_for_tests import gelu_to_relu

    def other_graph(case):
        gelu_to_relu(case.gm)
        case.gm.recompile()

    report = bisect_ranks(_rank_dumps(tmp_path, monkeypatch, other_graph))
    assert report.odd == [2]
    (diff,) = report.differences[2]
    assert diff.startswith("graph: hash") and "torch.relu +1" in diff and "gelu -1" in diff
