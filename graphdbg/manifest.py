"""manifest.json: what failed, where, with what. Versioned; read back with checks.

Layout of a dump folder ``<dump_dir>/rank<R>/<id>/``:

- ``manifest.json``: this schema (``schema_version``), written last inside the folder.
- ``graph.py``: the graph as printed source; parsed, never executed.
- ``inputs.safetensors``: input, parameter and constant values within the size budget.

A folder whose name starts with ``.`` is a dump still being written; readers skip it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphdbg.errors import DumpError

SCHEMA = "graphdbg.dump"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.py"
INPUTS = "inputs.safetensors"

FAILURE_KINDS = ("compile_error", "runtime_error", "accuracy", "captured", "crash")


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise DumpError(f"{folder}: not a dump folder")
    if not path.is_file():
        raise DumpError(f"{folder}: not a graphdbg dump (no {MANIFEST})")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DumpError(f"{path}: malformed manifest ({type(e).__name__}: {str(e).splitlines()[0]})") from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise DumpError(f"{path}: not a graphdbg manifest (schema is {data.get('schema') if isinstance(data, dict) else None!r})")
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise DumpError(f"{path}: manifest has no schema_version")
    if version > SCHEMA_VERSION:
        made_by = data.get("env", {}).get("graphdbg", "a newer graphdbg")
        raise DumpError(
            f"{path}: schema version {version} is newer than this graphdbg reads ({SCHEMA_VERSION}); "
            f"written by graphdbg {made_by}, upgrade graphdbg to read it"
        )
    for key in ("id", "graph", "inputs", "failure"):
        if key not in data:
            raise DumpError(f"{path}: manifest lacks {key!r}")
    return data


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")


def find_dumps(root: Path) -> list[Path]:
    """Every complete dump folder under ``root`` (itself included), sorted; half-written ones skipped."""
    root = Path(root)
    if (root / MANIFEST).is_file():
        return [root]
    found = []
    for path in sorted(root.rglob(MANIFEST)):
        rel = path.parent.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        found.append(path.parent)
    return found
