"""A printed GraphModule someone else's tool wrote, read as a Dump.

SGLang, Thunder and Dynamo's own logs print graphs with ``print_readable()``: a
``class GraphModule(torch.nn.Module)`` with annotated placeholders, nested submodule classes,
``# File:`` comments, maybe a ``# Rank: R, Graph G`` header, and nothing else: no inputs, no
error. The reader makes the manifest up from the file itself (``failure_kind`` is
``"printed_graph"``; what it learns goes under ``manifest["printed_graph"]``), so ``show``, ``replay``,
``nodes()`` and ``case()`` work on it unchanged; its Case gets synthesized inputs and
stand-ins, all of them listed.

    >>> dump = graphdbg.load("corpus/Qwen/Qwen3-Next-80B-A3B-Instruct/rank3_0.py")
    >>> dump.manifest.printed.model, dump.rank, dump.manifest.printed.graph_number, dump.failure_kind
    ('Qwen3-Next-80B-A3B-Instruct', 3, 0, 'printed_graph')
    >>> case = dump.case("cpu", seed=1)
    >>> case.run("eager").status, [s.kind for s in case.stand_ins][:3]
    ('pass', ['synthesized', 'synthesized', 'custom_op'])

The file is parsed (``printed_graph``), never executed.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from graphdbg.dump import Contents, Dump
from graphdbg.formats import register
from graphdbg.formats.printed_file import (  # noqa: F401 (re-exported)
    FAILURE_KIND,
    FORMAT,
    MAX_BYTES,
    PrintedFile,
    bad_annotation,
    header_rank,
    printed_dump,
    printed_manifest,
    read_printed_source,
)
from graphdbg.formats.scan import Undecided, scan_facts, scan_source
from graphdbg.formats.sniff import looks_like_printed_graph
from graphdbg.graph.hashing import graph_hash, op_histogram, target_name
from graphdbg.rebuild.inputs import SEED_ENV
from graphdbg.rebuild.stand_ins import construct_of, constructs
from graphdbg.rebuild.synthesize import plan_inputs

__all__ = ["load_printed_graph", "looks_like_printed_graph", "SEED_ENV"]



def load_printed_graph(path: str | Path) -> Dump:
    """Read a printed graph file; GraphSourceError (exit code 2) with file and line if it isn't one.

        >>> load_printed_graph("rank0_0.py").summary()["kind"]
        'printed_graph'
    """
    path = Path(path)
    source = read_printed_source(path)
    contents = Contents(path, text=source)
    pg = contents.graph()  # parse now: a bad file fails at load, with its line, not later inside a replay
    _check_annotations(pg, str(path))
    return Dump(path, printed_graph_manifest(path, pg, source), contents)


def printed_graph_manifest(path: Path, pg: Any, source: str | None = None) -> dict[str, Any]:
    """The manifest, from what fx made of the file (rank, constructs, inputs) and what the scan
    makes of it (graph hash, group hash, rank literals, nodes, ops: ``formats/scan.py``, the
    same facts ``ls`` shows without this reader). A file the scan can't follow keeps fx's."""
    try:
        facts = scan_facts(scan_source(source if source is not None else read_printed_source(path), str(path)))
    except Undecided:
        masked, literals = _masked_structure(pg)
        facts = {"hash": graph_hash(pg.graph) if not pg.submodules else pg.structural_hash(),
                 "nodes": sum(len(g.nodes) for g in pg.graphs()), "ops": op_histogram(pg.graph),
                 "group_hash": hashlib.sha256(masked.encode()).hexdigest(), "rank_literals": literals}
    indices = _cuda_indices(pg)
    rank = header_rank(pg.header, indices)
    if rank is None:
        shard = _rank_from_shard(pg)
        rank = (shard, "shard_offset", None) if shard is not None else (0, "default", None)
    placeholders = [n for n in pg.graph.nodes if n.op == "placeholder"]
    return printed_manifest(path, facts, rank=rank, indices=indices, uses_cuda=_uses_cuda(pg),
                            inputs=[(n.name, n.meta.get("graphdbg_spec")) for n in placeholders], constructs=constructs(pg))


# Reading facts out of the graph -----------------------------------------------------------

def _check_annotations(pg: Any, filename: str) -> None:
    """Every string annotation must read as a spec: inputs and stand-ins are made from them,
    so one that doesn't (``"bf16[1, 2048"``) is an error at its line, not a silent None. The
    parser marked them (``graphdbg_bad_annotation``); the file is not parsed a second time."""
    bad = [node.meta["graphdbg_bad_annotation"] for graph in pg.graphs() for node in graph.nodes
           if "graphdbg_bad_annotation" in node.meta]
    if bad:
        raise bad_annotation(bad, filename)


def _values(node: fx.Node) -> list[Any]:
    out: list[Any] = []
    fx.node.map_aggregate((node.args, node.kwargs), lambda v: out.append(v) or v)
    return out


def _cuda_indices(pg: Any) -> set[int]:
    """Device indices a graph baked in: device literals, streams, device switches."""
    found: set[int] = set()
    for graph in pg.graphs():
        for node in graph.nodes:
            if node.op not in ("call_function", "call_method"):
                continue
            for v in _values(node):
                if isinstance(v, torch.device) and v.type == "cuda" and v.index is not None:
                    found.add(v.index)
                elif isinstance(v, str) and re.fullmatch(r"cuda:\d+", v):
                    found.add(int(v.split(":")[1]))
            qual = construct_of(node.target) if node.op == "call_function" else None
            if qual == "torch.cuda.streams.Stream" and isinstance(node.kwargs.get("device_index"), int):
                found.add(node.kwargs["device_index"])
            elif qual in ("torch._C._cuda_exchangeDevice", "torch.cuda.get_device_capability") and node.args and isinstance(node.args[0], int):
                found.add(node.args[0])
    return found


def _rank_from_shard(pg: Any) -> int | None:
    """The rank a vocab-parallel graph tests for: ``x >= start & x < end`` with ``start`` a
    multiple of the shard size ``end - start`` is shard ``start // (end - start)``."""
    try:
        plans = plan_inputs(pg.to_module(missing_attr=lambda q, s: None))
    except Exception:
        return None
    for plan in plans:
        size = plan.high - plan.low
        if plan.kind in ("range", "index") and "range the graph tests" in plan.how and size > 1 and plan.low % size == 0:
            return plan.low // size
    return None


def _uses_cuda(pg: Any) -> bool:
    for graph in pg.graphs():
        for node in graph.nodes:
            qual = construct_of(node.target) if node.op == "call_function" else None
            if qual and ("cuda" in qual or "triton" in qual):
                return True
    return False


def _masked_structure(pg: Any) -> tuple[str, list[Any]]:
    """The graph's structure as text with integer literals masked, and those literals in order.

    Ranks of one tensor-parallel model print the same graph but for the literals that place
    them: device indices, vocab-shard offsets, stream ids. Masking every integer argument
    (shapes stay, in the annotations) makes those graphs equal; the literal list then says
    what differs between ranks.
    """
    literals: list[Any] = []
    parts: list[Any] = []

    def canon(value: Any, index: dict[fx.Node, int]) -> Any:
        if isinstance(value, fx.Node):
            return f"%{index[value]}"
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int):
            literals.append(value)
            return "#"
        if isinstance(value, torch.device):
            if value.index is not None:
                literals.append(value.index)
            return f"device:{value.type}"
        if isinstance(value, (list, tuple)):
            return [canon(v, index) for v in value]
        if isinstance(value, dict):
            return [[str(k), canon(v, index)] for k, v in value.items()]
        if isinstance(value, slice):
            return ["slice", canon(value.start, index), canon(value.stop, index), canon(value.step, index)]
        if isinstance(value, float):
            return repr(value)
        return str(value) if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)) else type(value).__name__

    def walk(p: Any, prefix: str) -> None:
        index = {n: i for i, n in enumerate(p.graph.nodes)}
        for node in p.graph.nodes:
            spec = node.meta.get("graphdbg_spec")
            target = target_name(node) if node.op not in ("placeholder", "output") else node.op
            parts.append([prefix, node.op, target, canon(node.args, index), canon(dict(node.kwargs), index),
                          spec.annotation() if spec is not None else None])
        for name in sorted(p.submodules):
            walk(p.submodules[name], f"{prefix}{name}.")

    walk(pg, "")
    return json.dumps(parts, default=str), literals


register(FORMAT, lambda p: p.is_file(), load_printed_graph, priority=90)
