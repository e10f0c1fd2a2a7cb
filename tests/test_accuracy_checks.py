"""Accuracy mode compares each graph's first calls with eager, then a sample of the later ones
(issue 39: comparing every call doubled the cost of a healthy training step); a failure that
starts at a later call is still caught (``capture/accuracy_checks.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import graphdbg
from fixtures.training import mlp
from fixtures.training_steps import LATE_CALL, MixerBlock, late_backward_backend, late_forward_backend


def _dumps(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("rank*/*/manifest.json"))


def test_the_policy_compares_the_first_calls_then_one_in_every():
    counter = graphdbg.AccuracyChecks(first=4, every=16).counter("g0")
    due = [counter.due() for _ in range(4 + 3200)]
    assert all(due[:4])
    later = sum(due[4:])
    assert 3200 / 16 * 0.8 < later < 3200 / 16 * 1.2, later  # drawn: about 1 in 16
    # not periodic: the compared calls fall on odd and even calls alike
    odd = sum(d for i, d in enumerate(due[4:]) if i % 2)
    assert 0.3 < odd / later < 0.7
    # the same draws each run, another graph's apart
    again = graphdbg.AccuracyChecks(first=4, every=16).counter("g0")
    assert [again.due() for _ in range(4 + 3200)] == due
    other = graphdbg.AccuracyChecks(first=4, every=16).counter("g1")
    assert [other.due() for _ in range(4 + 3200)] != due
    every = graphdbg.AccuracyChecks(every=1).counter("g0")
    assert all(every.due() for _ in range(100))
    first_only = graphdbg.AccuracyChecks(first=2, every=0).counter("g0")
    assert [first_only.due() for _ in range(50)] == [True, True] + [False] * 48


def test_the_policy_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GRAPHDBG_ACCURACY_CHECKS", "2,8")
    assert graphdbg.capture("eager", mode="accuracy").checks == graphdbg.AccuracyChecks(2, 8)
    monkeypatch.setenv("GRAPHDBG_ACCURACY_CHECKS", "all")
    assert graphdbg.capture("eager", mode="accuracy").checks.every == 1
    monkeypatch.setenv("GRAPHDBG_ACCURACY_CHECKS", "often")
    with pytest.raises(ValueError, match="GRAPHDBG_ACCURACY_CHECKS must be FIRST,EVERY"):
        graphdbg.capture("eager", mode="accuracy")


def test_a_forward_that_goes_wrong_at_a_later_call_is_caught(tmp_path, cli):
    """An MLP-Mixer block whose compiled forward is right for 30 calls, then off: the default
    policy (first 4, then 1 in 16) catches it a few calls later, and the dump says when."""
    torch.manual_seed(0)
    block, x = MixerBlock(), torch.randn(2, 8, 16)
    backend = graphdbg.capture(late_forward_backend, tmp_path / "dumps", mode="accuracy")
    compiled = torch.compile(block, backend=backend)
    with torch.no_grad():
        for _ in range(LATE_CALL + 200):
            compiled(x)
    (dump,) = _dumps(tmp_path / "dumps")
    m = json.loads((dump / "manifest.json").read_text())
    assert m["failure"]["kind"] == "accuracy" and m["failure"]["signature"] == "accuracy: output 0 value"
    checks = m["accuracy_checks"]
    assert LATE_CALL < checks["call"] <= LATE_CALL + 200 and (checks["first"], checks["every"]) == (4, 16)
    assert checks["compared"] < checks["call"] / 2  # sampled: most calls ran without eager beside them
    # replayed, the backend's counter starts again: its first call is right, and replay says so
    r = cli("replay", dump, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "pass", r


def test_a_backward_that_goes_wrong_at_a_later_step_is_caught(tmp_path):
    model, x = mlp()
    backend = graphdbg.capture(late_backward_backend, tmp_path / "dumps", mode="accuracy",
                               checks=graphdbg.AccuracyChecks(first=2, every=8))
    compiled = torch.compile(model, backend=backend)
    for _ in range(LATE_CALL + 120):
        compiled(x).square().mean().backward()
    (dump,) = _dumps(tmp_path / "dumps")
    m = json.loads((dump / "manifest.json").read_text())
    assert m["stage"] == "backward" and m["failure"]["signature"] == "accuracy: gradient 0 value"
    assert LATE_CALL < m["accuracy_checks"]["call"] and (m["accuracy_checks"]["first"], m["accuracy_checks"]["every"]) == (2, 8)


def test_first_calls_only_misses_a_late_failure_by_choice(tmp_path):
    """``every=0`` compares the first calls only: the late failure goes by, as the user asked."""
    torch.manual_seed(0)
    block, x = MixerBlock(), torch.randn(2, 8, 16)
    backend = graphdbg.capture(late_forward_backend, tmp_path / "dumps", mode="accuracy",
                               checks=graphdbg.AccuracyChecks(first=4, every=0))
    compiled = torch.compile(block, backend=backend)
    with torch.no_grad():
        for _ in range(LATE_CALL + 40):
            compiled(x)
    assert _dumps(tmp_path / "dumps") == []
