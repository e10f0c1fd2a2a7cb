"""A dump's manifest is checked against the schema once per distinct bytes: later reads
(``replay`` after ``ls``, a second backend, the first replay after capture wrote it) take the
checked manifest from ``store/manifest_cache`` without importing pydantic. Bytes that differ are checked
again, so a manifest edited after it passed is refused as any other. Issue 26: start-up."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from graphdbg.errors import DumpError
from graphdbg.store.manifest import MANIFEST, read_manifest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = next((ROOT / "fixtures" / "block_compile_error").glob("rank*/*"))

# Load a dump in a fresh process; say whether pydantic was imported to do it (the load alone:
# reading the manifest's fields later builds its model, ``Dump.manifest``, which imports pydantic).
PROBE = """
import sys
import graphdbg
d = graphdbg.load(sys.argv[1])
print(d.manifest_data["id"], "pydantic" in sys.modules)
"""


def _load_in_child(path: Path, cache: Path) -> tuple[str, bool]:
    env = {**os.environ, "GRAPHDBG_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dump_id, pydantic = done.stdout.split()
    return dump_id, pydantic == "True"


def test_a_dump_read_again_is_not_checked_again(tmp_path):
    dump = tmp_path / "d"
    shutil.copytree(FIXTURE, dump)
    cache = tmp_path / "cache"
    first = _load_in_child(dump, cache)
    second = _load_in_child(dump, cache)
    assert first == (FIXTURE.name, True)  # checked: pydantic and the schema's models
    assert second == (FIXTURE.name, False)  # the same bytes passed before
    # what the cache gives back is what the check gave
    rows = sqlite3.connect(str(cache / "checked.sqlite")).execute("select manifest from checked_v1").fetchall()
    assert [json.loads(r[0]) for r in rows] == [read_manifest(dump)]


def test_changed_bytes_are_checked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    dump = tmp_path / "d"
    shutil.copytree(FIXTURE, dump)
    read_manifest(dump)  # passes, remembered
    data = json.loads((dump / MANIFEST).read_text())
    data["dist"]["rank"] = "zero"  # a hostile edit of a manifest that passed
    (dump / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
    with pytest.raises(DumpError, match=r"dist\.rank: must be an integer"):
        read_manifest(dump)
    data["dist"]["rank"] = 0
    data["failure"]["message"] = "edited, still valid"
    (dump / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
    assert read_manifest(dump)["failure"]["message"] == "edited, still valid"


def test_a_dump_just_written_reads_without_a_check(tmp_path):
    """capture writes through write_manifest, which checks what it writes: that verdict is kept."""
    cache = tmp_path / "cache"
    script = (
        "import sys, torch, graphdbg\n"
        "from graphdbg.case import Case\n"
        "g = torch.fx.symbolic_trace(torch.nn.Linear(4, 3))\n"
        "Case(g, [torch.randn(2, 4)], torch.device(\"cpu\")).save(sys.argv[1])\n"
    )
    env = {**os.environ, "GRAPHDBG_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "saved")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _load_in_child(tmp_path / "saved", cache)[1] is False


def test_a_damaged_cache_is_no_cache(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "checked.sqlite").write_bytes(b"not a database" * 100)
    assert _load_in_child(FIXTURE, cache) == (FIXTURE.name, True)
    assert _load_in_child(FIXTURE, cache) == (FIXTURE.name, True)  # still checked every time, still loads


def test_the_check_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHDBG_NO_CHECK_CACHE", "1")
    cache = tmp_path / "cache"
    assert _load_in_child(FIXTURE, cache) == (FIXTURE.name, True)
    assert _load_in_child(FIXTURE, cache) == (FIXTURE.name, True)  # checked again: nothing was kept


def test_the_cache_is_in_the_users_cache_folder_unless_told(tmp_path):
    """``$GRAPHDBG_CACHE_DIR`` when set, else the platform's user cache folder (on Linux
    ``$XDG_CACHE_HOME/graphdbg``, where platformdirs puts it)."""
    env = {k: v for k, v in os.environ.items() if k != "GRAPHDBG_CACHE_DIR"}
    env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", PROBE, str(FIXTURE)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "xdg" / "graphdbg" / "checked.sqlite").exists()
    assert not (tmp_path / "home").exists()
    told = tmp_path / "told"
    _load_in_child(FIXTURE, told)
    assert (told / "checked.sqlite").exists() and len(list((tmp_path / "xdg").rglob("*.sqlite"))) == 1
