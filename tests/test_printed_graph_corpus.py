"""Printed GraphModule files from real SGLang + ThunderFX runs, read and replayed as users would.

The files under fixtures/sglang-thunderfx are the whole corpus, byte for byte (its README says from where);
fixtures/corpus holds 16 of them, for the tests that replay every file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SGLANG_CORPUS

import graphdbg
from graphdbg.dump import Dump
from graphdbg.errors import GraphSourceError
from graphdbg.graph import allow_list
from graphdbg.rebuild import stand_ins

ROOT = Path(__file__).resolve().parent.parent
CORPUS_FIXTURES = ROOT / "fixtures" / "corpus"
NEXT = CORPUS_FIXTURES / "Qwen3-Next-80B-A3B-Instruct"
FIXTURE_FILES = sorted(CORPUS_FIXTURES.rglob("*.py"))
# Inputs of several GB (a Mamba cache): run_case's clones and float64 reference would copy them.
STREAM_GRAPHS = {"graph_module_170076.py", "graph_module_956955.py"}


def _kinds(case) -> set[str]:
    return {s.kind for s in case.stand_ins}


@pytest.mark.parametrize("path", [p for p in FIXTURE_FILES if p.name not in STREAM_GRAPHS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_loads_and_replays_under_eager_with_its_stand_ins(path):
    dump = graphdbg.load(path)
    assert type(dump) is Dump and dump.format == "printed_graph" and dump.failure_kind == "printed_graph"
    case = dump.case("cpu", seed=0)
    outcome = case.run("eager")
    assert outcome.status == "pass", outcome.summary()
    # every input is a named, synthesized stand-in, and the outcome lists every stand-in
    placeholders = [n.name for n in case.placeholders]
    assert [s.name for s in case.stand_ins if s.kind == "synthesized"] == placeholders
    # the outcome lists every stand-in, then what the verdict did not see (uninitialised outputs)
    described = [s.describe() for s in case.stand_ins]
    assert outcome.stand_ins[:len(described)] == described
    assert all(extra.startswith("outputs not compared:") for extra in outcome.stand_ins[len(described):])
    for construct in dump.manifest.printed.constructs:
        if construct.startswith("torch.ops.sglang."):
            assert any(construct in s.detail for s in case.stand_ins if s.kind in ("collective", "custom_op")), construct


@pytest.mark.parametrize("name", sorted(STREAM_GRAPHS))
def test_the_failing_qwen3_next_graph_runs_with_streams_triton_kernels_and_collectives_stood_in(name):
    dump = graphdbg.load(NEXT / name)
    assert dump.manifest.dist.source == "device_index" and dump.captured_device.type == "cuda"
    case = dump.case("cpu")
    kinds = _kinds(case)
    assert {"synthesized", "stream", "triton_kernel", "collective", "device"} <= kinds
    # the same alt stream (stream_id=35) is one object in both places the graph builds it
    assert sum(1 for s in case.stand_ins if s.kind == "stream" and "stream_id=35" in s.detail) == 1
    assert sum(1 for s in case.stand_ins if s.kind == "triton_kernel") == 4
    # the 5 GB Mamba cache is read at one layer's slot only (mamba_cache[0]): made with that slot
    # alone, and the stand-ins say so
    cache = next(v for n, v in zip(case.placeholders, case.inputs) if n.name.endswith("mamba_cache_1_"))
    mine = [s for s in case.stand_ins if s.name.endswith("mamba_cache_1_")]
    assert cache.shape == (1, 513, 4, 128, 128)
    assert any(s.kind == "shrunk" and "f32[36, 513, 4, 128, 128]" in s.detail for s in mine)
    hidden, residual = case.run_eager()
    assert hidden.shape == (1, 2048) and torch.isfinite(hidden.float()).all() and torch.isfinite(residual.float()).all()


def test_integer_inputs_index_inside_what_they_index():
    # Qwen3-Next's vocab-parallel embedding on rank 3: the token must fall in rank 3's shard,
    # or masked_fill zeroes the row and the graph computes nothing worth debugging.
    dump = graphdbg.load(NEXT / "rank3_0.py")
    for seed in range(5):
        case = dump.case("cpu", seed=seed)
        token = case.inputs[0]
        assert token.dtype == torch.int64 and 3 * 18992 <= int(token) < 4 * 18992
    assert case.run("eager").status == "pass"
    (out,) = case.run_eager()
    assert out.abs().sum() > 0
    # a graph_module file has no header: its rank comes from the shard it tests for
    assert graphdbg.load(NEXT / "graph_module_216725.py").rank == 4


def test_index_aware_synthesis_on_a_graph_dynamo_printed(tmp_path):
    printed = []

    def keep(gm, example_inputs):
        printed.append(gm.print_readable(print_output=False))
        return gm.forward

    def moe(ids, table, w, cache, loc, kv, positions, rope, cu_seqlens, mask):
        h = torch.nn.functional.embedding(ids, table)
        picked = w[ids.view(-1)[:2]]
        cache[loc] = kv
        rot = rope.index_select(0, positions.flatten() + 1)
        return h.sum() + picked.sum() + rot.sum() + cu_seqlens.sum() + mask.sum()

    args = (torch.zeros(3, dtype=torch.long), torch.randn(50, 4), torch.randn(7, 4), torch.zeros(30, 2), torch.zeros(1, dtype=torch.long),
            torch.randn(1, 2), torch.zeros(3, dtype=torch.long), torch.randn(16, 4), torch.zeros(5, dtype=torch.int32), torch.ones(3, dtype=torch.bool))
    torch.compile(moe, backend=keep, fullgraph=True)(*args)
    path = tmp_path / "moe_rank0.py"
    path.write_text(printed[0])
    case = graphdbg.load(path).case("cpu", seed=3)
    values = {n.name: v for n, v in zip(case.placeholders, case.inputs)}
    ids = next(v for k, v in values.items() if k.startswith("l_ids"))
    assert 0 <= int(ids.min()) and int(ids.max()) < 7  # both an embedding row (50) and a w row (7)
    loc = next(v for k, v in values.items() if k.startswith("l_loc"))
    assert 0 <= int(loc) < 30
    positions = next(v for k, v in values.items() if k.startswith("l_positions"))
    assert 0 <= int(positions.min()) and int(positions.max()) + 1 < 16  # the graph indexes with positions + 1
    cu = next(v for k, v in values.items() if k.startswith("l_cu_seqlens")).tolist()
    assert cu[0] == 0 and cu == sorted(cu) and cu[-1] == 3  # 3 tokens (the ids' length)
    assert case.run("eager").status == "pass"
    # same seed, same values; another seed, other values
    again = graphdbg.load(path).case("cpu", seed=3)
    assert all(torch.equal(a, b) for a, b in zip(case.inputs, again.inputs))
    other = graphdbg.load(path).case("cpu", seed=4)
    assert not all(torch.equal(a, b) for a, b in zip(case.inputs, other.inputs))


def test_show_and_replay_through_the_cli(cli):
    path = NEXT / "rank0_0.py"
    r = cli("show", path, "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert (data["kind"], data["rank"], data["graph"], data["model"]) == ("printed_graph", 0, 0, "Qwen3-Next-80B-A3B-Instruct")
    assert data["world_size"] == 4  # the fixture folder holds ranks 0 and 3 (the corpus holds 0-7)
    first = data["inputs_table"][0]
    assert first["name"] == "l_input_" and "integers in [0, 18992)" in first["value"]
    r = cli("show", path)
    assert r.code == 0 and "l_input_" in r.out and "synthesized" in r.out, r

    r = cli("replay", path, "--backend", "eager", "--device", "cpu", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["status"] == "pass" and data["isolated"] and data["reproduces"] is False
    assert any("inplace_all_reduce" in s and "world of one" in s for s in data["stand_ins"])
    assert any(s.startswith("l_input_: synthesized") for s in data["stand_ins"])


def test_nodes_table_names_the_missing_op():
    df = graphdbg.load(NEXT / "graph_module_765413.py").nodes()
    assert "torch.ops.sglang.inplace_all_reduce" in set(df["target"])
    assert df.loc[df["name"] == "output_parallel", "source"].item().endswith("unquant.py:83")


def test_ls_groups_ranks_of_the_same_graph_and_names_what_needs_stand_ins(cli):
    r = cli("ls", CORPUS_FIXTURES, "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert len(data["dumps"]) == len(FIXTURE_FILES) and not data["problems"]
    by_files = {tuple(sorted(g["files"])): g for g in data["groups"]}
    vocab = by_files[("rank0_0.py", "rank3_0.py")]
    assert vocab["model"] == "Qwen3-Next-80B-A3B-Instruct" and vocab["ranks"] == [0, 3] and vocab["graphs"] == [0]
    assert [0, 3 * 18992] in vocab["rank_literals"]  # the shard starts differ, nothing else structural
    streams = by_files[("graph_module_170076.py", "graph_module_956955.py")]
    assert sorted(streams["ranks"]) == [0, 3] and streams["graphs"] == []
    assert {"torch.cuda.streams.Stream", "torch.ops.higher_order.triton_kernel_wrapper_mutation",
            "torch.ops.sglang.inplace_all_reduce", "torch._C._cuda_exchangeDevice"} <= set(streams["constructs"])
    assert sorted(by_files[("graph_module_216725.py", "graph_module_765413.py")]["ranks"]) == [0, 4]
    assert by_files[("rank0_0.py", "rank1_0.py")]["model"] == "Qwen3-0.6B"
    r = cli("ls", CORPUS_FIXTURES)
    assert r.code == 0 and "needs stand-ins" in r.out and "sglang.inplace_all_reduce" in r.out, r


def test_ls_over_the_whole_corpus_groups_every_rank():
    # how fast: benchmarks/corpus_ls.py (a timed assertion here only measures CI's neighbours)
    from graphdbg.listing import list_dumps

    listing = list_dumps(SGLANG_CORPUS)
    groups = listing.groups
    assert len(listing.dumps) == 152 and not listing.problems
    world = {"Qwen3-Next-80B-A3B-Instruct": 8, "Qwen3-0.6B": 4, "Llama-4-Maverick-17B-128E-Instruct": 4, "Mixtral-8x7B-Instruct-v0.1": 4}
    for g in groups:
        assert sorted(set(g["ranks"])) == list(range(world[g["model"]])), (g["model"], g["files"])
    next_groups = [g for g in groups if g["model"] == "Qwen3-Next-80B-A3B-Instruct"]
    assert sorted(len(g["files"]) for g in next_groups) == [8, 8, 8]


def test_a_registered_op_replaces_its_stand_in(tmp_path, monkeypatch):
    monkeypatch.setattr(allow_list, "_allowed_namespaces", [])
    monkeypatch.setenv(stand_ins.OPS_ENV, "")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = tmp_path / "custom.py"
    graph.write_text(
        "class GraphModule(torch.nn.Module):\n"
        '    def forward(self, l_x_: "f32[2, 3]"):\n'
        '        y: "f32[2, 3]" = torch.ops.graphdbg_test_ns.scale_by_two(l_x_);  l_x_ = None\n'
        '        z: "f32[2, 3]" = graphdbg_test_user_ops.plus_one(y);  y = None\n'
        "        return (z,)\n")
    # graphdbg_test_user_ops is nobody's namespace yet: refused with its line
    with pytest.raises(GraphSourceError, match=r"custom.py:4: cannot resolve graphdbg_test_user_ops.plus_one"):
        graphdbg.load(graph)
    (tmp_path / "graphdbg_test_user_ops.py").write_text(
        "import torch\n"
        "def plus_one(x):\n    return x + 1\n")
    stand_ins.register_ops(["graphdbg_test_user_ops"])
    case = graphdbg.load(graph).case("cpu")
    (stood_in,) = [s for s in case.stand_ins if s.kind == "custom_op"]
    assert "torch.ops.graphdbg_test_ns.scale_by_two is not on this machine: returns zeros f32[2, 3]" in stood_in.detail
    assert torch.equal(case.run_eager()[0], torch.ones(2, 3))

    (tmp_path / "graphdbg_test_real_ops.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('graphdbg_test_ns::scale_by_two', mutates_args=())\n"
        "def scale_by_two(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
        "@scale_by_two.register_fake\n"
        "def _(x):\n    return torch.empty_like(x)\n")
    stand_ins.register_ops(["graphdbg_test_real_ops"])
    assert set(stand_ins.allowed_namespaces()) == {"graphdbg_test_user_ops", "graphdbg_test_real_ops"}
    import os
    assert os.environ[stand_ins.OPS_ENV] == "graphdbg_test_user_ops,graphdbg_test_real_ops"  # for isolated children
    case = graphdbg.load(graph).case("cpu")
    assert "custom_op" not in _kinds(case)
    x = case.inputs[0]
    assert torch.equal(case.run_eager()[0], x * 2 + 1)
    assert case.run("eager").status == "pass"


def _one_line_error(r):
    assert r.code == 2 and r.out == "", r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphdbg: error:"), r.err
    return lines[0]


def test_bad_input_is_one_line_with_file_and_line(tmp_path, cli):
    good = (NEXT / "graph_module_216725.py").read_text()
    cases = {
        "truncated.py": (good[:3000], r"truncated.py:37: forward has no return statement \(truncated\?\)"),
        "annotation.py": (good.replace('"i64[1]"', '"i64[1"'), r"annotation.py:2: cannot read the annotation 'i64\[1'"),
        "system.py": (good.replace("torch.nn.functional.embedding(", "os.system("), r"system.py:43: refusing os.system"),
        "unknown.py": (good.replace("torch.nn.functional.embedding(", "torch.nn.functional.embeddingg("),
                       r"unknown.py:43: cannot resolve torch.nn.functional.embeddingg"),
        "program.py": ("import os\nos.system('echo hi')\n", r"program.py:1: refusing import of os"),
        "notes.txt": ("not a graph, just words\n", r"notes.txt:1: not a readable printed graph"),
        "binary.py": (None, r"binary.py:1: not a printed graph: not UTF-8 text"),
    }
    import re

    for name, (text, pattern) in cases.items():
        path = tmp_path / name
        if text is None:
            path.write_bytes(b"\xff\xfe\x00graph")
        else:
            path.write_text(text)
        for command in ("show", "replay"):
            line = _one_line_error(cli(command, path))
            assert re.search(pattern, line), (command, line)
    # ls lists the broken ones as problems among good ones and exits 0; --strict exits 2
    shutil.copy(NEXT / "rank0_0.py", tmp_path / "rank0_0.py")
    assert cli("ls", tmp_path, "--strict").code == 2
    r = cli("ls", tmp_path, "--json")
    data = json.loads(r.out)
    assert r.code == 0 and len(data["dumps"]) == 1 and data["summary"]["unreadable"] == 4
    assert {Path(p["path"]).name for p in data["problems"]} == {"truncated.py", "annotation.py", "system.py", "unknown.py"}


def test_a_piece_copy_nothing_calls_lists_no_stand_ins_of_its_own():
    # Inductor pieces print with an `_orig_mod` class holding the same graph; nothing calls it
    dump = graphdbg.load(CORPUS_FIXTURES / "Qwen3-0.6B" / "rank0_0.py")
    case = dump.case("cpu")
    names = [s.name for s in case.stand_ins]
    assert "inductor_1.inplace_all_reduce" in names and not any("_orig_mod" in n for n in names)
    assert case.run("eager").status == "pass"


def test_a_manifest_saved_under_the_old_name_foreign_still_reads_as_a_printed_graph():
    dump = graphdbg.load(FIXTURE_FILES[0])
    old = json.loads(json.dumps(dump.manifest_data))
    old["foreign"] = old.pop("printed_graph")
    old["failure"]["kind"] = "foreign"
    again = Dump(dump.path, old, dump.contents)
    assert again.failure_kind == "printed_graph"
    facts = lambda d: (d.manifest.printed.model, d.manifest.printed.graph_number, d.manifest.printed.group_hash)  # noqa: E731
    assert facts(again) == facts(dump) and facts(dump)[0] is not None
    assert again.summary()["kind"] == "printed_graph"
