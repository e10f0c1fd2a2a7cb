"""A printed graph file known by its manifest, without torch: what ``ls`` makes of a file it
scanned (``formats/scan.py``) or whose manifest it read before (``listing/cache.py``). The file is read
and parsed into fx again only when its graph is asked for (``show``, ``replay``).

``printed_manifest`` is the one maker of a printed graph's manifest: the full reader
(``printed_graph.py``) hands it what fx found, ``scanned_manifest`` what the scan found.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from graphdbg.dump import Contents, Dump
from graphdbg.errors import GraphSourceError
from graphdbg.formats import manifest_for
from graphdbg.formats.scan import HEADER, Undecided, devices_and_constructs, scan_facts, scan_source, shard_rank
from graphdbg.graph.printed_front import header_lines
from graphdbg.graph.source_text import readable_source
from graphdbg.store.safe_files import read_regular
from graphdbg.store.specs import SymSpec, TensorSpec

RANK_FILE = re.compile(r"rank(\d+)_\d+\.py$")  # match() a file name
MAX_BYTES = 64 << 20  # a printed graph of a real model is well under a MB; anything huge is not one
FORMAT = "printed_graph"
FAILURE_KIND = "printed_graph"
NO_FAILURE = "no error recorded (a printed graph)"


class PrintedFile(Contents):
    """A printed graph file's contents read when first needed (``ls`` keeps only manifests)."""

    def text(self) -> str:
        if self._text is None:
            self._text = read_printed_source(self.graph_file)
        return self._text


def printed_dump(path: Path, manifest: dict[str, Any], ranks: frozenset[int] | None = None) -> Dump:
    """The Dump of a printed graph whose manifest was made before (a scan, ``ls``'s cache); the
    rank files beside it are counted again, since they may have changed (``ranks``: theirs, as
    a walk of the folder just found them)."""
    dist = manifest.get("dist") or {}
    if isinstance(dist.get("rank"), int):
        dist["world_size"] = _world_size(path, dist["rank"], ranks)
    return Dump(path, manifest, PrintedFile(path))


def _world_size(path: Path, rank: int, ranks: frozenset[int] | None = None) -> int:
    # Printed files don't say; the rank files next to this one do (rank0_*.py ... rank7_*.py):
    # ``ranks`` where the caller's walk found them (ls), else the folder is listed.
    if ranks is None:
        try:
            ranks = frozenset(int(m[1]) for name in os.listdir(path.parent) if (m := RANK_FILE.match(name)))
        except OSError:
            ranks = frozenset()
    return max([rank, *ranks]) + 1


def read_printed_source(path: Path) -> str:
    """The file's text as Python can parse it; GraphSourceError (one line, with the file) if it
    can't be read as one."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise GraphSourceError(f"not a printed graph ({size} bytes)", file=str(path))
        return readable_source(read_regular(path, max_bytes=MAX_BYTES).decode())  # colours, <lambda> classes
    except UnicodeDecodeError:
        raise GraphSourceError("not a printed graph: not UTF-8 text", file=str(path), line=1) from None
    except OSError as e:
        raise GraphSourceError(f"cannot read ({e.strerror})", file=str(path)) from None


def bad_annotation(bad: list[tuple[str, int]], filename: str) -> GraphSourceError:
    """The error for the first of a file's annotations that don't read as a spec (``(text,
    line)`` each): inputs and stand-ins are made from them, so one that doesn't
    (``"bf16[1, 2048"``) is an error at its line, not a silent None. Both readers raise it."""
    text, line = min(bad, key=lambda b: b[1])
    return GraphSourceError(f"cannot read the annotation {text!r}", file=filename, line=line)


def header_rank(header: list[str], indices: set[int]) -> tuple[int, str, int | None] | None:
    """(rank, how it was found, graph number) from a ``# Rank: R, Graph G`` header, else from
    the one cuda device index the graph bakes in; None where neither says."""
    m = next((m for line in header if (m := HEADER.search(line))), None)
    if m:
        return int(m[1]), "header", int(m[2])
    if len(indices) == 1:
        return next(iter(indices)), "device_index", None
    return None


def descriptor(name: str, spec: Any, device: str | None) -> dict[str, Any]:
    """An input's descriptor from its annotation; a tensor's is synthesized on ``device``."""
    if isinstance(spec, TensorSpec):
        return {"kind": "tensor", "name": name, "node": name, **spec.to_dict(), "device": spec.device or device or "cpu",
                "synthesized": True}
    if isinstance(spec, SymSpec):
        return {"kind": spec.kind, "name": name, "node": name, "expr": spec.expr, "hint": spec.hint}
    return {"kind": "none", "name": name, "node": name}


def printed_manifest(path: Path, facts: dict[str, Any], *, rank: tuple[int, str, int | None], indices: set[int],
                     uses_cuda: bool, inputs: list[tuple[str, Any]], constructs: list[str],
                     ranks: frozenset[int] | None = None) -> dict[str, Any]:
    """What the file says about itself: rank (and how it was found), graph number, model, the
    device it ran on, the inputs' specs (``(name, spec)``), and the facts ``ls`` groups ranks by."""
    rank_, rank_source, number = rank
    idx = sorted(indices)
    device = f"cuda:{idx[0] if len(idx) == 1 else rank_}" if idx or uses_cuda else None
    return manifest_for(
        path, None, fmt=FORMAT, dump_id=path.stem, inputs=[descriptor(n, spec, device) for n, spec in inputs],
        # Nothing records which backend failed; eager replays the graph as it was printed.
        backend="eager", kind=FAILURE_KIND, message=NO_FAILURE,
        rank=rank_, world_size=_world_size(path, rank_, ranks), rank_source=rank_source, facts=facts,
        extra={"printed_graph": {"model": path.parent.name, "graph_number": number, "group_hash": facts["group_hash"],
                                 "rank_literals": facts["rank_literals"], "constructs": constructs, "captured_device": device}})


def scanned_manifest(path: Path, source: str, ranks: frozenset[int] | None = None
                     ) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """``(manifest, error, undecided)`` of the printed graph at ``path`` with text ``source``, from
    its scan: the manifest, or the one-line error the full reader would give, or (``undecided``)
    why only the full reader can say. ``ranks``: the rank files' ranks in its folder, where the
    caller's walk found them."""
    try:
        scan = scan_source(source, str(path))
    except Undecided as e:
        return None, None, str(e)
    if scan.undecided or scan.bad_annotations:
        return (None, None, scan.undecided) if scan.undecided else (None, str(bad_annotation(scan.bad_annotations, str(path))), None)
    indices, constructs = devices_and_constructs(scan.graph)
    rank = header_rank(header_lines(source.splitlines(), scan.class_line), indices)
    if rank is None:
        try:
            shard = shard_rank(scan.graph)
        except Undecided as e:
            return None, None, f"a rank only the input plans find ({e})"
        rank = (shard, "shard_offset", None) if shard is not None else (0, "default", None)
    uses_cuda = any(g.own.cuda_calls for g in scan.graph.graphs())
    return printed_manifest(path, scan_facts(scan), rank=rank, indices=indices, uses_cuda=uses_cuda, constructs=constructs,
                            inputs=[(n.name, n.spec) for n in scan.graph.nodes if n.op == "placeholder"], ranks=ranks), None, None
