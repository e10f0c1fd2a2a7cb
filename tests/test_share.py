"""graphdbg share: a copy of a dump of a small transformer block with no original parameter
values, that still fails the same way; and the bisection over which values must stay real."""

from __future__ import annotations

import json
import shutil

import planted_secrets
import pytest
import torch
from conftest import FIXTURES
from share_backends import sparse_lowering

import graphdbg
from fixtures.programs import tiny_block
from graphdbg.store.tensor_file import read_tensors


def _parameters(manifest):
    return [d for d in manifest["inputs"] if d.get("parameter")]


@pytest.mark.slow
def test_shared_dump_has_no_original_parameter_values_and_still_fails(tmp_path, cli):
    src = next((FIXTURES / "block_compile_error").glob("rank0/g0-*"))
    original = read_tensors(src / "inputs.safetensors")
    out = tmp_path / "shared"
    r = cli("share", src, "-o", out, "--trust-backend", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["reproduces"] and data["signature"] == "NotImplementedError: no lowering for gelu"
    manifest = json.loads((out / "manifest.json").read_text())
    params = _parameters(manifest)
    assert len(params) >= 6 and all(d["stored"] is None and d["stats"]["std"] >= 0 for d in params)
    shared = read_tensors(out / "inputs.safetensors")
    for key, value in shared.items():  # only the block's input activations stay, none of its weights
        assert not any(key == f"input/{d['node']}" for d in params)
        assert torch.equal(value, original[key])
    assert data["original_bytes"] == sum(v.numel() * v.element_size() for v in shared.values()) == manifest["stored_bytes"]
    assert data["original_bytes"] < sum(v.numel() * v.element_size() for v in original.values())
    assert manifest["redacted"] is True and "hostname" not in manifest["env"]
    # the copy is a dump like any other: it loads, and replays to the same failure
    r = cli("replay", out, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r


@pytest.mark.slow
def test_share_keeps_the_weight_the_failure_needs(tmp_path, cli):
    model, x = tiny_block()
    with torch.no_grad():
        model.mlp.up.weight[3].zero_()  # a pruned row: the backend's bug needs it
    compiled = torch.compile(model, backend=graphdbg.capture(sparse_lowering, dump_dir=tmp_path / "dumps"))
    try:
        compiled(x)
    except RuntimeError:
        pass
    src = next((tmp_path / "dumps").glob("rank0/g0-runtime_error-*"))
    r = cli("share", src, "-o", tmp_path / "shared", "--trust-backend", "--no-isolate", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["reproduces"] and data["signature"].startswith("RuntimeError: sparse lowering: a weight has an empty row")
    assert data["kept_for_failure"] == ["l_self_modules_mlp_modules_up_parameters_weight_"]
    assert "looking for the values the failure needs" in r.err
    manifest = json.loads((tmp_path / "shared" / "manifest.json").read_text())
    dropped = [d for d in _parameters(manifest) if d["stored"] is None]
    assert len(dropped) == len(_parameters(manifest)) - 1
    assert data["original_bytes"] == manifest["stored_bytes"] and data["original_bytes"] >= 128 * 32 * 4


def test_redact_drop_weights_is_share_and_bad_input_is_one_line(tmp_path, cli):
    src = next((FIXTURES / "block_compile_error").glob("rank0/g0-*"))
    r = cli("redact", src, "--drop-weights")
    assert r.code == 2 and r.err.strip() == "graphdbg: error: redact --drop-weights writes a copy: give it --out", r
    r = cli("redact", src, "--drop-weights", "-o", tmp_path / "shared")  # the backend is code the dump names
    assert r.code == 2 and "graphdbg share" in r.err and "--trust-backend" in r.err and len(r.err.strip().splitlines()) == 1, r
    r = cli("share", tmp_path / "nowhere", "-o", tmp_path / "x")
    assert r.code == 2 and r.err.strip().splitlines()[-1].endswith("share takes one graphdbg dump folder"), r
    assert not (tmp_path / "shared").exists() and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_share_leaves_no_secret_in_any_byte(tmp_path, cli):
    src = tmp_path / "dump"
    shutil.copytree(next((FIXTURES / "block_compile_error").glob("rank0/g0-*")), src)
    planted_secrets.plant(src)
    assert len(planted_secrets.leaks(src)) >= len(planted_secrets.SECRETS)
    out = tmp_path / "shared"
    r = cli("share", src, "-o", out, "--trust-backend", "--no-isolate", "--json")
    assert r.code == 0 and json.loads(r.out)["reproduces"], r
    assert planted_secrets.leaks(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["graph.py", "inputs.safetensors", "manifest.json"]
    r = cli("replay", out, "--no-isolate", "--trust-backend", "--json")  # the shared copy is a dump that still fails
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
