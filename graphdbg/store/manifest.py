"""manifest.json: what failed, where, with what. Versioned; read back with checks.

Layout of a dump folder ``<dump_dir>/rank<R>/<id>/``:

- ``manifest.json``: this schema (``schema_version``), written last inside the folder.
- ``graph.py``: the graph as printed source; parsed, never executed.
- ``inputs.safetensors``: input, parameter and constant values within the size budget.

A folder whose name starts with ``.`` is a dump still being written; readers skip it.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any, Callable

from graphdbg.errors import DumpError
from graphdbg.store.manifest_cache import remember, remembered
from graphdbg.store.safe_files import read_inside, write_file

SCHEMA = "graphdbg.dump"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.py"
INPUTS = "inputs.safetensors"
MAX_MANIFEST_BYTES = 64 << 20
MAX_GRAPH_BYTES = 256 << 20

FAILURE_KINDS = ("compile_error", "runtime_error", "accuracy", "captured", "crash")


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a dump folder, checked against the schema (``graphdbg.store.schema``).

    The file is untrusted: its size and nesting are bounded before it is parsed, and every
    field graphdbg reads is type- and range-checked; a violation is a DumpError naming it.
    Bytes that passed before come back from ``store/manifest_cache`` without pydantic.
    """
    path = folder / MANIFEST
    if not folder.is_dir():
        raise DumpError(f"{folder}: not a dump folder")
    if not os.path.lexists(path):
        raise DumpError(f"{folder}: not a graphdbg dump (no {MANIFEST})")
    try:
        raw = read_inside(folder, MANIFEST, max_bytes=MAX_MANIFEST_BYTES)
    except OSError as e:
        raise DumpError(f"{path}: cannot read the manifest ({type(e).__name__})") from None
    known = remembered(raw)
    if known is not None:
        return known
    manifest = check_manifest_bytes(raw, str(path))
    remember(raw, manifest)
    return manifest


def check_manifest_bytes(raw: bytes | str, where: str) -> dict[str, Any]:
    """A manifest file's bytes parsed (bounded) and checked, as every reader checks them."""
    # lazy: pydantic and the schema's models (0.1 s) only where a manifest is checked
    from graphdbg.store.schema import load_manifest_text, validate_manifest

    data = load_manifest_text(raw, where)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise DumpError(f"{where}: not a graphdbg manifest (schema is {_schema_of(data)})")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise DumpError(f"{where}: manifest has no schema_version")
    if version > SCHEMA_VERSION:
        env = data.get("env")
        made_by = env.get("graphdbg") if isinstance(env, dict) and isinstance(env.get("graphdbg"), str) else None
        raise DumpError(
            f"{where}: schema version {version} is newer than this graphdbg reads ({SCHEMA_VERSION}); "
            f"written by graphdbg {(made_by or 'a newer graphdbg')[:40]}, upgrade graphdbg to read it"
        )
    for key in ("id", "graph", "inputs", "failure"):
        if key not in data:
            raise DumpError(f"{where}: manifest lacks {key!r}")
    return _nulls_as_absent(validate_manifest(data, where))


def _nulls_as_absent(data: dict[str, Any]) -> dict[str, Any]:
    """A top-level ``null`` where the schema allows one means the field is absent: readers write
    ``manifest.get("attrs", {})`` and must not meet ``None`` there (a hostile dump's way in)."""

    # lazy: pydantic (0.15 s) only where a manifest is validated; ls of printed graphs needs none
    from graphdbg.store.schema import Manifest

    optional = {f.alias or name for name, f in Manifest.model_fields.items() if not f.is_required()}
    return {k: v for k, v in data.items() if not (v is None and k in optional)}


def _schema_of(data: Any) -> str:
    value = data.get("schema") if isinstance(data, dict) else None
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def write_manifest(folder: Path, manifest: dict[str, Any], *, check: bool = True) -> None:
    """Write ``manifest`` after checking it against the schema the readers use: a graphdbg bug
    fails here, at capture, instead of producing a dump graphdbg itself would refuse.
    ``check=False`` (the armed crash dump, written before every graph's first call and deleted
    after it in all but a crash): the reader that loads it checks it, as it checks every dump.
    The check is the readers' own (``check_manifest_bytes``), and what passed is remembered."""
    data = (json.dumps(manifest, indent=1, default=str) + "\n").encode()
    checked = check_manifest_bytes(data, f"{folder / MANIFEST} (being written)") if check else None
    write_file(folder / MANIFEST, data, create_parent=False)
    if checked is not None:  # the first replay of a dump just written needn't check it again
        remember(data, checked, timeout=0.2)


def update_manifest(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Read ``folder``'s manifest, let ``change`` edit a copy of it (never the dict a reader was
    given), and write it back, checked: what a dump learns after it was written."""
    manifest = copy.deepcopy(read_manifest(folder))
    change(manifest)
    write_manifest(folder, manifest)


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
