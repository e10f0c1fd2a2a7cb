"""Training steps as people run them (issue 39): mixed precision (bf16 parameters, as FSDP's
``MixedPrecisionPolicy(param_dtype=bf16)`` makes them, and bf16 autocast) judged with tolerances
per dtype against the float64 reference; activation checkpointing under compile; a compiled
optimizer step. Each: a healthy backend passes, a seeded bug is captured, replayed with the
captured signature, minified, and its repro and exported test fail as they should."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import run_graphdbg

import graphdbg
from fixtures.training import corrupt_foreach_backend, silu_gradient_backend
from fixtures.training_steps import CheckpointedLM, ConvNeXtBlock, RMSBlock, lm_batch
from graphdbg.judge.accuracy import Tolerance, compare_outputs


def _only_dump(root: Path) -> Path:
    found = sorted(p.parent for p in root.glob("rank*/*/manifest.json"))
    assert len(found) == 1, found
    return found[0]


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _train(model: torch.nn.Module, x: torch.Tensor, backend, *, autocast: torch.dtype | None = None, steps: int = 2) -> None:
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            out = compiled(x)
        out.float().square().mean().backward()
        opt.step()
        opt.zero_grad()


def _gradients_behind_silu(model: torch.nn.Module, x: torch.Tensor) -> int:
    """How many parameter gradients a wrong SiLU derivative changes (eager, by hand)."""
    def grads(scale: float) -> list[torch.Tensor]:
        m = __import__("copy").deepcopy(model)
        silu = F.silu

        def scaled(t: torch.Tensor, inplace: bool = False) -> torch.Tensor:
            return SiLUScaled.apply(t, scale)

        F.silu = scaled
        try:
            m(x).float().square().mean().backward()
        finally:
            F.silu = silu
        return [p.grad for p in m.parameters()]

    return sum(not torch.equal(a, b) for a, b in zip(grads(1.0), grads(1.25)))


class SiLUScaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.ops.aten.silu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s)) * ctx.scale, None


def test_small_gradients_are_judged_at_their_own_scale():
    """A bf16 gradient whose largest element is 2e-3, 25% off, is a mismatch (bf16's atol of 1e-3
    is for magnitude 1); the same gradient rounded another way (computed in float32, rounded
    once) is not."""
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(64, 64, generator=g, dtype=torch.float64) * 5e-4
    eager = (exact.to(torch.bfloat16) * 3).to(torch.bfloat16) / 3  # rounded at each op
    fused = (exact * 3 / 3).to(torch.bfloat16)  # rounded once
    assert compare_outputs(eager, fused) == []
    (bad,) = compare_outputs(eager, (fused.double() * 1.25).to(torch.bfloat16))
    assert bad.reason == "value" and bad.atol < 1e-5
    # an atol the user gives is used as given
    assert compare_outputs(eager, (fused.double() * 1.25).to(torch.bfloat16), tol=Tolerance(atol=1e-3)) == []


@pytest.mark.parametrize("precision", ["bf16 params", pytest.param("bf16 autocast", marks=pytest.mark.slow)])
def test_mixed_precision_wrong_backward_is_caught_on_every_gradient_it_changes(tmp_path, cli, precision):
    torch.manual_seed(0)
    model, x = RMSBlock(), torch.randn(2, 8, 16)
    autocast = None
    if precision == "bf16 params":
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    else:
        autocast = torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
        changed = _gradients_behind_silu(model, x)
    healthy = graphdbg.capture("aot_eager", tmp_path / "healthy", mode="accuracy")
    _train(__import__("copy").deepcopy(model), x, healthy, autocast=autocast)
    assert healthy.dumps == []

    _train(model, x, graphdbg.capture(silu_gradient_backend, tmp_path / "dumps", mode="accuracy"), autocast=autocast)
    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["stage"] == "backward" and m["failure"]["kind"] == "accuracy"
    assert len(m["failure"]["mismatches"]) == changed == 5, m["failure"]["signature"]
    if precision == "bf16 params":
        params = [d for d in _manifest(dump / "forward")["inputs"] if d.get("requires_grad")]
        assert len(params) == 7 and {d["dtype"] for d in params} == {"bfloat16"}
    else:
        assert _manifest(dump / "forward")["autocast"] == {"cpu": "bfloat16"}
    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["stage"] == "backward" and out["reproduces"], r
    assert {mm["what"] for mm in out["mismatches"]} == {"gradient"}


@pytest.mark.slow
def test_mixed_precision_under_inductor_gives_no_false_alarm(tmp_path):
    """Inductor computes bf16 kernels in float32 and rounds once; eager rounds at every op. The
    differences are rounding, and the float64 reference says so: no dump, for bf16 parameters
    (a ConvNeXt block) and under bf16 autocast (an RMSNorm transformer block)."""
    torch.manual_seed(0)
    backend = graphdbg.capture("inductor", tmp_path / "dumps", mode="accuracy")
    block, x = ConvNeXtBlock().to(torch.bfloat16), torch.randn(2, 16, 8, 8, dtype=torch.bfloat16)
    _train(block, x, backend, steps=3)
    _train(RMSBlock(), torch.randn(2, 8, 16), backend, autocast=torch.bfloat16, steps=3)
    assert backend.dumps == [] and not list((tmp_path / "dumps").glob("rank*/*/manifest.json"))


def _minify_repro_export(cli, dump: Path, tmp_path: Path) -> dict:
    """minify (exit 0: its repro.py, run in a fresh interpreter, showed the failure) and
    export-test (exit 0: the test, run once, fails as it should); the minified manifest."""
    r = cli("minify", dump, "--trust-backend", "--no-isolate", "-o", tmp_path / "min", "--json")
    assert r.code == 0, r
    r = cli("export-test", dump, "--trust-backend", "-o", tmp_path / "exported" / "test_step.py")
    assert r.code == 0 and "run on its own" in r.out + r.err, r
    return _manifest(_only_dump(tmp_path / "min"))


@pytest.mark.slow
def test_checkpointed_blocks_with_a_wrong_backward(tmp_path, cli):
    """``checkpoint(block, x, use_reentrant=False)`` inside the compiled model: Dynamo keeps each
    block as a ``tag_activation_checkpoint`` of its body, AOTAutograd recomputes it in the
    backward, where the bw_compiler gets SiLU's derivative wrong."""
    torch.manual_seed(0)
    model, (idx, targets) = CheckpointedLM(layers=1), lm_batch()
    compiled = torch.compile(model, backend=graphdbg.capture(silu_gradient_backend, tmp_path / "dumps", mode="accuracy"))
    F.cross_entropy(compiled(idx).flatten(0, 1), targets.flatten()).backward()

    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["stage"] == "backward" and m["failure"]["kind"] == "accuracy"
    assert "tag_activation_checkpoint(wrap_body_0" in (dump / "forward" / "graph.py").read_text()
    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("replay", dump / "forward", "--trust-backend", "--backward", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["stage"] == "backward" and out["reproduces"], r

    small = _minify_repro_export(cli, dump, tmp_path)
    assert any("silu_backward" in op for op in small["graph"]["ops"]) and small["graph"]["nodes"] < m["graph"]["nodes"]


@pytest.mark.slow
def test_compiled_optimizer_step_that_writes_wrong_parameters(tmp_path, cli):
    """``@torch.compile def step(): opt.step()`` of AdamW(foreach) training a ConvNeXt block; the
    backend scales the weight decay's ``_foreach_mul_``. The graph has no outputs: it is judged by
    what it writes into the parameters."""
    torch.manual_seed(0)
    model, x = ConvNeXtBlock(), torch.randn(2, 16, 8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    backend = graphdbg.capture(corrupt_foreach_backend, tmp_path / "dumps", mode="accuracy")

    @torch.compile(backend=backend)
    def step() -> None:
        opt.step()

    for _ in range(2):
        model(x).square().mean().backward()
        step()
        opt.zero_grad()

    dump = _only_dump(tmp_path / "dumps")
    m = _manifest(dump)
    assert m["failure"]["kind"] == "accuracy" and m["failure"]["signature"].startswith("accuracy: attr ")
    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    out = json.loads(r.out)
    assert r.code == 1 and out["reproduces"] and {mm["what"] for mm in out["mismatches"]} == {"attr"}, r

    small = _minify_repro_export(cli, dump, tmp_path)
    assert small["graph"]["ops"] == {"torch._foreach_mul_": 1}, small["graph"]



ENCODER_STEP = """
import torch, torch.nn as nn
torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32)  # dropout 0.1, training mode
model = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(model, backend=BACKEND)
x = torch.randn(5, 2, 16)
for _ in range(2):
    step(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
def test_a_wrong_kernel_before_a_dropout_is_captured_in_a_training_step(tmp_path):
    """Inductor's ReLU made wrong (its own bug injection) in a TransformerEncoder training step:
    the dropout after it draws Inductor's own numbers, so its output, the only one, was set aside
    and no dump was written, through the API and ``graphdbg capture --`` alike. In accuracy mode
    Inductor draws eager's numbers (``fallback_random``, recorded); the dump is written."""
    program = tmp_path / "encoder_step.py"
    program.write_text(ENCODER_STEP.replace("BACKEND", "'inductor'"))
    r = run_graphdbg("capture", "--mode", "accuracy", "--dump-dir", tmp_path / "cli", "--", sys.executable, program, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = _manifest(_only_dump(tmp_path / "cli"))
    assert manifest["failure"]["kind"] == "accuracy" and manifest["config"]["values"]["inductor.fallback_random"] is True, r.stderr[-3000:]

    with torch._inductor.config.patch({}):  # the program's settings, undone after it
        exec(compile(ENCODER_STEP, str(program), "exec"),
             {"BACKEND": graphdbg.capture("inductor", tmp_path / "api", mode="accuracy")})
    assert _manifest(_only_dump(tmp_path / "api"))["failure"]["kind"] == "accuracy"
    assert not torch._inductor.config.fallback_random  # the user's setting, as it was
