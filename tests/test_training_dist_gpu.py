"""On the GPU machine: the FSDP-style training step of ``test_training_dist`` (sharded parameters,
all-gather in the forward graph, reduce-scatter in the backward graph), captured on 4 ranks
(gloo, on the CPU: a capture whose rank fails leaves NCCL peers waiting until its watchdog ends
them, without their dumps), then replayed as a world on the CPU, on 1 GPU (ranks share it,
gloo) and on 4 GPUs (NCCL): rank 1's backward compiler fails the same way everywhere, the
other ranks never pass, and the eager backend passes on every rank under NCCL.

DDP on 2 GPUs under NCCL, ``torch.compile(DDP(model))`` and ``DDP(torch.compile(model))``, on the torch there.

    nvidia-h100-x1: the CPU and 1-GPU worlds;  nvidia-h100-x4: also the NCCL worlds.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import ROOT
from dist_programs import ddp_rank, sharded_rank, spawn_world

import graphdbg
from graphdbg.store.manifest import find_dumps

pytestmark = pytest.mark.gpu
REDUCE_SCATTER = "NotImplementedError: no reduce-scatter lowering for 6 rows (tiles of 4)"
OWN = "world_backends:reduce_scatter_needs_tiled_rows"


@pytest.fixture(autouse=True)
def _children_find_test_modules(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def sharded4(tmp_path_factory):
    return spawn_world(sharded_rank, 4, str(tmp_path_factory.mktemp("sharded4")), "world_backends:forward_as_is", OWN, 1)


def _world(cli, dumps, *args: str) -> dict:
    r = cli("replay", dumps, "--all-ranks", "--graph", "g0-backward", "--json", *args)
    assert r.code in (0, 1), r
    return json.loads(r.out)


def _verdict(data: dict) -> tuple:
    rows = {row["rank"]: row for row in data["ranks"]}
    return (rows[1]["status"], rows[1]["signature"]), sorted(r for r, row in rows.items() if row["status"] == "pass")


def test_sharded_world_on_the_cpu_and_on_one_gpu_agree(sharded4, cli):
    r = cli("bisect", "ranks", sharded4, "--json")
    assert r.code == 1 and json.loads(r.out)["odd"] == [1], r
    cpu = _world(cli, sharded4, "--trust-backend", "--timeout", "120")
    one = _world(cli, sharded4, "--trust-backend", "--device", "cuda", "--gpus", "1", "--timeout", "120")
    assert one["pg_backend"] == "gloo" and set(one["devices"].values()) == {"cuda:0"}
    assert _verdict(cpu) == _verdict(one) == (("crash", REDUCE_SCATTER), []), (cpu, one)


def test_sharded_world_under_nccl_on_four_gpus(sharded4, cli):
    if torch.cuda.device_count() < 4:
        pytest.skip(f"the NCCL world needs 4 GPUs, this machine has {torch.cuda.device_count()}")
    # ranks 0, 2 and 3 wait in NCCL's reduce-scatter for rank 1, which failed: a timeout, not a pass
    nccl = _world(cli, sharded4, "--trust-backend", "--device", "cuda", "--gpus", "4", "--timeout", "90")
    assert nccl["pg_backend"] == "nccl" and nccl["devices"] == {str(r): f"cuda:{r}" for r in range(4)}
    assert _verdict(nccl) == (("crash", REDUCE_SCATTER), []), nccl
    ok = _world(cli, sharded4, "--backend", "eager", "--device", "cuda", "--gpus", "4", "--timeout", "120")
    assert [row["status"] for row in ok["ranks"]] == ["pass"] * 4, ok


@pytest.mark.parametrize("outside", [False, True], ids=["DDP(compile(model))", "compile(DDP(model))"])
def test_ddp_split_on_two_gpus_under_nccl(tmp_path, cli, outside):
    """DDP as users run it on GPUs, on the GPU machine's torch, compiled outside DDP and inside it:
    the bucket split reaches the backend, the GELU piece fails on both ranks (both batches are
    short: a rank failing alone would leave its NCCL peer in DDP's all-reduce until the watchdog
    ends it), ``ls`` groups the two ranks, and the world of that piece replays under NCCL with
    the captured verdict."""
    if torch.cuda.device_count() < 2:
        pytest.skip(f"DDP under NCCL needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    dumps = spawn_world(ddp_rank, 2, str(tmp_path), "world_backends:gelu_needs_tiled_rows", "all", "error", "cuda", outside)
    failed = [d for d in map(graphdbg.load, find_dumps(dumps)) if d.failure_kind == "compile_error"]
    assert sorted((d.rank, d.manifest_data["ddp"]["piece"], d.manifest_data["ddp"]["bucket_count"]) for d in failed) == [
        (0, "submod_2", 4), (1, "submod_2", 4)]
    r = cli("ls", dumps, "--json")
    groups = [g for g in json.loads(r.out)["groups"] if g["kind"] == "compile_error"]
    assert [sorted(g["ranks"]) for g in groups] == [[0, 1]], groups
    graph = failed[0].path.name.split("-")[0]
    r = cli("replay", dumps, "--all-ranks", "--graph", graph, "--trust-backend", "--device", "cuda", "--gpus", "2",
            "--timeout", "120", "--json")
    data = json.loads(r.out)
    assert data["pg_backend"] == "nccl" and r.code == 1, r
    assert {(row["status"], row["signature"]) for row in data["ranks"]} == {
        ("crash", "NotImplementedError: no GELU kernel for 6 rows (tiles of 4)")}
