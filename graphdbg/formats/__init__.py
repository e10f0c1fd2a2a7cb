"""Readers of the files graphdbg is given: one module per kind of file, each registering itself.

    >>> from graphdbg.formats import load, readers
    >>> [r.name for r in readers()]
    ['dump', 'torch_minifier', 'compile_cache', 'printed_graph']
    >>> load("corpus/Qwen/Qwen3-0.6B/rank0_0.py").failure_kind
    'printed_graph'

A reader is ``Reader(name, detect, load, priority)``: ``detect(path) -> bool`` looks at the
path cheaply (a name, a first line), ``load(path) -> Dump`` parses it, never runs it. The
most specific readers have the lowest priority number and are asked first: a minifier repro
or a compile-cache file is also a printed GraphModule. Adding a format is one new module
here that calls ``register`` and is named in ``BUILTIN``; a plugin can call ``register`` too.

Every reader returns the one ``Dump``: a manifest (``manifest_for`` fills the common keys for
a file another tool wrote) and a ``Contents`` (the graph, and the values the file stored).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.store.manifest import SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    from graphdbg.dump import Dump
    from graphdbg.graph.parser import PrintedGraph

# Modules imported on first use, so that ``Dump`` and the readers never import each other at
# import time: each of them imports ``graphdbg.dump``; nothing below imports them back. Each is
# named with the priority it registers with: ``reader_for`` imports a reader only once every
# reader asked before it has said no, so that loading a dump folder doesn't import the
# printed-graph reader (and torch with it).
BUILTIN = (
    ("graphdbg.formats.dump_folder", 0),
    ("graphdbg.formats.torch_repro", 10),
    ("graphdbg.formats.compile_cache", 20),
    ("graphdbg.formats.printed_graph", 90),
)


@dataclass(frozen=True)
class Reader:
    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], "Dump"]
    priority: int = 50
    module: str = ""


_READERS: dict[str, Reader] = {}
_loaded = False


def register(name: str, detect: Callable[[Path], bool], load: Callable[[Path], "Dump"], *, priority: int = 50) -> Reader:
    """Add (or replace) a reader; returns it. ``module`` is the caller's module, for listings."""
    reader = Reader(name, detect, load, priority, getattr(load, "__module__", ""))
    _READERS[name] = reader
    return reader


def readers() -> list[Reader]:
    """Every registered reader, most specific first."""
    global _loaded
    if not _loaded:
        _loaded = True
        for module, _ in BUILTIN:
            importlib.import_module(module)
    return _in_order(_READERS.values())


def _in_order(found) -> list[Reader]:
    return sorted(found, key=lambda r: (r.priority, r.name))


def reader_for(path: str | Path) -> Reader:
    """The first reader whose ``detect`` accepts ``path``; DumpError (exit 2) if none does.

    Readers are asked in priority order; a built-in one is imported when its turn comes (the
    ones registered already, a plugin's included, are asked first where their priority is lower)."""
    path = Path(path)
    if not path.exists():
        raise DumpError(f"{path}: no such file or folder")
    asked: set[str] = set()
    for module, priority in (*BUILTIN, (None, None)):
        waiting = [r for r in _in_order(_READERS.values()) if r.name not in asked and (priority is None or r.priority < priority)]
        for reader in waiting:
            asked.add(reader.name)
            if reader.detect(path):
                return reader
        if module is not None:
            importlib.import_module(module)
    raise DumpError(f"{path}: not a graphdbg dump, printed graph, minifier repro or compile-cache file")


def load(path: str | Path) -> "Dump":
    """Read ``path`` with the reader that recognises it; its manifest checked by graphdbg.store.schema
    (a dump folder's by ``read_manifest``, which remembers the bytes that passed: ``store/manifest_cache``)."""
    reader = None
    try:
        reader = reader_for(path)
        dump = reader.load(Path(path))
    except GraphdbgError as e:
        if reader is None or reader.name == "printed_graph":  # the reader of last resort: any file
            _refuse_a_program(Path(path), e)
        raise
    if reader.module != "graphdbg.formats.dump_folder":  # that reader checked it (read_manifest)
        dump.manifest  # checked now, as the model (a reader's manifest is built in memory)
    return dump


def _refuse_a_program(path: Path, error: GraphdbgError) -> None:
    """A ``.py`` file that is no graph but a program (``graphdbg replay prog.py``): say so, and how to capture it."""
    if path.suffix != ".py" or not path.is_file():
        return
    from graphdbg.backends.script_definitions import Script  # lazy: only for a .py file no reader took

    try:
        program = Script.read(path).runs_program()
    except GraphdbgError:
        return
    if program:
        raise DumpError(f"{path} is a program, not a dump or a printed graph; run it under capture first: "
                        f"graphdbg capture -- python {path}") from error


def manifest_for(path: Path, printed: PrintedGraph | None, *, fmt: str, inputs: list[dict[str, Any]], dump_id: str | None = None,
                 attrs: dict[str, dict[str, Any]] | None = None, backend: str = "?", kind: str = "captured",
                 message: str = "", rank: int = 0, world_size: int = 1, rank_source: str = "default",
                 extra: dict[str, Any] | None = None, facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest of a file another tool wrote: the keys a dump's manifest has, filled from
    what the file says, plus the reader's own facts under their key (``extra``).

    The failure is ``captured`` unless the file says more (a minifier repro made for an
    accuracy failure says ``accuracy``; a printed graph says ``printed_graph``): these files record
    a graph, not an exception.

        >>> manifest_for(Path("repro.py"), printed, fmt="torch_minifier", inputs=descs)["id"]
        'repro-torch_minifier-1a2b3c4d'

    ``facts`` (``hash``, ``nodes``, ``ops``), where given, are the graph's instead of those of
    ``printed`` (a printed graph's come from ``formats/scan.py``, with or without ``printed``).
    """
    extra = dict(extra or {})
    env = {"torch": None, "python": None, "device_name": None, **extra.pop("env", {})}
    if facts is None:
        assert printed is not None
        # lazy: this module loads without torch (fast CLI start); this brings torch in
        from graphdbg.graph.hashing import graph_hash, op_histogram

        gm_hash = graph_hash(printed.graph) if not printed.submodules else printed.structural_hash()
        facts = {"hash": gm_hash, "nodes": sum(len(g.nodes) for g in printed.graphs()), "ops": op_histogram(printed.graph)}
    gm_hash, nodes = facts["hash"], facts["nodes"]
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "id": dump_id or f"{path.stem}-{fmt}-{gm_hash[:8]}",
        "format": fmt,
        "source_file": str(path),
        "dist": {"rank": rank, "local_rank": rank, "world_size": world_size, "source": rank_source},
        "backend": backend,
        "failure": {"kind": kind, "exception": None, "signature": None, "message": message},
        "graph": {"hash": gm_hash, "nodes": nodes, "file": path.name, "ops": facts["ops"], "node_info": {}},
        "inputs": inputs,
        "attrs": attrs or {},
        "external_objects": [],
        "env": env,
        "grad_enabled": False,
        **extra,
    }


__all__ = ["Reader", "register", "readers", "reader_for", "load", "manifest_for", "BUILTIN"]
