"""No false mismatch where a graph's kernels have no float64 (issue 50, section 2): healthy
programs made by a seeded generator (pointwise chains, reductions, matmuls, around custom ops
that refuse float64), in float16, bfloat16 and float32, compiled by Inductor on the CPU, give no
mismatch in capture's accuracy mode, replay or compare; a seeded error of a few ulps in one op's
output is still found by each."""

from __future__ import annotations

import random

import numeric_programs as programs
import pytest
import torch

import graphdbg
from graphdbg.capture.accuracy_checks import AccuracyChecks

PER_DTYPE = 17  # 51 programs in all
SEEDED = 2  # programs per dtype that also run with the seeded error


def _dump_of(program: programs.Program, folder) -> graphdbg.Dump:
    torch._dynamo.reset()
    torch.compile(program.fn, backend=graphdbg.capture("eager", folder, mode="always"))(*program.inputs)
    return graphdbg.load(next(folder.glob("rank*/*")))


def _accuracy_dumps(program: programs.Program, backend, folder) -> list:
    torch._dynamo.reset()
    torch.compile(program.fn, backend=graphdbg.capture(backend, folder, mode="accuracy",
                                                       checks=AccuracyChecks(every=1)))(*program.inputs)
    return sorted(folder.glob("rank*/*"))


@pytest.fixture(autouse=True)
def _one_compile_thread():
    import torch._inductor.config as inductor_config  # here: slow to import, and only these tests need it

    with inductor_config.patch(compile_threads=1):  # no pool of compile workers to start
        yield


@pytest.mark.slow
@pytest.mark.parametrize("dtype", programs.DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_healthy_generated_graphs_give_no_mismatch_and_a_seeded_few_ulp_error_is_found(dtype, tmp_path):
    seeds = random.Random(f"issue-50-{dtype}").sample(range(10_000), PER_DTYPE)
    false_alarms, missed = [], []
    for n, seed in enumerate(seeds):
        program = programs.generate(seed, dtype)
        folder = tmp_path / str(seed)
        if _accuracy_dumps(program, "inductor", folder / "accuracy"):
            false_alarms.append((program, "capture --mode accuracy"))
        dump = _dump_of(program, folder / "always")
        outcome = dump.case().run("inductor", isolate=False)
        if outcome.status != "pass":
            false_alarms.append((program, "replay", outcome.message, outcome.reference))
        assert outcome.compared and outcome.reference, outcome  # the verdict says what it rests on
        table = graphdbg.compare(dump, ["eager", "inductor"], isolate=False)
        if set(table.status) != {"pass"}:
            false_alarms.append((program, "compare", list(table.status)))
        if n >= SEEDED:
            continue
        if not _accuracy_dumps(program, programs.off_by_ulps, folder / "seeded"):
            missed.append((program, "capture --mode accuracy"))
        seeded = dump.case().run(programs.off_by_ulps, isolate=False, direct=True)
        if seeded.status != "mismatch":
            missed.append((program, "replay", seeded.status))
        table = graphdbg.compare(dump, ["eager", "numeric_programs:off_by_ulps"], isolate=False, direct=True)
        if list(table.status) != ["pass", "mismatch"]:
            missed.append((program, "compare", list(table.status)))
    assert not false_alarms, false_alarms
    assert not missed, missed


@pytest.mark.slow
def test_a_seeded_error_on_an_output_a_kernel_writes_into_is_found(tmp_path):
    """The CPU analogue of the Triton test below: programs whose first output is a buffer
    (``empty_like``) that an out-writing custom op with no float64 kernel fills, as Dynamo
    records a user Triton kernel; four of them (float16, bfloat16, float32) in one graph.
    Healthy: no mismatch. Seeded in every other program's first output (on the value returned,
    not on the empty buffer before the write): found by capture's accuracy mode, by replay and
    compare, which name exactly those outputs: the float64 reference keeps the op that writes
    each output (it once dropped it, judging against an empty buffer, which forgave anything)."""
    seeds = random.Random("issue-50-out-op").sample(range(10_000), 4)
    program = programs.generate_many([programs.generate_with_kernel(seed, programs.DTYPES[n % 3], device="cpu")
                                      for n, seed in enumerate(seeds)])
    assert not _accuracy_dumps(program, "inductor", tmp_path / "accuracy"), program
    assert _accuracy_dumps(program, programs.off_by_ulps_in_every_other, tmp_path / "seeded"), program
    dump = _dump_of(program, tmp_path / "always")
    assert "numeric_test.mul_add_into" in str(dump.printed.graph)  # the buffer, then the op writing it
    healthy = dump.case().run("inductor", isolate=False)
    assert healthy.status == "pass", (program, healthy.message, healthy.reference)
    seeded = dump.case().run(programs.off_by_ulps_in_every_other, isolate=False, direct=True)
    assert seeded.status == "mismatch", (program, seeded.reference)
    assert sorted(m["index"] for m in seeded.mismatches) == [0, 4], (program, seeded.message)
    assert seeded.reference.startswith("float64") and "mul_add_into" in seeded.reference, seeded.reference
    table = graphdbg.compare(dump, ["eager", "inductor", "numeric_programs:off_by_ulps_in_every_other"],
                             isolate=False, direct=True)
    assert list(table.status) == ["pass", "pass", "mismatch"], (program, list(table.status))


def test_the_float64_reference_of_some_outputs_keeps_the_kernel_that_writes_them():
    """``float64_reference(..., outputs=[0])`` of a graph whose output 0 is a buffer a kernel
    writes after it is made (``empty_like``, then a Triton launch): the launch is kept, and the
    reference is the kernel's values, not an empty float64 buffer."""
    from graphdbg.replay.float64 import float64_reference

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    z = graph.call_function(torch.empty_like, (x,))
    x.meta["val"] = z.meta["val"] = torch.empty(4, 8, dtype=torch.float16)
    graph.call_function(_marked_launch, (), {"kernel_idx": 0, "kwargs": {"X": x, "Z": z}})
    total = graph.call_function(torch.sum, (x,))
    graph.output((z, total))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    value = torch.randn(4, 8, dtype=torch.float16)
    for outputs in ([0], [0, 1], None):
        ref = float64_reference(gm, [value], outputs=outputs)
        assert torch.allclose(ref.values[0], value.double() * 2, atol=1e-2), (outputs, ref.values[0])
    _SEEN.clear()  # the launches it saw: not the next test's


def _marked_launch(*, kernel_idx: int, kwargs: dict) -> None:
    """A stand-in of a user Triton kernel's launch (as replay's --trust-kernels makes them):
    Z = X * 2 in the dtypes it was written for, and zeros for float64 (what running a Triton
    kernel for pointer dtypes it was never written for may give)."""
    x, z = kwargs["X"], kwargs["Z"]
    _SEEN.append((x.dtype, z.dtype))
    z.copy_(torch.zeros_like(z) if x.dtype == torch.float64 else (x.float() * 2).to(z.dtype))


_SEEN: list[tuple[torch.dtype, torch.dtype]] = []
_marked_launch.graphdbg_kind = "triton_kernel"
_marked_launch.graphdbg_writes = lambda node: list(node.kwargs["kwargs"].values())  # as a launch from a dump declares


def test_the_float64_reference_runs_a_user_triton_kernel_in_the_graphs_own_dtypes():
    from graphdbg.replay.float64 import float64_reference

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    z = graph.call_function(torch.empty_like, (x,))
    x.meta["val"] = z.meta["val"] = torch.empty(4, 8, dtype=torch.float16)  # what the graph says of their dtypes
    graph.call_function(_marked_launch, (), {"kernel_idx": 0, "kwargs": {"X": x, "Z": z}})
    out = graph.call_function(torch.add, (z, 1.0))
    graph.output((out,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    value = torch.randn(4, 8, dtype=torch.float16)
    ref = float64_reference(gm, [value])
    assert ref.values[0].dtype == torch.float64
    assert torch.allclose(ref.values[0], value.double() * 2 + 1, atol=1e-2), ref.values[0]
    assert ref.own_dtype_nodes == ["_marked_launch"]
    assert _SEEN == [(torch.float16, torch.float16)]  # each argument in the dtype the graph had for it


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or programs.triton is None, reason="needs CUDA and Triton")
def test_healthy_graphs_around_a_user_triton_kernel_give_no_mismatch_and_a_seeded_error_is_found(tmp_path, cli):
    """The GPU half: six generated programs (float16 and bfloat16), each calling a user
    @triton.jit kernel (a fused multiply-add) twice inside the compiled region, the second call
    writing the program's first output; traced by Dynamo and recorded with its source. All six
    in one compiled region: one graph, one dump, one child per command (the suite's time).
    Healthy: capture's accuracy mode, replay --trust-kernels (compare's inductor column) and
    compare --trust-kernels find no mismatch. Seeded in every other program's first output (a
    buffer the kernel writes): capture's accuracy mode finds it, and replay names exactly those
    outputs, against a float64 reference that ran the kernels in their own dtypes."""
    import json

    seeds = random.Random("issue-50-triton").sample(range(10_000), 6)
    program = programs.generate_many([programs.generate_with_kernel(seed, torch.float16 if n % 2 == 0 else torch.bfloat16)
                                      for n, seed in enumerate(seeds)])
    assert not _accuracy_dumps(program, "inductor", tmp_path / "accuracy"), program  # no false alarm
    assert _accuracy_dumps(program, programs.off_by_ulps_in_every_other, tmp_path / "seeded"), program
    dump = _dump_of(program, tmp_path / "always")
    assert dump.manifest_data.get("triton_kernels"), dump.manifest_data.keys()
    r = cli("compare", dump.path, "--backends", "eager,inductor", "--trust-kernels", "--json")
    rows = json.loads(r.out)["rows"]
    assert [row["status"] for row in rows] == ["pass", "pass"], (program, r.out[-2000:])
    r = cli("replay", dump.path, "--backend", "numeric_programs:off_by_ulps_in_every_other", "--trust-kernels",
            "--trust-backend", "--json")
    data = json.loads(r.out)
    assert data["status"] == "mismatch", (program, r.out[-2000:])
    assert sorted(m["index"] for m in data["mismatches"]) == [0, 4, 8], (program, data["message"])
    assert data["reference"].startswith("float64") and "own dtype" in data["reference"], data["reference"]


def test_where_eager_alone_judges_rounding_near_zero_passes_and_a_few_ulp_shift_does_not():
    """The SageAttention case's numbers with no float64 reference: an fp16 output of size ~4
    whose element near 0 is off by 0.00244 (well under one ulp of the output's size, 0.0039)
    is rounding; relative errors are relative to the output's size, not 3e7. The same output
    with most elements 4 ulps up is a mismatch, found by its mean error in ulps."""
    from graphdbg.judge.accuracy import compare_outputs, judge_outputs

    g = torch.Generator().manual_seed(0)
    eager = (torch.randn(64, 64, generator=g) * 2).clamp(-4, 4).to(torch.float16)
    eager[0, 0] = 8e-5
    rounded = eager.clone()
    rounded[0, 0] += 0.00244
    [bad] = compare_outputs((eager,), (rounded,))  # outside the dtype's atol at that element
    assert bad.max_rel_error < 0.01, bad  # relative to the output's RMS, not to 8e-5
    assert judge_outputs((eager,), (rounded,), ref64=None) == []
    shifted = (eager.float() * (1 + 4 * torch.finfo(torch.float16).eps)).to(torch.float16)
    [found] = judge_outputs((eager,), (shifted,), ref64=None)
    assert found.measure == "mean ulps" and found.mean_ulps > 2, found
    assert "ulps of float16" in found.describe()
