"""``Dump.manifest`` is the schema's model (store/schema.py): fields read as attributes, each
default defined once there, a format's facts a typed sub-model under its key, and a ``null``
where a key is optional read as the key absent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import graphdbg
from graphdbg.store.manifest import MANIFEST
from graphdbg.store.schema import Manifest, PrintedGraphFacts

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = next((ROOT / "fixtures" / "block_compile_error").glob("rank*/*"))
PRINTED = sorted((ROOT / "fixtures" / "sglang-thunderfx").rglob("rank0_0.py"))[0]


def _copy(tmp_path: Path, change) -> Path:
    folder = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, folder)
    data = json.loads((folder / MANIFEST).read_text())
    change(data)
    (folder / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
    return folder


def test_a_dump_folder_reads_its_manifest_as_the_model_with_the_defaults_of_the_schema(tmp_path):
    def drop_optional(data):
        for key in ("grad_enabled", "inputs_file", "attrs", "children", "config", "custom_ops"):
            data.pop(key, None)

    dump = graphdbg.load(_copy(tmp_path, drop_optional))
    m = dump.manifest
    assert isinstance(m, Manifest)
    assert (m.grad_enabled, m.inputs_file, m.attrs, m.children, m.custom_ops) == (False, "inputs.safetensors", {}, [], [])
    assert m.config.values == {} and not m.piece and not m.is_backward and not m.fails_in_backward
    assert (m.id, m.dist.rank, m.failure_kind) == (dump.id, dump.rank, dump.failure_kind) == (FIXTURE.name, 0, "compile_error")
    assert "grad_enabled" not in dump.manifest_data  # the JSON keeps what the file says; the model adds defaults


def test_a_null_where_a_key_is_optional_reads_as_the_key_absent(tmp_path):
    def nulls(data):
        data.update(attrs=None, children=None, custom_ops=None, external_objects=None, config=None)
        data["graph"].update(node_info=None, ops=None)

    folder = _copy(tmp_path, nulls)
    dump = graphdbg.load(folder)
    assert (dump.manifest.attrs, dump.manifest.children, dump.manifest.graph.node_info) == ({}, [], {})
    assert dump.summary()["children"] == [] and dump.summary()["module"] is None
    assert dump.nodes()["module"].isna().all()


def test_a_printed_graph_s_own_facts_are_a_typed_sub_model_under_either_of_its_names():
    dump = graphdbg.load(PRINTED)
    facts = dump.manifest.printed
    assert isinstance(facts, PrintedGraphFacts) and dump.manifest.is_printed
    assert facts.model == PRINTED.parent.name and facts.graph_number == 0 and len(facts.group_hash) == 64
    row = dump.summary()
    assert (row["model"], row["graph"], row["group_hash"], row["constructs"]) == (facts.model, 0, facts.group_hash, facts.constructs)
    old = json.loads(json.dumps(dump.manifest_data))
    old["foreign"] = old.pop("printed_graph")
    again = graphdbg.dump.Dump(dump.path, old, dump.contents)
    assert again.manifest.printed == facts and again.manifest.printed_graph is None
    assert graphdbg.load(FIXTURE).manifest.printed == PrintedGraphFacts()  # not a printed graph: empty facts
