"""On the GPU machine: a 4-rank world on 1 GPU and on 2 GPUs (ranks share them, gloo), and,
where there are 4 GPUs, the same world under NCCL with one GPU per rank; the outcomes agree.

    nvidia-h200-x2: the 1- and 2-GPU runs;  nvidia-h200-x4: also the NCCL run.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import FIXTURES, ROOT
from dist_programs import capture_world

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _children_find_test_modules(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


def _rows(cli, *args):
    r = cli("replay", *map(str, args), "--all-ranks", "--device", "cuda", "--timeout", "300", "--json")
    assert r.code in (0, 1), r
    data = json.loads(r.out)
    return data, [(row["rank"], row["status"], row["signature"]) for row in data["ranks"]]


def test_four_ranks_on_one_and_two_gpus_match_nccl_on_four(tmp_path, cli):
    dumps = capture_world(4, str(tmp_path), "backends_for_tests:refuses_collectives")  # captured on the CPU
    results = {}
    for gpus in (1, 2, 4):
        if gpus > torch.cuda.device_count():
            continue
        for backend in ("eager", "backends_for_tests:refuses_collectives"):
            data, rows = _rows(cli, dumps, "--gpus", gpus, "--backend", backend)
            assert data["pg_backend"] == ("nccl" if gpus == 4 else "gloo")
            assert data["devices"] == {str(r): f"cuda:{r % gpus}" for r in range(4)}
            results[gpus, backend] = rows
    assert results[1, "eager"] == [(r, "pass", None) for r in range(4)]
    assert {s for _, _, s in results[1, "backends_for_tests:refuses_collectives"]} == {
        "NotImplementedError: no lowering for _c10d_functional.all_reduce"}
    for (gpus, backend), rows in results.items():
        assert rows == results[1, backend], (gpus, backend)
    if torch.cuda.device_count() < 4:
        pytest.skip(f"the NCCL run needs 4 GPUs, this machine has {torch.cuda.device_count()} (1- and 2-GPU runs agreed)")


def test_a_printed_graph_world_shares_one_gpu(cli):
    data, rows = _rows(cli, FIXTURES / "world_printed" / "Qwen3-0.6B", "--graph", "9", "--gpus", "1")
    assert data["pg_backend"] == "gloo" and set(data["devices"].values()) == {"cuda:0"}
    assert rows == [(r, "pass", None) for r in range(4)]
