"""A dump is untrusted input: hand-made hostile manifests are refused with exit 2 and one line
naming the field, by `show` and `replay` alike, within seconds; the writer checks the same schema."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest

FIXTURE = "block_runtime_error"


def _edit(folder: Path, change) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _unstored(m: dict, stats) -> None:
    """The first stored input becomes one replay must regenerate from ``stats``."""
    d = next(d for d in m["inputs"] if d.get("stored"))
    d["stored"], d["stats"] = None, stats


def _set_rank(m, value):
    m["dist"]["rank"] = value


HOSTILE = {
    "dist a list": (lambda m: m.update(dist=[0, 1]), "dist: must be an object (got a list of 2)"),
    "failure a string": (lambda m: m.update(failure="boom"), "failure: must be an object (got 'boom')"),
    "graph a list": (lambda m: m.update(graph=["graph.py"]), "graph: must be an object"),
    "rank zero": (lambda m: _set_rank(m, "zero"), "dist.rank: must be an integer (got 'zero')"),
    "rank a bool": (lambda m: _set_rank(m, True), "dist.rank: must be an integer (got True)"),
    "rank past world": (lambda m: _set_rank(m, 7), "dist: rank 7 is not below world_size 1"),
    "NaN in stats": (lambda m: _unstored(m, {"numel": 512, "mean": float("nan"), "std": 1.0}), "stats.mean: must be a finite number"),
    "stats as strings": (lambda m: _unstored(m, {"numel": "512", "mean": "0.1"}), "stats.numel: must be an integer (got '512')"),
    "stats a string": (lambda m: _unstored(m, "min=0"), "stats: must be an object"),
    "10**12 elements": (lambda m: _unstored(m, {"numel": 10**12}), "stats.numel: 1000000000000 elements is more than"),
    "huge shape": (lambda m: m["inputs"][0].update(shape=[10**6, 10**6], stride=[10**6, 1]), "inputs[0]: shape [1000000, 1000000] has more than 2**36 elements"),
    "9**9**9 shape": (lambda m: m["inputs"][0].update(shape=["9**9**9", 8, 32]), "inputs[0].shape[0]: must be an integer (got '9**9**9')"),
    "9**9**9 symbolic": (lambda m: m["inputs"][0].update(symbolic_shape=["9**9**9", 8, 32]), "inputs[0].symbolic_shape[0]: symbolic size '9**9**9' is too large"),
    "2**2**100 hint": (lambda m: m["inputs"].append({"kind": "symint", "expr": "s9", "hint": "2**2**100"}),
                       "].hint: must be a number, a bool or null (got '2**2**100')"),
    "code in a dim": (lambda m: m["inputs"][0].update(symbolic_shape=["__import__('os')", 8, 32]), "inputs[0].symbolic_shape[0]: not a symbolic size expression"),
    "stride mismatch": (lambda m: m["inputs"][0].update(stride=[1]), "inputs[0]: stride has 1 dims, shape has 3"),
    "bad device": (lambda m: m["inputs"][0].update(device="cuda:abc"), "inputs[0].device: string should match pattern"),
    "int value a string": (lambda m: m["inputs"].__setitem__(0, {"kind": "int", "value": "3", "node": "x"}), "inputs[0]: value is not a valid int (got '3')"),
    "inputs a dict": (lambda m: m.update(inputs={"x": 1}), "inputs: must be a list"),
    "no failure": (lambda m: m.pop("failure"), "manifest lacks 'failure'"),
    "negative nodes": (lambda m: m["graph"].update(nodes=-1), "graph.nodes: input should be greater than or equal to 0"),
    "future schema": (lambda m: m.update(schema_version=99), "schema version 99 is newer"),
    "huge integer": (lambda m: m["graph"].update(nodes=2**200), "graph.nodes: input should be less than or equal to"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE), ids=lambda c: c.replace(" ", "_"))
def test_hostile_manifest_is_refused_by_show_and_replay(cli, fixture_copy, case):
    change, says = HOSTILE[case]
    folder = fixture_copy(FIXTURE)
    _edit(folder, change)
    for command in (["show", folder], ["replay", folder, "--no-isolate", "--backend", "eager"]):
        r = cli(*command)
        assert r.code == 2, r
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"graphdbg: error: {folder / 'manifest.json'}"), r
        assert says in lines[0], r


def test_json_nested_100000_deep_is_refused_before_parsing(cli, fixture_copy):
    folder = fixture_copy(FIXTURE)
    text = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text(text.rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for command in (["show", folder], ["replay", folder]):
        r = cli(*command)
        assert r.code == 2 and "nested 25 deep" in r.err and len(r.err.strip().splitlines()) == 1, r


@pytest.mark.parametrize("text", ["[1, 2]", "{\"schema\": \"graphdbg.dump\"", "\xff\xfe", "NaN"], ids=["list", "truncated", "not-utf8", "nan"])
def test_manifest_that_is_not_an_object_is_refused(cli, fixture_copy, text):
    folder = fixture_copy(FIXTURE)
    (folder / "manifest.json").write_bytes(text.encode("latin-1"))
    r = cli("show", folder)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r


def test_nine_to_the_nine_to_the_nine_in_a_printed_graph(cli, tmp_path):
    graph = tmp_path / "rank0_0.py"
    graph.write_text('class GraphModule(torch.nn.Module):\n'
                     '    def forward(self, L_x_: "f32[9**9**9][1]cpu", L_n_: "Sym(2**2**100)"):\n'
                     '        y: "f32[4][1]cpu" = torch.sin(L_x_)\n'
                     '        return (y,)\n')
    for command in (["show", graph], ["replay", graph, "--no-isolate", "--backend", "eager"]):
        r = cli(*command)
        assert r.code == 2 and "'9**9**9' is too large" in r.err, r
    assert cli("ls", graph).code in (0, 2)  # lists it, without evaluating the size


def test_million_node_printed_graph_fails_fast(cli, tmp_path):
    graph = tmp_path / "rank0_0.py"
    body = "".join(f"        x{i + 1}: \"f32[4][1]cpu\" = torch.sin(x{i})\n" for i in range(1_000_000))
    graph.write_text('class GraphModule(torch.nn.Module):\n    def forward(self, x0: "f32[4][1]cpu"):\n'
                     + body + "        return (x1000000,)\n")
    r = cli("show", graph)
    assert r.code == 2 and "lines is more than a printed graph graphdbg reads" in r.err, r


def _safetensors(path: Path, header: dict, data: bytes) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


@pytest.mark.parametrize("header,data,says", [
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
     bytes(24), "overlap"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8), "truncated"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, bytes(16), "F32[3] needs 12 bytes, its offsets span 16"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, bytes(16), "data_offsets must be"),
    ({"a": {"dtype": "XX", "shape": [4], "data_offsets": [0, 16]}}, bytes(16), "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, bytes(16), "shape must be"),
    ([1, 2], b"", "not a JSON object"),
    # safetensors' own rules, checked without importing numpy for its reader: end to end, all covered
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}},
     bytes(40), "starts at data byte 24; the data before it ends at 16"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(24), "the tensors end at data byte 16, the file's data has 24"),
], ids=["overlap", "past-end", "byte-length", "reversed", "dtype", "negative", "list", "gap", "trailing"])
def test_bad_safetensors_header_is_refused_before_reading(cli, fixture_copy, header, data, says):
    folder = fixture_copy(FIXTURE)
    _safetensors(folder / "inputs.safetensors", header, data)
    r = cli("show", folder)
    assert r.code == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r


def test_huge_safetensors_header_length_is_refused(cli, fixture_copy):
    folder = fixture_copy(FIXTURE)
    (folder / "inputs.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    r = cli("show", folder)
    assert r.code == 2 and "over the" in r.err, r


def test_zip_bomb_storage_is_refused_before_inflating(tmp_path):
    from graphdbg.errors import GraphdbgError
    from graphdbg.formats.torch_repro import read_storage_bytes

    bomb = tmp_path / "bomb"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"")
        z.writestr("archive/data/0", bytes(64 << 20))  # 64 MiB of zeros, 64 KiB on disk
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(GraphdbgError, match="holds 67108864 bytes, load_args says 16"):
        read_storage_bytes(bomb, 16)


def test_the_writer_checks_the_schema_before_writing(tmp_path):
    from graphdbg.errors import DumpError
    from graphdbg.store.manifest import write_manifest

    good = json.loads(next((Path(__file__).parent.parent / "fixtures" / FIXTURE).glob("rank*/*/manifest.json")).read_text())
    write_manifest(tmp_path, good)
    bad = {**good, "dist": {**good["dist"], "rank": "zero"}}
    with pytest.raises(DumpError, match="dist.rank: must be an integer"):
        write_manifest(tmp_path / "x", bad)
    assert not (tmp_path / "x").exists()


def test_schema_command_prints_the_json_schema(cli):
    r = cli("schema")
    assert r.code == 0, r
    schema = json.loads(r.out)
    assert schema["title"] == "graphdbg dump manifest"
    assert set(schema["required"]) >= {"schema", "id", "failure", "graph", "inputs"}
    assert schema["properties"]["dist"]["$ref"].endswith("/Dist")
    rank = schema["$defs"]["Dist"]["properties"]["rank"]
    assert rank["type"] == "integer" and rank["minimum"] == 0
    # the committed fixtures are valid against it, checked by an independent validator where installed
    jsonschema = pytest.importorskip("jsonschema")
    for path in (Path(__file__).parent.parent / "fixtures").glob("*/rank*/*/manifest.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**json.loads(path.read_text()), "dist": {"rank": "zero"}}, schema)


def test_minifier_repro_sizes_are_bounded(cli, tmp_path):
    import shutil

    folder = tmp_path / "after_dynamo"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "torch_minifier" / "after_dynamo", folder)
    repro = folder / "repro.py"
    text = repro.read_text()
    assert "reader.tensor(buf0, (4, 32)" in text
    repro.write_text(text.replace("reader.tensor(buf0, (4, 32)", "reader.tensor(buf0, (9**9**9, 32)"))
    for command in (["show", repro], ["replay", repro, "--no-isolate", "--backend", "eager"]):
        r = cli(*command)
        assert r.code == 2 and "'9 ** 9 ** 9' is too large" in r.err and len(r.err.strip().splitlines()) == 1, r
