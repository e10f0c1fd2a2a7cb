"""`graphdbg ls` scans printed graphs without torch (formats/scan.py) and lists exactly what the
full reader (fx) would: the same rows and groups, the same errors, the same hashes as `load()`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, SHARED_CORPUS, child_env

from graphdbg.formats.listing import list_dumps, printed_graph_files

BAD_ANNOTATION = 'class GraphModule(torch.nn.Module):\n    def forward(self, x: "f32[2"):\n        return (x,)\n'
NOT_A_GRAPH = "class GraphModule(torch.nn.Module):\n    def forward(self, x):\n        import os\n        return (x,)\n"


def _same(root: Path) -> dict:
    scanned = list_dumps(root, cache=False).to_json()
    full = list_dumps(root, cache=False, full=True).to_json()
    assert scanned["dumps"] == full["dumps"]
    assert scanned["groups"] == full["groups"]
    assert scanned["problems"] == full["problems"] and scanned["summary"] == full["summary"]
    return scanned


def test_the_scan_lists_the_fixtures_as_the_full_reader_does(tmp_path):
    root = tmp_path / "printed"
    shutil.copytree(FIXTURES / "corpus", root / "corpus")
    shutil.copytree(FIXTURES / "world_printed", root / "world_printed")
    shutil.copytree(FIXTURES / "cuda_streams_thunder", root / "cuda_streams_thunder")
    bad = root / "corpus" / "Qwen3-0.6B"
    (bad / "rank9_0.py").write_text(BAD_ANNOTATION)
    (bad / "rank8_0.py").write_text(NOT_A_GRAPH)
    listing = _same(root)
    errors = {Path(p["path"]).name: p["error"] for p in listing["problems"]}
    assert "rank9_0.py:2" in errors["rank9_0.py"] and "cannot read the annotation" in errors["rank9_0.py"], errors
    assert "rank8_0.py:3" in errors["rank8_0.py"], errors
    printed = [d for d in listing["dumps"] if d.get("format") == "printed_graph"]
    assert len(printed) == len(printed_graph_files(root)) - 2


@pytest.mark.needs_corpus
def test_the_scan_lists_the_shared_corpus_as_the_full_reader_does():
    assert len(_same(SHARED_CORPUS)["dumps"]) == 152


def test_ls_shows_the_hashes_load_gives(tmp_path):
    from graphdbg import load

    files = printed_graph_files(FIXTURES / "corpus")
    rows = {r["path"]: r for r in list_dumps(FIXTURES / "corpus", cache=False).to_json()["dumps"]}
    for f in files:
        d = load(f)
        assert (rows[str(f)]["graph_hash"], rows[str(f)]["group_hash"], rows[str(f)]["nodes"]) == (d.graph_hash, d.group_hash, d.node_count)


def test_the_names_table_is_the_one_for_these_sources():
    from graphdbg.formats.names_table import TABLE, source_stamp

    stamp = json.loads(TABLE.read_text())["stamp"]
    assert stamp == source_stamp(), "rewrite it: python -m graphdbg.formats.names_table"


def test_a_first_ls_of_printed_graphs_and_dumps_imports_no_torch(tmp_path):
    root = tmp_path / "printed"
    shutil.copytree(FIXTURES / "corpus", root)
    old = time.time() - 60
    for f in root.rglob("*"):
        os.utime(f, (old, old))
    probe = ("import sys\nfrom graphdbg.ui.cli import main\nsys.argv = ['graphdbg', 'ls', '--json', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print('torch imported:', 'torch' in sys.modules, code, file=sys.stderr)\n")
    env = child_env(GRAPHDBG_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", probe, str(root)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.stderr.strip().endswith("torch imported: False 0") for r in runs), runs
    first, again = (json.loads(r.stdout) for r in runs)
    assert first == again and len(first["dumps"]) == len(printed_graph_files(root))


def test_torch_version_read_as_text_is_the_installed_one():
    """The caches' and the names table's stamps read torch's version from its version.py (no
    importlib.metadata lookup, 0.04 s): the same string the package metadata gives."""
    from importlib.metadata import version

    from graphdbg.formats.ls_cache import torch_version

    assert torch_version() == version("torch")
