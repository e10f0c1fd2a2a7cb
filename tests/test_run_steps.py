"""run_case's steps, each called alone on a real captured graph (fixtures/block_*: a transformer
block captured by graphdbg): resolve, reference, build_inputs, Compiler, execute, judge and
record_crash, then run_case end to end agreeing with them."""

from __future__ import annotations

import pytest
import torch
from conftest import FIXTURES

import graphdbg
from graphdbg.errors import GraphdbgError
from graphdbg.outcome import Outcome
from graphdbg.replay.run import (
    Compiler,
    build_inputs,
    execute,
    judge,
    record_crash,
    reference,
    resolve,
    run_case,
)

BROKEN = "fixtures.programs:broken_transpose_backend"
BAD_REWRITE = "fixtures.programs:bad_rewrite_backend"


def _case(name: str):
    return graphdbg.load(FIXTURES / name).case()


def test_resolve_names_the_backend_and_refuses_post_grad_passes_outside_inductor():
    case = _case("block_runtime_error")
    resolved = resolve(case, "aot_eager")
    assert resolved.name == "aot_eager" and callable(resolved.backend)
    assert resolved.pre == [] and resolved.post == [] and resolved.grad is False
    assert resolved.mutated == set()  # the block writes none of its inputs
    with pytest.raises(GraphdbgError, match="post_grad passes run inside Inductor"):
        resolve(case, "eager", "passes_for_tests:count_nodes", pass_stage="post_grad")


def test_reference_is_the_eager_run_and_build_inputs_copies():
    case = _case("block_runtime_error")
    resolved = resolve(case, "eager")
    ref, attrs_before = reference(case, resolved)
    again = case.gm(*case.inputs)
    assert attrs_before is None or isinstance(attrs_before, dict)
    ref_leaves = [v for v in torch.utils._pytree.tree_leaves(ref) if isinstance(v, torch.Tensor)]
    eager_leaves = [v for v in torch.utils._pytree.tree_leaves(again) if isinstance(v, torch.Tensor)]
    assert ref_leaves and all(torch.equal(a, b) for a, b in zip(ref_leaves, eager_leaves))
    gm, inputs = build_inputs(case, resolved)
    assert gm is not case.gm and len(inputs) == len(case.inputs)
    tensors = [(a, b) for a, b in zip(inputs, case.inputs) if isinstance(b, torch.Tensor)]
    assert tensors and all(a is not b and torch.equal(a, b) for a, b in tensors)  # small inputs: copies


def test_compiler_alone_names_the_node_the_compiled_code_fails_in():
    case = _case("block_runtime_error")
    resolved = resolve(case, BROKEN)
    gm, inputs = build_inputs(case, resolved)
    compiler = Compiler(resolved)
    compiled = compiler(gm, inputs)  # what torch.compile hands the backend, called directly
    assert compiler.compiled and compiler.compile_s > 0 and compiler.gm is not None
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        compiled(*inputs)
    assert compiler.node is not None and "linear" in compiler.node.name
    assert compiler.failed is not None and compiler.traceback is not None


def test_execute_and_record_crash_give_the_captured_signature():
    dump = graphdbg.load(FIXTURES / "block_runtime_error")
    case = dump.case()
    resolved = resolve(case, BROKEN)
    gm, inputs = build_inputs(case, resolved)
    compiler = Compiler(resolved)
    outcome = Outcome(status="pass", backend=resolved.name)
    try:
        with pytest.raises(RuntimeError) as raised:
            execute(gm, inputs, compiler, resolved, outcome)
        record_crash(outcome, raised.value, compiler, case, gm)
    finally:
        torch._dynamo.reset()
    assert outcome.status == "crash" and outcome.stage == "run"
    assert outcome.signature.startswith(dump.signature) and outcome.node_target == "torch._C._nn.linear"
    assert outcome.node is not None and outcome.node in {n.name for n in case.gm.graph.nodes}  # the dump's names
    assert outcome.reproduces(dump)


def test_judge_alone_tells_a_wrong_rewrite_from_a_right_one():
    case = _case("block_accuracy")
    resolved = resolve(case, BAD_REWRITE)
    ref, _ = reference(case, resolved)
    gm, inputs = build_inputs(case, resolved)
    compiler = Compiler(resolved)
    wrong = compiler(gm, inputs)(*inputs)
    outcome = Outcome(status="pass", backend=resolved.name)
    judge(outcome, case, ref, wrong)
    assert outcome.status == "mismatch" and outcome.signature.startswith("mismatch: output")
    right = Outcome(status="pass", backend="eager")
    judge(right, case, ref, case.gm(*build_inputs(case, resolved)[1]))
    assert right.status == "pass" and right.reference == "eager"


def test_run_case_is_the_steps_in_order():
    case = _case("block_accuracy")
    outcome = run_case(case, BAD_REWRITE)
    assert outcome.status == "mismatch" and outcome.compile_s > 0 and outcome.total_s >= outcome.compile_s
    crash = run_case(_case("block_runtime_error"), BROKEN, direct=True)
    assert crash.status == "crash" and crash.stage == "run"
