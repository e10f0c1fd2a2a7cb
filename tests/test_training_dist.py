"""Training on several ranks as people run it, on the CPU with gloo (2 spawned ranks each):

- DDP: ``torch.compile(DDP(model))`` (and ``DDP(torch.compile(model))`` in a world of one),
  where Dynamo's DDP optimizer splits the graph at bucket boundaries and hands each piece to the
  backend; the backend fails on one bucket's piece, on the rank whose batch is short.
- FSDP2 (``fully_shard``), compiled: on torch 2.13 its hooks run eagerly, so the graphs hold
  the compute only; the backward compiler fails on the rank whose batch is short.
- FSDP-style sharded parameters (all-gathered in the forward, their gradients reduce-scattered
  in the backward: functional collectives in both graphs); the backward compiler fails on the
  rank whose batch is short, and the other rank's reduce-scatter is cut off.

Each capture spawns two ranks and compiles (~30 s here): one capture per program, shared by its tests.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch
import torch.distributed as dist
from backends_for_tests import crash_on_call
from conftest import ROOT
from dist_programs import ddp_rank, fsdp2_rank, sharded_rank, spawn_world
from torch._dynamo.backends.common import aot_autograd
from torch.nn.parallel import DistributedDataParallel as DDP
from world_backends import backward_needs_tiled_rows, forward_as_is, gelu_piece_fails_when_run

import graphdbg
from graphdbg.store.manifest import find_dumps

GELU = "NotImplementedError: no GELU kernel for 6 rows (tiles of 4)"
REDUCE_SCATTER = "NotImplementedError: no reduce-scatter lowering for 6 rows (tiles of 4)"


@pytest.fixture(autouse=True)
def _children_find_test_modules(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def ddp_dumps(tmp_path_factory):
    # mode="always": every piece of every rank is dumped, so the world has rank 0's piece too
    return spawn_world(ddp_rank, 2, str(tmp_path_factory.mktemp("ddp")), "world_backends:gelu_needs_tiled_rows", 1, "always")


@pytest.fixture(scope="module")
def fsdp2_dumps(tmp_path_factory):
    return spawn_world(fsdp2_rank, 2, str(tmp_path_factory.mktemp("fsdp2")), "world_backends:forward_as_is",
                       "world_backends:backward_needs_tiled_rows", 1)


@pytest.fixture(scope="module")
def sharded_dumps(tmp_path_factory):
    return spawn_world(sharded_rank, 2, str(tmp_path_factory.mktemp("sharded")), "world_backends:forward_as_is",
                       "world_backends:reduce_scatter_needs_tiled_rows", 1)


def _by_name(root: str) -> dict[str, Any]:
    return {f"{p.parent.name}/{p.name}" if p.name != "forward" else f"{p.parent.parent.name}/{p.parent.name}/forward":
            graphdbg.load(p) for p in find_dumps(root)}


@pytest.mark.slow
def test_ddp_pieces_are_dumped_with_their_bucket_and_the_whole_graph(ddp_dumps):
    dumps = _by_name(ddp_dumps)
    failed = {k: d for k, d in dumps.items() if d.failure_kind != "captured"}
    (name, piece), = failed.items()  # rank 1's GELU bucket only: rank 0's batch fills the tiles
    assert name.startswith("rank1/") and piece.signature == GELU
    ddp = piece.manifest_data["ddp"]
    assert (ddp["piece"], ddp["bucket"], ddp["bucket_count"]) == ("submod_2", 2, 4)
    assert ddp["bucket_bytes_cap"] == 1 << 20 and ddp["bytes"] == (512 * 512 + 512) * 4
    assert ddp["param_count"] == 2 and all("_layers_modules_2_" in p for p in ddp["params"]), ddp  # the third block's weight and bias
    parent = piece.manifest_data["parent"]
    assert parent["piece"] == "submod_2" and parent["position"] == 2
    whole = dumps[f"rank1/{parent['dir']}"]  # the graph before the split, its pieces linked
    assert whole.failure_kind == "captured" and whole.graph_hash == parent["graph_hash"]
    assert [b["bytes"] for b in whole.manifest_data["ddp"]["buckets"]] == [(512 * 512 + 512) * 4] * 4
    assert [c["signature"] for c in whole.manifest_data["children"]] == [GELU]
    pieces = sorted(k for k in dumps if k.startswith("rank0/") and dumps[k].manifest_data.get("ddp", {}).get("piece"))
    assert [dumps[k].manifest_data["ddp"]["piece"] for k in pieces] == [f"submod_{i}" for i in range(4)]


@pytest.mark.slow
def test_ddp_failing_piece_replays_alone_and_as_a_world(ddp_dumps, cli):
    (piece,) = [p for p in find_dumps(ddp_dumps) if "compile_error" in p.name]
    r = cli("replay", piece, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == GELU, r
    r = cli("bisect", "ranks", ddp_dumps, "--json")
    report = json.loads(r.out)
    assert r.code == 1 and report["odd"] == [1], report
    assert any(d.startswith("error: " + GELU) for d in report["differences"]["1"])
    graph = piece.name.split("-")[0]  # g<seq>.3: the same piece on every rank
    r = cli("replay", ddp_dumps, "--all-ranks", "--graph", graph, "--trust-backend", "--timeout", "120", "--json")
    assert r.code == 1, r
    rows = json.loads(r.out)["ranks"]
    assert [(row["rank"], row["status"], row["signature"]) for row in rows] == [(0, "pass", None), (1, "crash", GELU)]
    assert "captured" in rows[0]["dump"] and "compile_error" in rows[1]["dump"]


@pytest.mark.slow
def test_sharded_backward_failure_is_dumped_on_every_rank(sharded_dumps, cli):
    dumps = _by_name(sharded_dumps)
    (own,) = [d for k, d in dumps.items() if k.startswith("rank1/") and d.manifest_data.get("stage") == "backward"]
    (cut,) = [d for k, d in dumps.items() if k.startswith("rank0/") and d.manifest_data.get("stage") == "backward"]
    assert own.failure_kind == "compile_error" and own.signature == REDUCE_SCATTER
    assert cut.failure_kind == "runtime_error" and "Connection closed by peer" in cut.signature
    for d in (own, cut):  # the collectives are in the graphs: reduce-scatter in the backward, all-gather in its forward
        assert any("reduce_scatter_tensor" in op for op in d.manifest_data["graph"]["ops"])
        assert d.manifest_data["dist"]["collectives"][0]["ranks"] == [0, 1]
        forward = graphdbg.load(d.path / "forward")
        assert any("all_gather_into_tensor" in op for op in forward.manifest_data["graph"]["ops"])
    r = cli("bisect", "ranks", sharded_dumps, "--json")
    report = json.loads(r.out)
    assert r.code == 1 and report["odd"] == [1], report  # rank 0 only met rank 1's failure in its reduce-scatter
    assert report["differences"]["1"][-1].startswith(f"error: {REDUCE_SCATTER} vs RuntimeError")
    r = cli("replay", own.path, "--trust-backend", "--direct", "--json")  # one rank alone, on one device
    assert r.code == 1 and json.loads(r.out)["signature"] == REDUCE_SCATTER, r


@pytest.mark.slow
def test_sharded_world_replays_with_the_captured_verdict(sharded_dumps, cli):
    r = cli("replay", sharded_dumps, "--all-ranks", "--graph", "g0-backward", "--trust-backend", "--timeout", "120", "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["pg_backend"] == "gloo" and data["backend"] == "world_backends:reduce_scatter_needs_tiled_rows"
    rows = {row["rank"]: row for row in data["ranks"]}
    assert rows[1]["status"] == "crash" and rows[1]["signature"] == REDUCE_SCATTER
    # rank 0 compiles and waits in its real reduce-scatter until rank 1 is gone, as at capture
    assert rows[0]["status"] == "crash" and "Connection closed by peer" in rows[0]["signature"], rows[0]


@pytest.mark.slow
def test_ddp_piece_failing_when_it_runs_links_the_whole_graph_with_that_call(tmp_path, cli):
    """A world of one rank (DDP needs a process group, not several): the split is the same, and a
    piece whose code raises is dumped with that call's inputs, the whole graph with its own."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                    torch.nn.GELU(), torch.nn.Linear(512, 512))
        backend = graphdbg.capture(gelu_piece_fails_when_run, dump_dir=tmp_path)
        with pytest.raises(RuntimeError, match="illegal memory access in the GELU kernel"):
            DDP(torch.compile(model, backend=backend), bucket_cap_mb=1)(torch.randn(4, 512))
    finally:
        dist.destroy_process_group()
    dumps = {p.name.split("-")[1]: graphdbg.load(p) for p in find_dumps(tmp_path)}
    piece, whole = dumps["runtime_error"], dumps["captured"]
    assert piece.manifest_data["ddp"]["piece"] == "submod_1" and piece.manifest_data["ddp"]["bucket_count"] == 3
    assert piece.manifest_data["inputs_state"] == whole.manifest_data["inputs_state"] == "after_failed_call"
    assert [c["dir"] for c in whole.manifest_data["children"]] == [piece.path.name]
    assert len(whole.manifest_data["ddp"]["buckets"]) == 3 and whole.manifest_data["inputs"][0]["stored"]
    for d in (piece, whole):  # the piece alone, and the graph before the split, both reproduce
        r = cli("replay", d.path, "--trust-backend", "--json")
        assert r.code == 1 and json.loads(r.out)["signature"] == "RuntimeError: illegal memory access in the GELU kernel", r


@pytest.mark.slow
def test_fsdp2_backward_failure_on_one_rank(fsdp2_dumps, cli):
    """Rank 1's backward compiler fails; rank 0's backward graph compiles and runs, and rank 0
    then fails in FSDP2's own reduce-scatter, outside any graph: it has nothing to dump."""
    dumps = _by_name(fsdp2_dumps)
    assert dumps and all(k.startswith("rank1/") for k in dumps), sorted(dumps)
    (backward,) = [d for k, d in dumps.items() if k.count("/") == 1]
    assert backward.manifest_data["stage"] == "backward" and backward.failure_kind == "compile_error"
    assert backward.signature == "NotImplementedError: no backward kernel for 6 rows (tiles of 4)"
    for d in (backward, graphdbg.load(backward.path / "forward")):  # FSDP2's collectives ran in its hooks, eagerly
        assert not any("c10d" in op for op in d.manifest_data["graph"]["ops"]) and not d.manifest_data["dist"]["collectives"]
    r = cli("replay", backward.path, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == backward.signature, r
    r = cli("bisect", "ranks", fsdp2_dumps)
    assert r.code == 2 and "needs dumps of at least two ranks (found [1])" in r.err, r


def test_capture_leaves_the_programs_storage_resizable(tmp_path):
    """Writing a tensor into a dump never views its storage through numpy, which would pin it:
    FSDP2 frees and regrows its unsharded parameters with ``resize_`` after capture saw them."""
    x = torch.randn(64, 64)
    with pytest.raises(ValueError, match="compiled code failed"):
        torch.compile(lambda t: t.sin() + 1, backend=graphdbg.capture(crash_on_call, dump_dir=tmp_path))(x)
    (dump,) = [graphdbg.load(p) for p in find_dumps(tmp_path)]
    assert dump.manifest_data["inputs"][0]["stored"]  # x's values, written from x itself
    x.untyped_storage().resize_(0)  # RuntimeError "Trying to resize storage that is not resizable" before
    assert x.untyped_storage().nbytes() == 0


@pytest.mark.slow
def test_ddp_piece_failing_in_its_backward_keeps_its_bucket(tmp_path, cli):
    """The backward of a piece is compiled when DDP's backward runs: its dump names the bucket too."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
        backend = graphdbg.capture(aot_autograd(fw_compiler=forward_as_is, bw_compiler=backward_needs_tiled_rows),
                                   dump_dir=tmp_path)
        with pytest.raises(NotImplementedError, match="no backward kernel for 6 rows"):
            DDP(torch.compile(model, backend=backend), bucket_cap_mb=1)(torch.randn(6, 512)).sum().backward()
    finally:
        dist.destroy_process_group()
    (path,) = [p for p in find_dumps(tmp_path) if p.name != "forward"]
    dump = graphdbg.load(path)
    assert dump.manifest_data["stage"] == "backward" and dump.manifest_data["ddp"]["piece"] == "submod_1"  # the last bucket's runs first
    assert graphdbg.load(path / "forward").manifest_data["ddp"]["bucket"] == 1
    r = cli("replay", path, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == dump.signature, r
