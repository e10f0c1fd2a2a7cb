"""``graphdbg ls``: find the dumps and printed graph files under a folder, read them, and group
the ones that are the same. Three parts: one walk of the folder (``walk``), one per-file cache
keyed by path, size, modification time and the code's stamp (``cache``), and the grouping
(``groups``); ``read`` reads what the walk found, ``logs`` attaches the failures of the run's
logs to the printed graphs that record none.

    >>> listing = list_dumps("dumps/")
    >>> [(g["ranks"], g["kind"]) for g in listing.groups]
    [([0, 1, 2, 3, 4, 5, 6, 7], 'compile_error')]
    >>> listing = list_dumps("corpus/sglang-thunderfx")
    >>> g = listing.groups[0]
    >>> g["model"], g["graphs"], g["ranks"], g["constructs"][:1]
    ('Llama-4-Maverick-17B-128E-Instruct', [0], [0, 1, 2, 3], ['torch.ops.sglang.inplace_all_reduce'])
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Callable

from graphdbg.dump import Dump, natural_key
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.formats import load
from graphdbg.formats.run_log import find_logs
from graphdbg.listing.cache import FileCache
from graphdbg.listing.groups import Listing
from graphdbg.listing.logs import apply_logs
from graphdbg.listing.read import read_dump_folders, read_printed_graphs, read_repros, sort_python_files
from graphdbg.listing.walk import walk
from graphdbg.strict_json import output_ready

__all__ = ["Listing", "list_dumps", "ls_output", "apply_logs", "load_with_log"]

Progress = Callable[[int, int], None]  # (files read, files to read)


def list_dumps(path: str | Path, log: str | Path | None = None, *, progress: Progress | None = None,
               cache: bool = True, full: bool = False) -> Listing:
    """Every dump and printed graph file under ``path`` (or ``path`` itself), read and grouped.

    A file that can't be read is a ``problems`` entry (one line, with file and line); a folder
    with nothing to list is an empty listing, a file that is neither dump nor graph a DumpError.
    Graph files that record no failure take it from ``log``, else from the logs beside them (a
    ``log`` that can't be read is a GraphdbgError, a found one a ``logs`` entry with its error).
    Printed graphs are scanned without torch (``formats/scan.py``), a file the scan can't decide
    is read in full (``full=True``: every file, for tests that compare the two). ``cache=False``:
    nothing from the cache or into it. ``progress(done, total)`` as files are read.
    """
    root = Path(path)
    if not root.exists():
        raise GraphdbgError(f"{root}: no such file or folder")
    found = walk(root)
    listing = Listing(root, problems=list(found.problems))
    with FileCache.open(cache) as store:
        graphs, repros = sort_python_files(found.files, store, full)
        total = len(found.dumps) + len(graphs) + len(repros)
        dumps, printed, seen = [], [], 0
        for seen, (where, dump, error) in enumerate(itertools.chain(
                read_dump_folders(found.dumps, store), read_printed_graphs(graphs, found.ranks, store, full=full),
                read_repros(repros)), 1):
            if progress is not None:
                progress(seen, total)
            if dump is None:
                listing.problems.append({"path": str(where), "error": error})
            elif dump.format == "dump":
                dumps.append(dump)
            else:
                printed.append(dump)
        if not root.is_dir() and not seen:
            raise DumpError(f"{root}: no graphdbg dumps here")
        dumps.sort(key=lambda d: (natural_key(d.id), d.rank))  # g2 before g10
        printed.sort(key=_printed_order)
        listing.dumps = dumps + printed
        listing.logs = apply_logs(listing.dumps, root, log, cache=store)
    return listing


def ls_output(path: str | Path, log: str | Path | None = None, *, failed: bool = False, kind: str | None = None,
              cache: bool = True, progress: Progress | None = None) -> dict[str, Any]:
    """What ``graphdbg ls --json`` prints, before it is written (``strict_json.encode_jsonable``)."""
    listing = list_dumps(path, log=log, progress=progress, cache=cache).select(failed, kind)
    return output_ready(listing.to_json(), "ls")  # type: ignore[return-value]


def load_with_log(path: str | Path, log: str | Path | None = None) -> Dump:
    """``load(path)``, with the failure the run's log gives it when it records none, as
    ``graphdbg ls`` of its folder gives it (``log``, else the log beside it)."""
    dump = load(path)
    where = Path(dump.path)
    if dump.format == "dump" or dump.signature:
        return dump
    if not where.is_file():
        apply_logs([dump], where, log)
    elif log is not None or find_logs(where.parent):
        listed = next((d for d in list_dumps(where.parent, log).dumps if os.path.realpath(d.path) == os.path.realpath(where)), None)
        if listed is not None:
            dump.change_manifest(failure=listed.manifest_data.get("failure"))
    return dump


def _printed_order(d: Dump) -> tuple:
    """Printed graphs by model, graph number (unnumbered first), id stem, rank."""
    p = d.manifest.printed
    return (p.model or "", p.graph_number if p.graph_number is not None else -1, d.id.rstrip("0123456789"), d.rank, d.id)
