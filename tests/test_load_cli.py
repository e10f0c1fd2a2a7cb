"""graphdbg.load, `graphdbg ls` and `graphdbg show` on committed fixtures, and on bad input."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import FIXTURES

import graphdbg
from fixtures import programs
from graphdbg.store.manifest import find_dumps

LS_KEYS = {"path", "rank", "world_size", "id", "nodes", "kind", "backend", "error_type", "message", "signature", "graph_hash",
           "frame", "compile_id", "module", "parent", "piece", "children", "custom_ops", "triton_kernels"}
GROUP_KEYS = {"id", "nodes", "kind", "backend", "error_type", "message", "signature", "graph_hash", "ranks", "paths", "differs",
              "frame", "compile_id", "modules", "frames"}


def test_load_fixture_and_run_it():
    dump = graphdbg.load(FIXTURES / "block_compile_error")
    assert dump.failure_kind == "compile_error" and dump.rank == 0
    case = dump.case()
    assert case.device == torch.device("cpu")
    assert not case.stand_ins
    model, x = programs.tiny_block()
    torch.testing.assert_close(case.run_eager()[0], model(x))
    nodes = dump.nodes()
    assert len(nodes) == dump.node_count
    assert nodes.source.notna().sum() > 30
    table = dump.inputs_table()
    assert set(table.kind) == {"tensor"} and table.stored.all()


def test_loading_never_executes_graph_code(tmp_path, fixture_copy):
    path = fixture_copy("block_compile_error")
    marker = tmp_path / "pwned"
    graph = path / "graph.py"
    graph.write_text(f"open({str(marker)!r}, 'w').write('x')\n" + graph.read_text())
    with pytest.raises(graphdbg.GraphSourceError):
        graphdbg.load(path).case()
    assert not marker.exists()


def test_ls_groups_identical_failures_across_ranks(tmp_path, monkeypatch, cli):
    model, x = programs.tiny_block()
    backend = programs.refuses_gelu
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        torch._dynamo.reset()
        with pytest.raises(Exception):
            torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path))(x)
    shutil.copytree(FIXTURES / "block_runtime_error", tmp_path / "other")

    r = cli("ls", tmp_path, "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert set(data) == {"graphdbg", "schema", "root", "dumps", "groups", "summary", "problems"}
    assert len(data["dumps"]) == 4 and all(set(d) == LS_KEYS for d in data["dumps"])
    assert len(data["groups"]) == 2 and all(set(g) == GROUP_KEYS for g in data["groups"])
    by_kind = {g["kind"]: g for g in data["groups"]}
    assert sorted(by_kind["compile_error"]["ranks"]) == [0, 1, 2]
    assert by_kind["compile_error"]["error_type"] == "NotImplementedError"
    assert by_kind["compile_error"]["message"] == "no lowering for gelu"

    r = cli("ls", tmp_path)
    assert r.code == 0
    assert "0-2" in r.out and "compile_error" in r.out and "runtime_error" in r.out


def test_show_prints_the_graph_with_source_lines_and_inputs(cli):
    r = cli("show", FIXTURES / "block_accuracy")
    assert r.code == 0, r
    assert "accuracy" in r.out and "max abs error" in r.out
    assert "programs.py:" in r.out and "x * torch.rsqrt(var + self.eps) * self.weight" in r.out
    assert "torch.rsqrt" in r.out and "norm1" in r.out
    assert "inputs" in r.out and "l_x_" in r.out

    r = cli("show", FIXTURES / "block_dynamic", "--json")
    data = json.loads(r.out)
    assert data["kind"] == "runtime_error"
    assert any(row["dtype"] == "sym" for row in data["nodes_table"])
    assert any(row["kind"] == "symint" and row["value"] == "s77=2" for row in data["inputs_table"])


def _one_line_error(r, code=2):
    assert r.code == code, r
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphdbg: error:"), r.err
    return lines[0]


def test_not_a_dump(tmp_path, cli):
    (tmp_path / "notes.txt").write_text("hello")
    r = cli("ls", tmp_path)  # nothing failed: nothing to list, and that is fine
    assert r.code == 0 and "no dumps under" in r.out and r.err == "", r
    assert "no such file" in _one_line_error(cli("show", tmp_path / "missing"))


def test_truncated_tensors(fixture_copy, cli):
    path = fixture_copy("block_runtime_error")
    tensors = path / "inputs.safetensors"
    data = tensors.read_bytes()
    tensors.write_bytes(data[: len(data) // 2])
    line = _one_line_error(cli("show", path))
    assert "inputs.safetensors" in line and "truncated" in line
    with pytest.raises(graphdbg.DumpError, match="truncated"):
        graphdbg.load(path)


def test_missing_and_malformed_manifest(fixture_copy, cli):
    path = fixture_copy("block_runtime_error")
    manifest = path / "manifest.json"
    manifest.write_text(manifest.read_text()[:200])
    assert "malformed manifest" in _one_line_error(cli("show", path))
    manifest.unlink()
    assert "no graphdbg dumps here" in _one_line_error(cli("show", path)) or "not a graphdbg dump" in _one_line_error(cli("show", path))


def test_schema_from_the_future(fixture_copy, cli):
    path = fixture_copy("block_runtime_error")
    manifest = path / "manifest.json"
    m = json.loads(manifest.read_text())
    m["schema_version"] = 99
    m["env"]["graphdbg"] = "9.0"
    manifest.write_text(json.dumps(m))
    line = _one_line_error(cli("show", path))
    assert "schema version 99" in line and "upgrade graphdbg" in line


def test_ls_reports_a_broken_dump_among_good_ones(tmp_path, cli):
    shutil.copytree(FIXTURES / "block_runtime_error", tmp_path / "good")
    shutil.copytree(FIXTURES / "block_compile_error", tmp_path / "bad")
    (bad,) = find_dumps(tmp_path / "bad")
    (bad / "manifest.json").write_text("{")
    r = cli("ls", tmp_path, "--json")
    assert r.code == 0  # listed as a problem; --strict makes it fail
    assert cli("ls", tmp_path, "--json", "--strict").code == 2
    data = json.loads(r.out)
    assert len(data["dumps"]) == 1 and len(data["problems"]) == 1
    assert "malformed manifest" in data["problems"][0]["error"]


def test_half_written_dumps_are_invisible(tmp_path, cli):
    shutil.copytree(FIXTURES / "block_runtime_error", tmp_path / "d")
    (src,) = find_dumps(tmp_path / "d")
    shutil.copytree(src, src.parent / ".tmp-g0-runtime_error-xyz-1-abcd")
    assert len(find_dumps(tmp_path)) == 1
