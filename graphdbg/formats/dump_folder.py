"""graphdbg's own dump folders: ``manifest.json``, ``graph.py``, ``inputs.safetensors``.

    >>> dump = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d")   # or a folder holding one dump
"""

from __future__ import annotations

from pathlib import Path

from graphdbg.dump import Dump
from graphdbg.errors import DumpError
from graphdbg.formats import register
from graphdbg.manifest import MANIFEST, find_dumps, read_manifest


def detect(path: Path) -> bool:
    return path.is_dir()


def load_dump_folder(path: Path) -> Dump:
    """A dump folder, or a folder holding exactly one dump (a fixture, a one-graph run)."""
    path = Path(path)
    if not (path / MANIFEST).exists():
        found = find_dumps(path)
        if len(found) == 1:
            path = found[0]
        elif len(found) > 1:
            raise DumpError(f"{path}: holds {len(found)} dumps; name one (graphdbg ls {path} lists them)")
    dump = Dump(path, read_manifest(path))
    dump.check()
    return dump


register("dump", detect, load_dump_folder, priority=0)
