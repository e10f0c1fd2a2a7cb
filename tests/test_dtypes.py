"""Every dtype goes through the judge (issue 50, section 1): each dtype torch has, found by
introspection, is compared (numerically where torch can convert it to a number, else bit for bit,
and the verdict says so) on every path that judges values; a graph with float8, bits, bool,
integer and complex outputs replays, compares and bisects."""

from __future__ import annotations

import json
import warnings

import numeric_programs as programs
import pytest
import torch
import torch.fx as fx

import graphdbg
from graphdbg.judge import dtypes
from graphdbg.judge.accuracy import compare_outputs, compared_note, judge_outputs, mismatches_beyond_ulps
from graphdbg.judge.difference import describe_difference, same_difference
from graphdbg.judge.measures import parse_within
from graphdbg.judge.mutations import compare_mutations
from graphdbg.replay.compare_swap import distance
from graphdbg.replay.float64 import ReferenceUnavailable, float64_reference

EVERY_DTYPE = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
N = 24


def _quantized(dtype: torch.dtype) -> bool:
    return "qint" in str(dtype) or "quint" in str(dtype)


def _pair(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, bool] | None:
    """(a tensor of ``dtype``, the same with two elements swapped, made from numbers?); None
    where torch can make no tensor of ``dtype``."""
    src = (torch.arange(N) % 5 == 0).float() if dtype == torch.bool else (torch.arange(N) % 7) * 0.75 + 0.5
    swapped = src.clone()
    swapped[[0, 6]] = src[[6, 0]]  # 0.5 and 5: apart in every format, e8m0 (powers of two) too
    if _quantized(dtype):  # never a byte view: a quantized tensor is made by quantizing
        try:
            return (torch.quantize_per_tensor(src, 0.25, 0, dtype), torch.quantize_per_tensor(swapped, 0.25, 0, dtype),
                    False)
        except Exception:
            return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return src.to(dtype), swapped.to(dtype), True
    except Exception:
        pass
    raw = torch.randint(0, 256, (N * dtype.itemsize,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    changed = raw.clone()
    changed[0] ^= 0xFF
    return raw.view(dtype), changed.view(dtype), False


@pytest.mark.parametrize("dtype", EVERY_DTYPE, ids=lambda d: str(d).removeprefix("torch."))
def test_every_dtype_torch_has_is_compared_and_a_change_is_found(dtype):
    made = _pair(dtype)
    if made is None:
        assert _quantized(dtype), f"no tensor of {dtype} could be made"
        pytest.skip(f"torch can't quantize to {dtype} on this machine")
    same, changed, numeric = made
    assert compare_outputs((same,), (same.clone() if numeric else same,)) == []
    assert judge_outputs((same,), (same,)) == []
    bad = compare_outputs((same,), (changed,))
    assert len(bad) == 1 and bad[0].reason in ("value", "nan"), bad
    text = bad[0].describe()
    if not numeric:
        assert "bit for bit" in text, text
    assert "bit for bit" in compared_note((same,)) or numeric
    # the other judges: eager alone (no float64), a float64 reference, in-place writes, the
    # captured-versus-replayed difference
    assert mismatches_beyond_ulps(bad, (same,), (changed,)) == bad
    assert judge_outputs((same,), (changed,), ref64=None)
    [written] = compare_mutations(["x"], [same], [changed])
    assert "after mutation" in written.describe()
    assert same_difference([bad[0].to_dict()], [bad[0].to_dict()]) is None
    assert describe_difference(bad[0].to_dict()).startswith("output 0")
    # the swap path (compare --swap, bisect ops, exported swap tests): its distance, with and without bounds
    for bounds in (None, parse_within(["cosine>=0.99", "ulps<=4"])):
        kept = distance(same, same.clone() if numeric else same, bounds)
        moved = distance(same, changed, bounds)
        assert kept is not None and kept["close"] and kept["compared"] == N, kept
        assert moved is not None and not moved["close"], moved
        if dtypes.kind(dtype) in (dtypes.EXACT, dtypes.BITS):
            how = "exactly" if dtypes.kind(dtype) == dtypes.EXACT else "bit for bit"
            assert moved["note"].startswith(f"compared {how}: ") and moved["differing"] >= 1, moved


@pytest.mark.parametrize("dtype", EVERY_DTYPE, ids=lambda d: str(d).removeprefix("torch."))
def test_the_float64_reference_carries_every_dtype(dtype):
    made = _pair(dtype)
    if made is None:
        pytest.skip(f"no tensor of {dtype}")
    value = made[0]
    gm = fx.symbolic_trace(lambda x: (x, x.shape[0]))
    try:
        ref = float64_reference(gm, [value], outputs=[0])
    except ReferenceUnavailable:
        return  # said, one line: no crash
    out = ref.values[0]
    assert out.shape == value.shape
    assert out.dtype in (torch.float64, torch.complex128, value.dtype)


@pytest.fixture(scope="module")
def quantized_dump(tmp_path_factory):
    folder = tmp_path_factory.mktemp("float8")
    torch._dynamo.reset()
    torch.compile(programs.quantizing, backend=graphdbg.capture("eager", folder, mode="always"))(*programs.quantizing_inputs())
    return next(folder.glob("rank*/*"))


@pytest.mark.slow
def test_a_graph_with_float8_outputs_replays_compares_and_bisects(quantized_dump, cli):
    r = cli("replay", quantized_dump, "--backend", "aot_eager", "--json")
    data = json.loads(r.out)
    assert r.code == 0 and data["status"] == "pass", r
    assert "bit for bit: output 5 bits8" in data["compared"], data
    r = cli("compare", quantized_dump, "--backends", "eager,aot_eager", "--json")
    assert r.code == 0 and all(row["status"] == "pass" for row in json.loads(r.out)["rows"]), r.out
    r = cli("bisect", "nodes", quantized_dump, "--backend", "aot_eager")
    assert r.code == 0 and "no node diverges" in r.out, r


@pytest.mark.slow
def test_a_wrong_byte_in_each_float8_bits_and_integer_output_is_a_mismatch(quantized_dump, cli, tmp_path):
    r = cli("replay", quantized_dump, "--backend", "numeric_programs:flips_a_byte_of_each_output", "--trust-backend", "--json")
    data = json.loads(r.out)
    assert r.code == 1 and data["status"] == "mismatch", r
    assert {m["index"] for m in data["mismatches"]} == set(range(6)), data["mismatches"]
    bits = next(m for m in data["mismatches"] if m["index"] == 5)
    assert bits["measure"] == "bit for bit" and bits["differing"] == 1
    torch._dynamo.reset()
    wrapped = graphdbg.capture(programs.flips_a_byte_of_each_output, tmp_path, mode="accuracy")
    torch.compile(programs.quantizing, backend=wrapped)(*programs.quantizing_inputs())
    assert wrapped.dumps, "capture's accuracy mode saw no difference"


def test_64_bit_integers_beyond_floats_precision_are_compared_exactly():
    e = torch.tensor([2**63 + 10, 5], dtype=torch.uint64)
    [bad] = compare_outputs((e,), (torch.tensor([2**63 + 12, 5], dtype=torch.uint64),))
    assert bad.differing == 1 and bad.at == [[0]] and bad.max_abs_error == 2.0, bad
    assert "must be exact" in bad.describe()
    assert compare_outputs((e,), (e.clone(),)) == []


@pytest.mark.slow
def test_compare_swap_judges_float8_bool_integer_and_bits_outputs(tmp_path, cli):
    """``compare --swap`` of a quantizing custom op whose output the graph returns as float8,
    bools, integers and bits: every output has a row, judged as the judge does (float8 by the
    measures, bools and integers exactly, bits bit for bit), and a reference that quantizes
    otherwise moves each of them."""
    torch._dynamo.reset()
    x = programs.quantizing_inputs()[0]
    torch.compile(programs.quantizing_op, backend=graphdbg.capture("eager", tmp_path, mode="always"))(x)
    path = next(tmp_path.glob("rank*/*"))
    r = cli("compare", path, "--ops", "numeric_programs", "--swap", "numeric_test::to_fp8=numeric_programs:to_fp8_reference",
            "--json")
    assert r.code == 0, r
    rows = json.loads(r.out)["rows"]
    assert [row["dtype"] for row in rows] == ["float8_e4m3fn", "bool", "uint8", "bits8"], rows
    assert all(row["close"] and row["compared"] == x.numel() for row in rows), rows
    assert [row.get("measure") for row in rows] == [None, "exact", "exact", "bit for bit"], rows
    r = cli("compare", path, "--ops", "numeric_programs", "--swap", "numeric_test::to_fp8=numeric_programs:to_fp8_coarser",
            "--json")
    rows = json.loads(r.out)["rows"]
    assert rows[0]["max_abs_error"] > 0 and rows[0]["compared"] == x.numel(), rows[0]  # a float8 step: judged by its tolerance
    assert not rows[2]["close"] and not rows[3]["close"], rows
    assert rows[3]["note"].startswith("compared bit for bit: ") and rows[3]["differing"] >= 1, rows[3]
    assert rows[2]["max_abs_error"] >= 1, rows[2]
    r = cli("compare", path, "--ops", "numeric_programs", "--swap", "numeric_test::to_fp8=numeric_programs:to_fp8_coarser",
            "--within", "cosine>=0.9999")
    assert "compared bit for bit" in r.out and "Traceback" not in r.out + r.err, r
