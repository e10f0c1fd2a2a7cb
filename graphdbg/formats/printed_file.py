"""A printed graph file known by its manifest, without torch: what ``ls`` makes of a file whose
manifest it read before (``ls_cache``) or had a worker process read (``formats/listing.py``).
The file is read and parsed again only when its graph is asked for (``show``, ``replay``)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

from graphdbg.dump import Contents, Dump
from graphdbg.errors import GraphSourceError
from graphdbg.graph.source_text import readable_source
from graphdbg.store.confined import read_regular

_RANK_FILE = re.compile(r"rank(\d+)_\d+\.py$")
MAX_BYTES = 64 << 20  # as printed_graph.MAX_BYTES: a printed graph of a real model is well under a MB


class PrintedFile(Contents):
    """A printed graph file's contents read when first needed (``ls`` keeps only manifests)."""

    def text(self) -> str:
        if self._text is None:
            try:
                self._text = readable_source(read_regular(self.graph_file, max_bytes=MAX_BYTES).decode())
            except (UnicodeDecodeError, OSError) as e:
                raise GraphSourceError(f"cannot read ({type(e).__name__})", file=str(self.graph_file)) from None
        return self._text


def printed_dump(path: Path, manifest: dict[str, Any]) -> Dump:
    """The Dump of a printed graph whose manifest was made before (``ls``'s cache, a worker);
    the rank files beside it are counted again, since they may have changed."""
    dist = manifest.get("dist") or {}
    if isinstance(dist.get("rank"), int):
        dist["world_size"] = _world_size(path, dist["rank"])
    return Dump(path, manifest, PrintedFile(path))


def _world_size(path: Path, rank: int) -> int:
    # Printed files don't say; the rank files next to this one do (rank0_*.py ... rank7_*.py).
    # The folder is listed once per change, not once per file (ls of 3,200 files was quadratic).
    try:
        ranks = _folder_ranks(str(path.parent), path.parent.stat().st_mtime_ns)
    except OSError:
        ranks = frozenset()
    return max([rank, *ranks]) + 1


@functools.lru_cache(maxsize=64)
def _folder_ranks(folder: str, mtime_ns: int) -> frozenset[int]:
    try:
        return frozenset(int(m[1]) for name in os.listdir(folder) if (m := _RANK_FILE.match(name)))
    except OSError:
        return frozenset()
