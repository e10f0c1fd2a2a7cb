"""The crash dump written before a graph's first call holds the graph, specs, statistics and
small inputs only (a budget, GRAPHDBG_ARMED_BUDGET_MB), and says which values are stand-ins;
dumps of failures Python sees keep the full values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import ROOT

from graphdbg.store.describe import tensor_stats

_PROGRAM = textwrap.dedent("""
    import sys, torch, graphdbg
    sys.path.insert(0, {tests!r})
    import backends_for_tests, model_backends

    def f(weight, ids):
        return (weight[ids] * 2).sum()

    backend = graphdbg.capture(getattr(model_backends, sys.argv[1], None) or getattr(backends_for_tests, sys.argv[1]), dump_dir=sys.argv[2])
    weight = torch.randn(1 << 20, 3)          # 12 MiB: a weight handed to the graph as an input
    ids = torch.tensor([3, 1, 4, 1, 5])
    try:
        torch.compile(f, backend=backend)(weight, ids)
    except Exception as e:
        print("raised", type(e).__name__)
    print("survived")
""")


def _run(tmp_path, backend, budget_mb):
    program = tmp_path / "prog.py"
    program.write_text(_PROGRAM.format(tests=str(ROOT / "tests" / "helpers")))
    dumps = tmp_path / backend
    r = subprocess.run([sys.executable, str(program), backend, str(dumps)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "GRAPHDBG_ARMED_BUDGET_MB": budget_mb})
    return r, dumps


@pytest.mark.slow
def test_a_crash_dump_keeps_small_inputs_and_says_which_values_are_stand_ins(tmp_path, cli):
    r, dumps = _run(tmp_path, "segfaults_when_called", "4")
    assert r.returncode < 0 and "survived" not in r.stdout, (r.returncode, r.stderr[-2000:])
    (folder,) = [p for p in dumps.glob("rank*/*") if not p.name.startswith(".")]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["failure"]["armed_budget_bytes"] == 4 << 20
    by_shape = {tuple(d["shape"]): d for d in manifest["inputs"] if d["kind"] == "tensor"}
    weight, ids = by_shape[(1 << 20, 3)], by_shape[(5,)]
    assert ids["stored"] and not weight["stored"] and "stand-in" in weight["reason"] and "GRAPHDBG_ARMED_BUDGET_MB" in weight["reason"]
    assert weight["stats"]["std"] > 0.5  # statistics, from which replay synthesizes a stand-in
    # ... of an evenly spaced sample (a 1 GiB weight costs milliseconds), saying so
    assert weight["stats"]["numel"] == 3 << 20 and 0 < weight["stats"]["sampled"] <= 1 << 16
    assert -1 < weight["stats"]["mean"] < 1 and weight["stats"]["min"] < -2 and weight["stats"]["max"] > 2
    assert (folder / "inputs.safetensors").stat().st_size < 1 << 20  # not the 12 MiB weight
    shown = cli("show", folder, "--json")
    assert shown.code == 0 and json.loads(shown.out)["kind"] == "crash", shown


@pytest.mark.slow
def test_a_failure_python_sees_keeps_the_full_values(tmp_path):
    r, dumps = _run(tmp_path, "crash_on_call", "4")
    assert r.returncode == 0 and "raised" in r.stdout, (r.stdout, r.stderr[-2000:])
    (folder,) = [p for p in dumps.glob("rank*/*") if not p.name.startswith(".")]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert all(d["stored"] for d in manifest["inputs"] if d["kind"] == "tensor"), manifest["inputs"]


@pytest.mark.slow
def test_the_armed_dump_of_a_call_that_passes_costs_no_schema_import(tmp_path):
    """The crash dump armed before a graph's first call is written unchecked (whoever loads it
    after a crash checks it, as the segfault test's `show` above does): the 0.1 s of pydantic
    and the schema's models stays out of a program whose graphs all pass."""
    program = tmp_path / "passes.py"
    program.write_text(textwrap.dedent("""
        import sys, torch, graphdbg
        f = torch.compile(lambda x: torch.relu(x) + 1, backend=graphdbg.capture("eager", dump_dir=sys.argv[1]))
        f(torch.randn(8))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "pydantic" or m == "graphdbg.store.schema"))
    """))
    r = subprocess.run([sys.executable, str(program), str(tmp_path / "dumps")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "GRAPHDBG_ARMED_CALLS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
    assert not [p for p in (tmp_path / "dumps").glob("rank*/*")]  # armed, then removed after the call


def _reference_stats(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    mean = math.fsum(finite) / len(finite)
    return {"nan": sum(math.isnan(v) for v in values), "inf": sum(math.isinf(v) for v in values), "min": min(finite),
            "max": max(finite), "mean": mean, "std": math.sqrt(max(math.fsum(v * v for v in finite) / len(finite) - mean * mean, 0))}


_WEIGHT = torch.randn(150_000, generator=torch.Generator().manual_seed(0))
_WITH_HOLES = _WEIGHT.clone().index_fill_(0, torch.arange(0, 150_000, 7), float("nan")).index_fill_(0, torch.arange(3, 150_000, 11), float("inf"))


@pytest.mark.parametrize("value", [
    _WEIGHT, torch.randn(450_000)[::3], _WITH_HOLES, _WEIGHT.to(torch.bfloat16), _WEIGHT.to(torch.float16) * 30_000,
    _WEIGHT > 0.5, (_WEIGHT * 100).to(torch.int32), torch.complex(_WEIGHT, _WEIGHT.flip(0)),
], ids=["float32", "strided", "nan_and_inf", "bfloat16", "float16_overflowing", "bool", "int32", "complex64"])
def test_the_statistics_of_a_sample_are_those_of_the_values_it_takes(value):
    """The statistics an armed dump records of a large input: of an evenly spaced sample
    (every 30th value here), with NaN and Inf counted and left out of the rest, whatever the
    dtype and strides; torch's thread count is as it was."""
    threads = torch.get_num_threads()
    stats = tensor_stats(value, sample=5000)
    assert torch.get_num_threads() == threads
    part = value[::30]
    assert stats["numel"] == 150_000 and stats["sampled"] == part.numel() == 5000
    expected = _reference_stats((part.abs() if part.is_complex() else part).to(torch.float64).tolist())
    assert {k: stats[k] for k in ("nan", "inf")} == {k: expected[k] for k in ("nan", "inf")}
    for key in ("min", "max", "mean", "std"):
        assert math.isclose(stats[key], expected[key], rel_tol=1e-9, abs_tol=1e-9), (key, stats, expected)
