"""One verdict from one place: a replay's exit code is the Outcome's (``Outcome.exit_code_for``),
so the CLI, a notebook and the pytest plugin give the same answer; and each command reads its
dump once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

import graphdbg
from graphdbg.outcome import DIFFERENT_FAILURE, Outcome

BAD_REWRITE = "fixtures.programs:bad_rewrite_backend"


@pytest.fixture(autouse=True)
def _tests_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests"), str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))


@pytest.mark.parametrize("fixture,backend,code", [
    ("block_compile_error", "eager", 0),  # the captured crash is gone
    ("block_compile_error", BAD_REWRITE, DIFFERENT_FAILURE),  # a mismatch where the dump recorded a compile error
    ("block_accuracy", BAD_REWRITE, 1),  # the captured mismatch again
])
def test_replays_exit_code_is_the_outcomes_in_the_cli_and_in_a_notebook(cli, fixture, backend, code):
    r = cli("replay", FIXTURES / fixture, "--backend", backend, "--no-isolate", "--json")
    dump = graphdbg.load(FIXTURES / fixture)
    shown = Outcome.from_dict({k: v for k, v in json.loads(r.out).items() if k in Outcome.model_fields})
    assert r.code == code == shown.exit_code_for(dump), r  # the CLI's code, from the Outcome it printed
    outcome = dump.case().run(backend)  # the notebook's
    assert outcome.exit_code_for(dump) == code
    assert outcome.fails_differently(dump) is (code == DIFFERENT_FAILURE)  # what the pytest plugin's error tests
    assert json.loads(r.out)["reproduces"] is (code == 1)


@pytest.fixture
def manifest_reads(monkeypatch):
    """How many times each command read its dump's manifest (every load of a dump folder, and
    any read of its manifest alone, goes through ``store.manifest.read_inside``)."""
    from graphdbg.store import manifest

    reads: list[str] = []
    real = manifest.read_inside

    def counted(folder, name, *args, **kwargs):
        if name == manifest.MANIFEST:
            reads.append(str(folder))
        return real(folder, name, *args, **kwargs)

    monkeypatch.setattr(manifest, "read_inside", counted)
    return reads


@pytest.mark.parametrize("command", [
    pytest.param(["minify", "--no-isolate", "--no-self-check", "--max-queries", "2", "--trust-backend"], marks=pytest.mark.slow),
    ["bisect", "passes", "--passes", "passes_for_tests:clone_output", "--trust-backend"],
    ["bisect", "nodes", "--no-isolate", "--trust-backend"],
    pytest.param(["bisect", "envs", "--trust-backend"], marks=pytest.mark.slow),
    ["export-test", "--no-self-check", "--trust-backend"],
    ["compare", "--backends", "eager,dump", "--no-isolate", "--trust-backend"],
])
def test_each_command_reads_its_dump_once(cli, manifest_reads, tmp_path, command):
    dump = FIXTURES / "block_compile_error"
    out = ["-o", tmp_path / ("test_it.py" if command[0] == "export-test" else "out")] if command[0] in ("minify", "export-test") else []
    r = cli(*command[:2 if command[0] == "bisect" else 1], dump, *command[2 if command[0] == "bisect" else 1:], *out, "--json"
            if command[0] != "export-test" else "--force")
    assert r.code in (0, 1, 4), r
    ours = [f for f in manifest_reads if (dump / "rank0") in Path(f).parents or Path(f).parent == dump / "rank0"]
    assert len(ours) == 1, ours
