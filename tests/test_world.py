"""Many ranks on the CPU with gloo: capture every rank, replay one rank, replay the whole world."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT
from dist_programs import capture_world

import graphdbg
from graphdbg.store.manifest import find_dumps


@pytest.fixture(autouse=True)
def _children_find_test_modules(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def world2(tmp_path_factory):
    return capture_world(2, str(tmp_path_factory.mktemp("world2")), "backends_for_tests:refuses_collectives")


@pytest.mark.slow
def test_each_rank_writes_its_own_dump_with_its_groups(world2):
    dumps = [graphdbg.load(p) for p in find_dumps(world2)]
    assert sorted(d.rank for d in dumps) == [0, 1]
    for d in dumps:
        dist = d.manifest_data["dist"]
        assert dist["world_size"] == 2 and dist["backend"] == "gloo" and dist["source"] == "torch.distributed"
        (group,) = dist["collectives"]
        assert group["name"] == "0" and group["ranks"] == [0, 1] and group["size"] == 2
        assert group["ops"] == ["torch.ops._c10d_functional.all_reduce"]
        assert d.signature == "NotImplementedError: no lowering for _c10d_functional.all_reduce"
    # the same failure on both ranks: one group in ls
    from graphdbg.listing import list_dumps

    (g,) = [g for g in list_dumps(world2).groups]
    assert sorted(g["ranks"]) == [0, 1]


@pytest.mark.slow
def test_replay_all_ranks_with_real_collectives(world2, cli):
    r = cli("replay", world2, "--all-ranks", "--backend", "eager", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["world_size"] == 2 and data["device"] == "cpu"
    assert [(row["rank"], row["status"]) for row in data["ranks"]] == [(0, "pass"), (1, "pass")]
    r = cli("replay", world2, "--all-ranks", "--trust-backend", "--json")  # the dumps' own backend: the captured failure, on every rank
    rows = json.loads(r.out)["ranks"]
    assert r.code == 1 and {row["signature"] for row in rows} == {"NotImplementedError: no lowering for _c10d_functional.all_reduce"}


def _children() -> set[int]:
    """This process' live (not zombie) children (Linux: /proc/self/task/*/children)."""
    live = set()
    for task in Path("/proc/self/task").glob("*/children"):
        for pid in task.read_text().split():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue  # ended meanwhile
            if state != "Z":
                live.add(int(pid))
    return live


@pytest.mark.slow
def test_a_rank_stuck_in_a_collective_is_a_timeout(world2, cli):
    before = _children()
    r = cli("replay", world2, "--all-ranks", "--backend", "backends_for_tests:hang_on_rank1", "--timeout", "15", "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert [(row["rank"], row["status"]) for row in data["ranks"]] == [(0, "timeout"), (1, "timeout")]
    assert _children() <= before  # every child was ended, none left running


@pytest.mark.slow
def test_when_one_rank_crashes_gloo_tells_the_others(world2, cli):
    r = cli("replay", world2, "--all-ranks", "--backend", "backends_for_tests:crash_on_rank1", "--timeout", "60", "--json")
    assert r.code == 1, r
    rows = {row["rank"]: row for row in json.loads(r.out)["ranks"]}
    assert rows[1]["status"] == "crash" and rows[1]["signature"] == "RuntimeError: rank 1 backend failure"
    assert rows[0]["status"] == "crash" and "Connection closed by peer ?:?" in rows[0]["signature"]


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_gets_its_exit_code_from_torchrun(world2, cli):
    r = cli("replay", world2, "--all-ranks", "--backend", "world_backends:segfault_on_rank1", "--direct", "--timeout", "120",
            "--json")
    assert r.code == 1, r
    rows = {row["rank"]: row for row in json.loads(r.out)["ranks"]}
    assert rows[1]["status"] == "crash" and rows[1]["signature"] == "Signal SIGSEGV", rows[1]
    assert "Fatal Python error: Segmentation fault" in rows[1]["stderr_tail"]
    # rank 0 hears it from gloo, or is ended by torchrun: a crash either way, never a hang
    sig = rows[0]["signature"]
    assert rows[0]["status"] == "crash" and (sig == "TorchrunEnded: a peer failed" or "by peer" in sig), rows[0]


def test_fewer_processes_than_ranks_is_refused_with_the_way_out(world2, cli):
    r = cli("replay", world2, "--all-ranks", "--nproc", "1", "--trust-backend")
    assert r.code == 2 and "need all 2 ranks" in r.err and "graphdbg replay" in r.err


@pytest.mark.slow
def test_four_ranks_replay(tmp_path, cli):
    dumps = capture_world(4, str(tmp_path), "backends_for_tests:refuses_collectives")
    assert len(find_dumps(dumps)) == 4
    r = cli("replay", dumps, "--all-ranks", "--backend", "aot_eager", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert [row["status"] for row in data["ranks"]] == ["pass"] * 4
    assert data["pg_backend"] == "gloo" and [row["device"] for row in data["ranks"]] == ["cpu"] * 4


@pytest.mark.slow
def test_triage_flags_the_rank_that_differs(tmp_path, cli):
    """Rank 2 was built with the wrong shard size: its graph and inputs differ from ranks 0, 1 and 3."""
    dumps = capture_world(4, str(tmp_path), "backends_for_tests:refuses_collectives", differ_rank=2)
    r = cli("ls", dumps, "--json")
    assert r.code == 0, r
    groups = json.loads(r.out)["groups"]
    by_ranks = {tuple(sorted(g["ranks"])): g for g in groups}
    assert set(by_ranks) == {(0, 1, 3), (2,)}
    assert by_ranks[(0, 1, 3)]["differs"] == []
    assert by_ranks[(2,)]["differs"] == ["graph", "inputs"]
    r = cli("ls", dumps)
    assert "differs from the other ranks" in r.out and "graph, inputs" in r.out
    r = cli("bisect", "ranks", dumps, "--json")
    assert r.code == 1, r
    assert json.loads(r.out)["odd"] == [2]


def test_one_rank_alone_gets_world_of_one_collectives(world2, cli):
    (rank1,) = [p for p in find_dumps(world2) if p.parent.name == "rank1"]
    r = cli("replay", rank1, "--backend", "eager", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    collectives = [s for s in data["stand_ins"] if "collective" in s]
    assert len(collectives) == 2 and all("world of one" in s for s in collectives)
    assert any("_c10d_functional.all_reduce" in s for s in collectives)


def test_each_ranks_graph_on_its_own_gpu_hashes_as_one_graph():
    """Rank r of a world runs its graph on cuda:r: the graph's identity (what `ls` groups ranks
    by, what `bisect ranks` compares) leaves the device index out, not the device type."""
    from graphdbg.graph.hashing import graph_hash
    from graphdbg.graph.parser import parse_printed_graph

    def printed(device: str) -> str:
        kind, _, index = device.partition(":")
        literal = f"device(type='{kind}', index={index})" if index else f"device(type='{kind}')"
        return (
            "class GraphModule(torch.nn.Module):\n"
            f"    def forward(self, L_x_: \"f32[4, 8][8, 1]{device}\"):\n"
            "        l_x_ = L_x_\n"
            f"        ones = torch.ones(4, 8, device={literal})\n"
            "        add = l_x_ + ones;  l_x_ = ones = None\n"
            "        return (add,)\n"
        )

    hashes = {d: graph_hash(parse_printed_graph(printed(d)).graph) for d in ("cuda:0", "cuda:1", "cuda:7", "cpu")}
    assert hashes["cuda:0"] == hashes["cuda:1"] == hashes["cuda:7"] != hashes["cpu"]
