"""Worlds launched by torchrun on the CPU (gloo): a printed-graph group of 4 ranks replayed as a
world, the same 4 ranks as two "nodes" on localhost, the memory check, and bisect ranks on
printed-graph folders. Each launch starts 4 rank processes: few launches, each with a timeout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES, ROOT

TP4 = FIXTURES / "world_printed" / "Qwen3-0.6B"  # SGLang TP=4 files of Qwen3-0.6B, graphs 0 and 9


@pytest.fixture(autouse=True)
def _children_find_test_modules(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_a_printed_graph_group_replays_as_a_world_with_real_collectives(cli):
    r = cli("replay", TP4, "--all-ranks", "--graph", "9", "--timeout", "240", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["graph"] == "Qwen3-0.6B/9" and data["world_size"] == 4
    assert data["pg_backend"] == "gloo" and data["devices"] == {str(i): "cpu" for i in range(4)}
    assert [(row["rank"], row["device"], row["status"]) for row in data["ranks"]] == [(i, "cpu", "pass") for i in range(4)]
    for row in data["ranks"]:
        assert row["dump"].endswith(f"rank{row['rank']}_9.py")
        real = [s for s in row["stand_ins"] if "collective" in s]
        assert real and all("a real all_reduce (in place) over group 'tp:0' (ranks 0-3, gloo)" in s for s in real)
        assert not any("world of one" in s for s in row["stand_ins"])


@pytest.mark.slow
def test_a_rank_that_fails_leaves_its_peers_waiting_in_a_real_all_reduce(cli):
    """Rank 1's backend refuses; ranks 0, 2 and 3 go on into the graph's all-reduce and learn
    from gloo that their peer is gone: only a real collective can tell them."""
    r = cli("replay", TP4, "--all-ranks", "--graph", "9", "--backend", "backends_for_tests:crash_on_rank1", "--direct",
            "--timeout", "240", "--json")
    assert r.code == 1, r
    rows = {row["rank"]: row for row in json.loads(r.out)["ranks"]}
    assert rows[1]["status"] == "crash" and rows[1]["signature"] == "RuntimeError: rank 1 backend failure"
    for rank in (0, 2, 3):
        assert rows[rank]["status"] == "crash" and "Connection closed by peer" in rows[rank]["signature"], rows[rank]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_four_ranks_as_two_nodes_each_reporting_its_own(tmp_path):
    port = str(_free_port())
    env = {**os.environ, "COLUMNS": "200"}
    nodes = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(TP4), "--all-ranks", "--graph", "9", "--nnodes", "2",
               "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", port, "--timeout", "240", "--direct",
               "--json"]
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = []
    for proc in nodes:
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in nodes:
                p.kill()
            raise
        results.append((proc.returncode, out, err))
    for node, (code, out, err) in enumerate(results):
        assert code == 0, (node, out[-2000:], err[-2000:])
        data = json.loads(out)
        assert (data["nnodes"], data["node_rank"], data["world_size"]) == (2, node, 4)
        mine = [2 * node, 2 * node + 1]
        assert [(row["rank"], row["status"]) for row in data["ranks"]] == [(r, "pass") for r in mine]
        assert sorted(map(int, data["devices"])) == mine
    # each node says what the other runs: the same command, its node rank, port and backend pinned
    (line,) = [x for x in results[0][2].splitlines() if "run:" in x]
    assert "graphdbg replay" in line and "--nnodes 2" in line and f"--master-port {port}" in line
    assert line.rstrip().endswith("--pg-backend gloo --node-rank 1")


def test_ranks_whose_inputs_do_not_fit_are_refused_with_the_largest_world_that_does(cli):
    # graph 9's inputs are 4.5 MiB a rank; 10 MiB hold two ranks on the one device (the CPU)
    r = cli("replay", TP4, "--all-ranks", "--graph", "9", "--max-memory-gb", str(10 / 1024))
    assert r.code == 2, r
    assert len(r.err.strip().splitlines()) == 1
    assert "the inputs of the 4 ranks on cpu need" in r.err and "the largest world that fits is 2 ranks" in r.err
    r = cli("replay", TP4, "--all-ranks", "--graph", "9", "--pg-backend", "nccl")
    assert r.code == 2 and "NCCL needs one GPU per rank" in r.err, r
    r = cli("replay", TP4, "--all-ranks")
    assert r.code == 2 and "several printed graphs (Qwen3-0.6B/0, Qwen3-0.6B/9)" in r.err, r


def test_bisect_ranks_on_printed_graphs_names_the_rank_that_differs(tmp_path, cli):
    r = cli("bisect", "ranks", TP4, "--json")
    assert r.code == 0, r
    report = json.loads(r.out)
    assert report["odd"] == [] and report["ranks"] == [0, 1, 2, 3]
    # the vocab-shard bounds differ on every rank by design: noted, not flagged
    assert any(n.startswith("Qwen3-0.6B/0: 6 literals follow the rank") for n in report["notes"]), report["notes"]

    folder = tmp_path / "Qwen3-0.6B"
    shutil.copytree(TP4, folder)
    shard = folder / "rank2_0.py"  # rank 2 computed its vocab shard's end wrongly
    shard.write_text(shard.read_text().replace("l_input_ < 113952", "l_input_ < 113000"))
    norm = folder / "rank3_9.py"  # rank 3's graph has another op
    norm.write_text(norm.read_text().replace("torch.rsqrt(add_1)", "torch.sqrt(add_1)"))
    r = cli("bisect", "ranks", folder, "--json")
    assert r.code == 1, r
    report = json.loads(r.out)
    assert report["odd"] == [2, 3]
    assert report["differences"]["2"][0] == ("Qwen3-0.6B/0: literal 113000 in thunder_0.lt, where ranks 0, 1, 3 follow "
                                             "37984 * rank + 37984 (rank 2: 113952)")
    assert report["differences"]["3"] == ["Qwen3-0.6B/9: graph: node thunder_1.rsqrt torch.sqrt f32[1, 1] vs "
                                          "thunder_1.rsqrt torch.rsqrt f32[1, 1] (majority)"]
    r = cli("bisect", "ranks", folder, "--graph", "9", "--json")
    assert json.loads(r.out)["odd"] == [3]


def test_a_torchrun_left_waiting_after_its_ranks_are_done_is_ended(tmp_path, monkeypatch):
    """Every rank of this node wrote its outcome, and torchrun still hasn't exited (its agent in
    torch elastic's 300 s exit barrier for a node that has gone): it is ended shortly after."""
    from graphdbg.execution import world

    monkeypatch.setattr(world, "EXIT_WAIT_S", 0.5)
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text("{}")
    stuck = [sys.executable, "-c", "import sys, time; print('in the exit barrier', file=sys.stderr, flush=True); time.sleep(120)"]
    started = time.monotonic()
    codes, timed_out, err = world._run_torchrun(stuck, tmp_path, [0, 1], timeout=100)
    assert not timed_out and codes == {} and "in the exit barrier" in err
    assert time.monotonic() - started < 30
