"""What the walk found, read: each dump folder's manifest, each printed graph scanned without
torch (``formats/scan.py``: a forward read once however many files print it; the full reader
where the scan can't decide), and PyTorch's own repros. Every answer is kept in the cache
(``listing/cache.py``), so a second listing reads no file it read before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from graphdbg.dump import Dump
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.formats import load
from graphdbg.formats.dump_folder import DumpFolder
from graphdbg.formats.printed_file import printed_dump, read_printed_source, scanned_manifest
from graphdbg.formats.scan import forget_forwards
from graphdbg.formats.sniff import looks_like_printed_graph, may_be_torch_repro
from graphdbg.judge.fatal_signal import resolve_crash
from graphdbg.listing.cache import FileCache

Answer = tuple[Any, Dump | None, str | None]  # (path, dump, None) or (path, None, error)
Printed = tuple[str, Path, Any, Any]  # (file, its Path, its cache key, what the cache holds of it or None)


def read_dump_folders(folders: list[Path], cache: FileCache) -> Iterator[Answer]:
    """A folder as it was when it was last listed is not validated again, and torch is not imported."""
    for folder in folders:
        key = cache.key(folder)
        hit = cache.get(key)
        if hit is not None and hit[0] is not None:
            resolve_crash(folder, hit[0])  # fault.txt is read every time: a crash may come later
            yield folder, Dump(folder, hit[0], DumpFolder(folder, hit[0])), None
            continue
        try:
            dump = load(folder)
        except DumpError as e:  # not kept: the user may be fixing it
            yield folder, None, str(e)
            continue
        if dump.failure_kind != "crash":  # an armed dump may still become a crash
            cache.put(key, dump.manifest_data, None)
        yield folder, dump, None


def sort_python_files(files: list[str], cache: FileCache, full: bool = False) -> tuple[list[Printed], list[str]]:
    """The printed graphs among ``files`` (each with its cache key and what the cache holds of it:
    a file the cache holds is a printed graph, not looked at again), and PyTorch's own repros.
    ``full``: nothing from the cache (every printed graph through the full reader)."""
    printed: list[Printed] = []
    repros: list[str] = []
    for f in files:
        path, key = Path(f), cache.key(f)
        hit = cache.get(key) if not full else None
        if hit is not None or looks_like_printed_graph(path):
            printed.append((f, path, key, hit))
        elif _is_torch_repro(path):
            repros.append(f)
    return printed, repros


def read_printed_graphs(printed: list[Printed], ranks: dict[str, frozenset[int]] | None, cache: FileCache,
                        full: bool = False) -> Iterator[Answer]:
    """Each printed graph, in order, in this process (docs/benchmarks.md says why); ``ranks``: the
    walk's, else each folder is listed. ``full``: through the full reader (tests compare the two)."""
    try:
        for f, path, key, hit in printed:
            here = ranks.get(os.path.dirname(f) or ".") if ranks is not None else None
            if hit is None:
                hit = _full_manifest(path) if full else _scanned(path, here)
                cache.put(key, *hit)
            manifest, error = hit
            yield f, printed_dump(path, manifest, here) if manifest is not None else None, error
    finally:
        forget_forwards()


def read_repros(repros: list[str]) -> Iterator[Answer]:
    for f in repros:
        try:
            yield f, load(f), None
        except GraphdbgError as e:
            yield f, None, str(e)


def _is_torch_repro(path: Path) -> bool:
    if path.suffix != ".py" or not may_be_torch_repro(path):
        return False
    # lazy: ls imports no torch (listing/read.py)
    from graphdbg.formats.torch_repro import detect_format

    return detect_format(path) is not None


def _scanned(path: Path, ranks: frozenset[int] | None) -> tuple[dict[str, Any] | None, str | None]:
    """``(manifest, error)`` of a printed graph from its scan, else from the full reader."""
    try:
        source = read_printed_source(path)
    except GraphdbgError as e:
        return None, str(e)
    try:
        manifest, error, undecided = scanned_manifest(path, source, ranks)
    except Exception as e:  # e.g. RecursionError on an absurdly nested expression
        undecided = f"the scan failed ({type(e).__name__})"
    return _full_manifest(path) if undecided is not None else (manifest, error)


def _full_manifest(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    # lazy: only files the scan can't decide import torch (listing/read.py)
    from graphdbg.formats.printed_graph import load_printed_graph

    try:
        return load_printed_graph(path).manifest_data, None
    except GraphdbgError as e:
        return None, str(e)
