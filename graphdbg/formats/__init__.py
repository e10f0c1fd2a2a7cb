"""Readers of the files graphdbg is given: one module per kind of file, each registering itself.

    >>> from graphdbg.formats import load, readers
    >>> [r.name for r in readers()]
    ['dump', 'torch_minifier', 'compile_cache', 'printed_graph']
    >>> load("corpus/Qwen/Qwen3-0.6B/rank0_0.py").failure_kind
    'foreign'

A reader is ``Reader(name, detect, load, priority)``: ``detect(path) -> bool`` looks at the
path cheaply (a name, a first line), ``load(path) -> Dump`` parses it, never runs it. The
most specific readers have the lowest priority number and are asked first: a minifier repro
or a compile-cache file is also a printed GraphModule. Adding a format is one new module
here that calls ``register`` and is named in ``BUILTIN``; a plugin can call ``register`` too.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from graphdbg.errors import DumpError

if TYPE_CHECKING:
    from graphdbg.dump import Dump

# Modules imported on first use, so that ``Dump`` and the readers never import each other at
# import time: each of them imports ``graphdbg.dump``; nothing below imports them back.
BUILTIN = (
    "graphdbg.formats.dump_folder",
    "graphdbg.formats.torch_repro",
    "graphdbg.formats.compile_cache",
    "graphdbg.formats.printed_graph",
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
        for module in BUILTIN:
            importlib.import_module(module)
    return sorted(_READERS.values(), key=lambda r: (r.priority, r.name))


def reader_for(path: str | Path) -> Reader:
    """The first reader whose ``detect`` accepts ``path``; DumpError (exit 2) if none does."""
    path = Path(path)
    if not path.exists():
        raise DumpError(f"{path}: no such file or folder")
    for reader in readers():
        if reader.detect(path):
            return reader
    raise DumpError(f"{path}: not a graphdbg dump, printed graph, minifier repro or compile-cache file")


def load(path: str | Path) -> "Dump":
    """Read ``path`` with the reader that recognises it; its manifest checked by graphdbg.schema."""
    from graphdbg.schema import validate_manifest

    dump = reader_for(path).load(Path(path))
    validate_manifest(dump.manifest, str(path))
    return dump


__all__ = ["Reader", "register", "readers", "reader_for", "load", "BUILTIN"]
