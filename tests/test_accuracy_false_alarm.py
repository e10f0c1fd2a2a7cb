"""Accuracy mode doesn't cry wolf (issue 27, item 3): a healthy backend on a training step with
dropout writes no dump, a wrong one still does.

Inductor draws its own random numbers, so outputs that flow from dropout can't be compared with
eager's; other differences must also be farther from float64 than eager is to count.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import graphdbg

ROOT = Path(__file__).resolve().parent.parent


def _dumps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("rank*/*") if p.is_dir())


def _encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).train()


def _train_step(model: nn.Module, backend) -> torch.Tensor:
    torch.manual_seed(1)
    x, w = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    loss = (torch.compile(model, backend=backend)(x) * w).sum()
    loss.backward()
    return loss.detach()


@pytest.mark.slow
def test_transformer_encoder_training_step_with_inductor_writes_no_accuracy_dump(tmp_path, capfd):
    model = _encoder()
    wrapped = graphdbg.capture("inductor", tmp_path, mode="accuracy")
    loss = _train_step(model, wrapped)
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert wrapped.dumps == [] and _dumps(tmp_path) == []
    # accuracy mode compiles a graph with random ops drawing eager's numbers: its outputs are compared, not set aside
    assert "depend on random ops not compared" not in capfd.readouterr().err


@pytest.mark.slow
def test_wrong_forward_and_gradient_on_the_same_model_are_still_dumped_and_replay_mismatches(
        tmp_path, cli, monkeypatch):
    from model_backends import bw_scales_a_gradient, fw_adds_a_hundredth
    from torch._dynamo.backends.common import aot_autograd

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "helpers"))
    model = _encoder()
    wrapped = graphdbg.capture(aot_autograd(fw_compiler=fw_adds_a_hundredth, bw_compiler=bw_scales_a_gradient),
                               tmp_path / "dumps", mode="accuracy")
    _train_step(model, wrapped)
    kinds = {}
    for dump in _dumps(tmp_path / "dumps"):
        manifest = json.loads((dump / "manifest.json").read_text())
        kinds[manifest.get("stage") or "forward"] = manifest["failure"]
    assert set(kinds) == {"forward", "backward"}, kinds
    assert all(f["kind"] == "accuracy" for f in kinds.values())
    [m] = kinds["forward"]["mismatches"]
    assert m["index"] == 0 and m["max_abs_error"] == pytest.approx(1e-2, rel=1e-3)
    assert kinds["backward"]["mismatches"]

    forward = next(d for d in _dumps(tmp_path / "dumps") if "backward" not in d.name)
    r = cli("replay", forward, "--trust-backend", "--json")
    assert r.code == 1, r
    assert json.loads(r.out)["status"] == "mismatch"


def _dropout_head(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.nn.functional.dropout(x, 0.5, True) * 2, y.sum(0)


def _draws_otherwise(gm, example_inputs):
    """A healthy backend with random numbers of its own (as Inductor has): it draws once first."""

    def run(*args):
        torch.rand(1)
        return gm(*args)

    return run


def _draws_otherwise_and_is_off(gm, example_inputs):
    def run(*args):
        torch.rand(1)
        out = gm(*args)
        return out[0], out[1] + 1

    return run


def test_random_outputs_a_backend_draws_otherwise_are_set_aside_but_the_others_still_count(tmp_path):
    x, y = torch.randn(64), torch.randn(16, 8)
    healthy = graphdbg.capture(_draws_otherwise, tmp_path / "healthy", mode="accuracy")
    torch.manual_seed(0)
    got = torch.compile(_dropout_head, backend=healthy)(x, y)
    assert healthy.dumps == []
    torch.manual_seed(0)
    torch.rand(1)
    torch.testing.assert_close(got, _dropout_head(x, y))  # the user's result is the backend's, unchanged

    torch._dynamo.reset()
    wrong = graphdbg.capture(_draws_otherwise_and_is_off, tmp_path / "wrong", mode="accuracy")
    torch.compile(_dropout_head, backend=wrong)(x, y)
    [dump] = wrong.dumps
    [m] = json.loads((dump / "manifest.json").read_text())["failure"]["mismatches"]
    assert m["index"] == 1 and m["max_abs_error"] == pytest.approx(1.0)


def test_a_backend_that_draws_as_eager_is_compared_on_its_random_outputs(tmp_path):
    def off_on_dropout(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return out[0] + 1e-2, out[1]

        return run

    wrapped = graphdbg.capture(off_on_dropout, tmp_path, mode="accuracy")
    torch.compile(_dropout_head, backend=wrapped)(torch.randn(64), torch.randn(16, 8))
    [dump] = wrapped.dumps
    [m] = json.loads((dump / "manifest.json").read_text())["failure"]["mismatches"]
    assert m["index"] == 0


def _cancels(a: torch.Tensor, big: torch.Tensor) -> torch.Tensor:
    return (a + big) - big  # float32 keeps a to within big's ulp; float64 keeps it whole


def _in_float64(gm, example_inputs):
    """A backend more accurate than eager: it computes in float64 and rounds once."""

    def run(*args):
        return tuple(o.float() for o in gm(*(a.double() for a in args)))

    return run


def _off_by_one(gm, example_inputs):
    def run(*args):
        return tuple(o + 1 for o in gm(*args))

    return run


def test_a_difference_float64_sides_with_the_backend_on_is_no_mismatch(tmp_path):
    a, big = torch.randn(32), torch.full((32,), 1e5)
    eager = _cancels(a, big)
    assert (eager - a).abs().max() > 1e-3  # eager itself is this far off: tolerance alone would cry wolf
    accurate = graphdbg.capture(_in_float64, tmp_path / "accurate", mode="accuracy")
    torch.compile(_cancels, backend=accurate)(a, big)
    assert accurate.dumps == []

    torch._dynamo.reset()
    wrong = graphdbg.capture(_off_by_one, tmp_path / "wrong", mode="accuracy")
    torch.compile(_cancels, backend=wrong)(a, big)
    assert len(wrong.dumps) == 1
