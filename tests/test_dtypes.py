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
from graphdbg.judge.accuracy import compare_outputs, compared_note, judge_outputs, mismatches_beyond_ulps
from graphdbg.judge.difference import describe_difference, same_difference
from graphdbg.judge.mutations import compare_mutations
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
