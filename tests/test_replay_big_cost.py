"""What a big-dump replay holds where (issue 26, benchmarks/replay_big.py): the parent of an
isolated replay of a dump never reads its tensors, so only the child holds the inputs."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import graphdbg
from graphdbg.dump import Dump
from graphdbg.execution.entry import replay_dump
from graphdbg.store import tensor_file


def test_an_isolated_replay_of_a_dump_reads_its_tensors_only_in_the_child(monkeypatch, child_pythonpath):
    def refuse(*args, **kwargs):
        pytest.fail("the parent of an isolated replay read the dump's tensors")

    dump = graphdbg.load(next((FIXTURES / "block_compile_error").glob("rank*/*")))
    assert dump.manifest_data["inputs"] and any(d.get("stored") for d in dump.manifest_data["inputs"])  # it has stored values
    monkeypatch.setattr(tensor_file, "read_tensors", refuse)  # the one reader of inputs.safetensors (lazily imported)
    monkeypatch.setattr(Dump, "case", refuse)  # nor does it build the graph and its inputs
    outcome = replay_dump(dump, "eager", isolate=True)
    assert outcome.isolated and outcome.status == "pass", outcome
    assert outcome.reference == "eager"  # outputs were judged, in the child
