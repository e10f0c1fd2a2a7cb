"""Custom FX pass pipelines on replayed graphs: resolving, running, reporting, and inside Inductor."""

from __future__ import annotations

import json
import pickle

import passes_for_tests
import pytest
import torch
import torch.fx as fx
from conftest import FIXTURES

import graphdbg
from graphdbg.errors import GraphdbgError
from graphdbg.replay.passes import (
    PassFailed,
    PassReport,
    PassSpec,
    apply_pass,
    apply_passes,
    find_pass_failure,
    inductor_post_grad_patch,
    resolve_passes,
)

GELU = "torch._C._nn.gelu"


@pytest.fixture
def case():
    """The committed transformer-block graph (50 nodes, one gelu), fresh for each test."""
    return graphdbg.load(FIXTURES / "block_compile_error").case()


def outputs(gm: fx.GraphModule, inputs: list) -> torch.Tensor:
    with torch.no_grad():
        out = gm(*inputs)
    return out[0] if isinstance(out, (tuple, list)) else out


def one(spec: str) -> PassSpec:
    (p,) = resolve_passes(spec)
    return p


# --------------------------------------------------------------------------- resolving


def test_resolve_from_a_string():
    passes = resolve_passes(
        "passes_for_tests:gelu_to_relu, passes_for_tests:count_nodes@post_grad,"
        "passes_for_tests:ReluToSigmoid,passes_for_tests:relu_to_sigmoid@pre"
    )
    assert [(p.name, p.stage) for p in passes] == [
        ("passes_for_tests:gelu_to_relu", "pre"),
        ("passes_for_tests:count_nodes", "post_grad"),
        ("passes_for_tests:ReluToSigmoid", "pre"),
        ("passes_for_tests:relu_to_sigmoid", "pre"),
    ]
    assert passes[0].fn is passes_for_tests.gelu_to_relu
    assert passes[1].fn is passes_for_tests.count_nodes
    # A CustomGraphPass subclass is instantiated; a module-level instance is taken as it is.
    assert type(passes[2].fn) is passes_for_tests.ReluToSigmoid
    assert passes[3].fn is passes_for_tests.relu_to_sigmoid


def test_resolve_from_python_objects_and_default_stage():
    given = PassSpec("mine", passes_for_tests.boom, "pre")
    passes = resolve_passes(
        [passes_for_tests.count_nodes, passes_for_tests.ReluToSigmoid, "passes_for_tests:clone_output", given],
        default_stage="post_grad",
    )
    assert [(p.name, p.stage) for p in passes] == [
        ("count_nodes", "post_grad"),
        ("ReluToSigmoid", "post_grad"),
        ("passes_for_tests:clone_output", "post_grad"),
        ("mine", "pre"),
    ]
    assert isinstance(passes[1].fn, passes_for_tests.ReluToSigmoid)
    assert resolve_passes(None) == [] and resolve_passes("") == []


@pytest.mark.parametrize(
    "spec, says",
    [
        ("no_such_module_xyz:fuse", "cannot import module 'no_such_module_xyz'"),
        ("passes_for_tests:missing_pass", "has no attribute 'missing_pass'"),
        ("passes_for_tests:not_a_pass", "not callable"),
        ("passes_for_tests:gelu_to_relu@during", "unknown stage 'during'"),
        ("passes_for_tests:NeedsArgs", "cannot instantiate NeedsArgs"),
        ("fuse_everything", "expected module:attr"),
    ],
)
def test_resolution_errors_are_one_line_naming_the_item(spec, says):
    with pytest.raises(GraphdbgError) as info:
        resolve_passes(f"passes_for_tests:count_nodes,{spec}")
    message = str(info.value)
    assert says in message and spec in message
    assert "\n" not in message


def test_bad_default_stage():
    with pytest.raises(GraphdbgError, match="unknown stage 'grad'"):
        resolve_passes("passes_for_tests:count_nodes", default_stage="grad")


# --------------------------------------------------------------------------- running


def test_gelu_to_relu_changes_ops_and_outputs(case):
    before = outputs(case.gm, case.inputs)
    gm, report = apply_pass(case.gm, one("passes_for_tests:gelu_to_relu"))

    assert gm is case.gm  # edited in place
    assert report.name == "passes_for_tests:gelu_to_relu" and report.stage == "pre"
    assert report.nodes_before == report.nodes_after == 50
    assert report.ops_delta == {GELU: -1, "torch.relu": 1}
    assert report.error is None and report.result is None and report.seconds >= 0
    assert "_nn.gelu" not in gm.code  # recompiled
    assert not torch.allclose(outputs(gm, case.inputs), before)

    # The report survives JSON, as it must to go into an Outcome or a manifest.
    assert PassReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    assert PassReport.from_dict({**report.to_dict(), "added_later": 1}) == report


def test_a_pass_that_raises(case):
    with pytest.raises(PassFailed) as info:
        apply_pass(case.gm, one("passes_for_tests:boom"))
    failed = info.value
    assert isinstance(failed.__cause__, ValueError) and failed.original is failed.__cause__
    report = failed.report
    assert report.error == "ValueError: boom: no pattern for rms_norm"
    # Counted on what the pass left behind: it had inserted one node before raising.
    assert (report.nodes_before, report.nodes_after) == (50, 51)
    assert report.ops_delta == {"torch.relu": 1}
    assert failed.reports == [report]
    assert "passes_for_tests:boom" in str(failed)

    # A runner in another process gets it back whole.
    again = pickle.loads(pickle.dumps(failed))
    assert again.report == report and isinstance(again.__cause__, ValueError)


def test_a_pass_that_corrupts_the_graph_fails_at_lint(case):
    with pytest.raises(PassFailed) as info:
        apply_pass(case.gm, one("passes_for_tests:dangling_use"))
    assert info.value.report.error.startswith("RuntimeError: ")
    assert "used before" in info.value.report.error or "not defined" in info.value.report.error


def test_a_pipeline_of_two_passes(case):
    passes = resolve_passes(
        "passes_for_tests:gelu_to_relu,passes_for_tests:ReluToSigmoid@post_grad,passes_for_tests:clone_output"
    )
    gm, reports = apply_passes(case.gm, passes)

    # The post_grad pass is Inductor's to run, not ours.
    assert [r.name for r in reports] == ["passes_for_tests:gelu_to_relu", "passes_for_tests:clone_output"]
    assert [(r.nodes_before, r.nodes_after) for r in reports] == [(50, 50), (50, 51)]
    assert reports[0].ops_delta == {GELU: -1, "torch.relu": 1}
    assert reports[1].ops_delta == {"Tensor.clone": 1}
    assert len(gm.graph.nodes) == 51


def test_a_failing_pass_in_a_pipeline_carries_the_reports_so_far(case):
    passes = resolve_passes("passes_for_tests:gelu_to_relu,passes_for_tests:boom,passes_for_tests:clone_output")
    with pytest.raises(PassFailed) as info:
        apply_passes(case.gm, passes)
    assert [(r.name, r.error) for r in info.value.reports] == [
        ("passes_for_tests:gelu_to_relu", None),
        ("passes_for_tests:boom", "ValueError: boom: no pattern for rms_norm"),
    ]


def test_a_pass_returning_an_int(case):
    gm, report = apply_pass(case.gm, one("passes_for_tests:count_nodes"))
    assert report.result == 50  # it got the fx.Graph: a GraphModule has no .nodes
    assert report.ops_delta == {} and gm is case.gm


def test_a_pass_returning_a_new_graph_module(case):
    expected = outputs(case.gm, case.inputs)
    gm, report = apply_pass(case.gm, one("passes_for_tests:retrace"))
    assert gm is not case.gm and report.result is None
    assert torch.equal(outputs(gm, case.inputs), expected)


def test_graph_passes_on_the_dynamo_graph_of_a_live_model():
    from fixtures.programs import tiny_block

    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model, x = tiny_block()
    torch.compile(model, backend=recording_backend)(x)
    (gm,) = graphs
    gm, reports = apply_passes(gm, resolve_passes([passes_for_tests.gelu_to_relu, passes_for_tests.relu_to_sigmoid]))
    assert [r.ops_delta for r in reports] == [
        {GELU: -1, "torch.relu": 1},
        {"torch.relu": -1, "torch.ops.aten.sigmoid.default": 1},
    ]


# --------------------------------------------------------------------------- inside Inductor


def test_no_post_grad_passes_no_patch():
    assert inductor_post_grad_patch(resolve_passes("passes_for_tests:count_nodes"), []) == {}


@pytest.mark.slow
def test_post_grad_passes_run_inside_inductor():
    from torch._inductor.compile_fx import compile_fx

    gm = fx.symbolic_trace(lambda x: (torch.relu(x) * 2,))
    x = torch.randn(4, 8)
    passes = resolve_passes(
        "passes_for_tests:gelu_to_relu,passes_for_tests:count_nodes,passes_for_tests:ReluToSigmoid,passes_for_tests:count_nodes",
        default_stage="post_grad",
    )
    reports: list[PassReport] = []
    patch = inductor_post_grad_patch(passes, reports)
    # A cache hit would skip the passes without a word; the patch turns the cache off.
    assert patch["fx_graph_cache"] is False
    chain = patch["post_grad_custom_post_pass"]
    assert chain.uuid() and all(p.uuid() for p in chain.members)

    with torch._inductor.config.patch(patch):
        compiled = compile_fx(gm, [x])

    assert [(r.name, r.stage, r.result, r.error) for r in reports] == [
        ("passes_for_tests:gelu_to_relu", "post_grad", None, None),
        ("passes_for_tests:count_nodes", "post_grad", 4, None),
        ("passes_for_tests:ReluToSigmoid", "post_grad", None, None),
        ("passes_for_tests:count_nodes", "post_grad", 4, None),
    ]
    # Counted on Inductor's aten graph, not on the graph we handed in.
    assert reports[2].ops_delta == {"torch.ops.aten.relu.default": -1, "torch.ops.aten.sigmoid.default": 1}
    out = compiled(x)
    out = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(out, torch.sigmoid(x) * 2)


def test_a_post_grad_pass_that_raises_inside_inductor():
    # Fails before Inductor lowers anything, so this costs an AOT trace, not a compile.
    from torch._inductor.compile_fx import compile_fx

    gm = fx.symbolic_trace(lambda x: (torch.relu(x) * 2,))
    reports: list[PassReport] = []
    passes = resolve_passes("passes_for_tests:count_nodes@post_grad,passes_for_tests:boom@post_grad")
    with torch._inductor.config.patch(inductor_post_grad_patch(passes, reports)), pytest.raises(Exception) as info:
        compile_fx(gm, [torch.randn(4, 8)])

    # Inductor re-raises it `from None` as InductorError: only find_pass_failure digs it out.
    assert info.value.__cause__ is None
    failed = find_pass_failure(info.value)
    assert failed is not None and isinstance(failed.__cause__, ValueError)
    assert [(r.name, r.error) for r in reports] == [
        ("passes_for_tests:count_nodes", None),
        ("passes_for_tests:boom", "ValueError: boom: no pattern for rms_norm"),
    ]
