"""FileDump: a Dump made from one file another tool wrote, with a manifest built in memory.

A minifier's ``repro.py`` or vLLM's ``computation_graph.py`` is not a dump folder, but
everything downstream (``graphdbg show``, ``replay``, ``Case``) speaks Dump. A FileDump fills
the same manifest fields from what the file says, so those readers need no special case;
``path`` is the file itself, so a child process can load it again by name.

    >>> dump = load_torch_repro("repro.py")      # a FileDump subclass
    >>> dump.manifest["format"], dump.failure_kind, dump.backend
    ('torch_minifier', 'captured', 'inductor')
    >>> case = dump.case("cpu", seed=0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from graphdbg.confined import read_regular
from graphdbg.graph_hash import graph_hash, op_histogram
from graphdbg.manifest import SCHEMA, SCHEMA_VERSION
from graphdbg.dump import Dump
from graphdbg.graph_parser import PrintedGraph


class FileDump(Dump):
    """A Dump whose manifest was synthesised from one foreign file (see ``manifest_for``)."""

    def __init__(self, path: Path, manifest: dict[str, Any], printed: PrintedGraph):
        super().__init__(Path(path), manifest)
        # Dump.printed is a cached_property reading graph.py; the file is already parsed here.
        self.__dict__["printed"] = printed

    @property
    def source(self) -> str:
        return read_regular(self.path, max_bytes=256 << 20, text=True)

    def check(self) -> None:
        """Nothing to validate beyond what loading already did: there is no tensor file."""

    @property
    def format(self) -> str:
        return str(self.manifest.get("format", "?"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, {self.format}, {self.failure_kind})"


def manifest_for(path: Path, printed: PrintedGraph, *, fmt: str, inputs: list[dict[str, Any]],
                 attrs: dict[str, dict[str, Any]] | None = None, backend: str = "?", kind: str = "captured",
                 message: str = "", rank: int = 0, world_size: int = 1, rank_source: str = "default",
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A manifest with the keys Dump and the CLI read, filled from what a foreign file says.

    The failure is ``captured`` unless the file says more (a minifier repro made for an
    accuracy failure says ``accuracy``): these files record a graph, not an exception.
    """
    extra = dict(extra or {})
    env = {"torch": None, "python": None, "device_name": None, **extra.pop("env", {})}
    gm_hash = graph_hash(printed.graph) if not printed.submodules else printed.structural_hash()
    nodes = sum(len(g.nodes) for g in printed.graphs())
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "id": f"{path.stem}-{fmt}-{gm_hash[:8]}",
        "format": fmt,
        "source_file": str(path),
        "dist": {"rank": rank, "local_rank": rank, "world_size": world_size, "source": rank_source},
        "backend": backend,
        "failure": {"kind": kind, "exception": None, "signature": None, "message": message},
        "graph": {"hash": gm_hash, "nodes": nodes, "file": path.name, "ops": op_histogram(printed.graph)},
        "inputs": inputs,
        "attrs": attrs or {},
        "external_objects": [],
        "env": env,
        "grad_enabled": False,
        **extra,
    }
