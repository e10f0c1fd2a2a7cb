"""``graphdbg ls``'s answer for a folder, kept whole: when every file under the folder is as it
was when the folder was last listed (the same names, sizes and mtimes, the same graphdbg, torch
and ``--ops``, the same options), the listing's JSON text comes back from one row of ``ls_cache``'s
database, and nothing is read but the folder's entries. A change anywhere under the folder (a
new rank file, an edited log, a dump being written) and the listing is made again, from
``ls_cache``'s per-file entries where those still hold.

    >>> report = ls_report("corpus/")
    >>> report.text[:40]             # exactly what `graphdbg ls --json corpus/` prints
    '{\\n "graphdbg": "0.1.0",\\n "schema": "ls",'
    >>> report.data["groups"][0]["ranks"]    # the same, parsed (the table view)
    [0, 1, 2, 3]

A listing is not kept when a file under the folder changed within the last two seconds (a
rewrite of the same size within the clock's tick would look the same), when it holds a crash
dump (an armed dump is rewritten when its process dies), or for a single file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

from graphdbg._version import __version__
from graphdbg.display import gc_paused
from graphdbg.errors import GraphdbgError
from graphdbg.formats.ls_cache import RACY_NS, LsCache, StagedListing, code_stamp
from graphdbg.strict_json import ENCODER, json_ready, output_ready, text_of

if TYPE_CHECKING:
    from graphdbg.formats.listing import Progress


@dataclass
class LsReport:
    """What ``ls`` shows: ``text`` (its ``--json`` output), ``data`` (that text parsed) and
    ``problems`` (the files that could not be read); ``cached``: it came whole from the cache;
    ``written``: the text went to ``ls_report``'s ``out`` instead (``text`` is None). Where the
    text is not held (written, or ``table``), ``data`` is all of it but its rows, ``dumps``: what
    the table shows; a kept listing written whole has none (ask with ``table=True``)."""
    text: str | None
    problems: list[dict[str, Any]]
    cached: bool = False
    _data: Any = field(default=None, repr=False)
    written: bool = False

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            if self.text is None:
                raise GraphdbgError("this listing was written, not kept: ls_report(table=True) keeps what the table shows")
            self._data = json.loads(self.text)
        return self._data


def ls_report(path: str | Path, log: str | Path | None = None, *, failed: bool = False, kind: str | None = None,
              cache: bool = True, progress: Progress | None = None, out: TextIO | None = None, table: bool = False) -> LsReport:
    """``list_dumps(path, log).select(failed, kind)`` as ``ls`` prints it, kept whole in the cache
    for a folder whose files don't change (``cache=False``: made afresh, nothing kept).

    ``out``: the ``--json`` text is written there (``written``, and ``text`` is None), a row at a
    time once the files are read: the printed graphs' manifests wait on disk meanwhile
    (``listing.Spill``), so a listing of thousands is never held whole. ``table``: the caller
    shows the table (``data``), not the text: of a kept listing only what is not its rows is read,
    and nothing is written."""
    root = Path(path)
    if not root.exists():
        raise GraphdbgError(f"{root}: no such file or folder")
    key = _key(root, log, failed, kind) if cache and root.is_dir() else None
    store = LsCache.open() if key is not None else None
    try:
        if store is not None and key is not None:
            hit = store.get_listing(*key)
            if hit is not None and table:
                try:
                    return LsReport(None, hit.problems, cached=True, _data=hit.tail())
                except GraphdbgError:  # damaged since it was kept: made again below
                    hit = None
            if hit is not None:
                if out is not None:
                    for part in hit.parts():
                        out.write(part)
                    return LsReport(None, hit.problems, cached=True, written=True)
                return LsReport("".join(hit.parts()), hit.problems, cached=True)
        from graphdbg.formats import listing as listing_module  # lazy: the readers, only when the listing is made

        spill = listing_module.Spill() if out is not None else None
        try:
            listing = listing_module.list_dumps(root, log=log, progress=progress, cache=cache, slim=True, spill=spill).select(failed, kind)
            keep = store is not None and key is not None and not any(d.failure_kind == "crash" for d in listing.dumps)
            if spill is not None and out is not None:
                staged = store.stage_listing(key[0]) if keep and store is not None and key is not None else None
                parts = _Parts(out, staged)
                rows: list[int] = []
                try:
                    tail = write_listing(listing, spill, parts.write, rows)
                    parts.close()
                except BaseException:
                    if staged is not None:
                        staged.drop()
                    raise
                if staged is not None and key is not None:
                    staged.keep(key[1], tail["problems"], (rows[0], rows[1]))
                return LsReport(None, tail["problems"], written=True, _data=tail)
        finally:
            if spill is not None:
                spill.close()
        data = output_ready(listing.to_json(), "ls")
        del listing  # its manifests go before the text is made: the peak holds one of the two, not both
        text = text_of(data)
        problems = data["problems"]  # type: ignore[index]
        if keep and store is not None and key is not None:
            start = text.index(_ROWS) + len(_ROWS)  # the top level's keys are the only ones one space in
            store.put_listing(*key, [text], problems, (start, text.index(_AFTER_ROWS, start)))
        return LsReport(text, problems, cached=False, _data=data)
    finally:
        if store is not None:
            store.close()


_ROWS, _AFTER_ROWS = '\n "dumps": ', ',\n "groups": '  # around the rows, in the listing's text


def _at(value: Any, depth: int) -> str:
    """``value``'s text as ``text_of`` writes it ``depth`` levels into the output."""
    text = ENCODER.encode(json_ready(value))
    return text.replace("\n", "\n" + " " * depth) if depth else text


@gc_paused()
def write_listing(listing: Any, spill: Any, write: Callable[[str], Any], rows: list[int] | None = None) -> dict[str, Any]:
    """``text_of(output_ready(listing.to_json(), "ls"))``, written a few hundred rows at a time,
    each printed graph's manifest read back from ``spill`` for its row and let go; returns that
    output but its rows (``dumps``): what the table view shows. ``rows`` gets where the rows
    are in the text: ``[from, to)``."""
    # lazy: listing imports the readers, which this module (a kept listing's answer) needs not
    from graphdbg.formats.listing import GroupMaker, PrintedStub, _odd_ranks, summary_row

    head = '{\n "graphdbg": ' + _at(__version__, 1) + ',\n "schema": "ls",\n "root": ' + _at(str(listing.root), 1) + "," + _ROWS
    write(head)
    maker, captured = GroupMaker(), []
    items = _Items(write)
    for d in listing.dumps:
        full = spill.dump(d) if isinstance(d, PrintedStub) else d
        row = summary_row(full)
        if isinstance(d, PrintedStub) and row["path"] == d.path:
            row["path"] = d.path  # the stub's text, not a copy: the groups hold every member's path
        maker.add(full, row)
        items.add(row)
        if full.format == "dump":
            captured.append(full)
    items.close()
    if rows is not None:
        rows[:] = [len(head), len(head) + items.written]
    groups = maker.groups(_odd_ranks(captured))
    write(_AFTER_ROWS)
    items = _Items(write)
    for g in groups:
        items.add(g, len(g["paths"]))  # a group of thousands of members is a batch of its own
    items.close()
    problems, summary = json_ready(listing.problems), listing.summary(groups)
    write(',\n "summary": ' + _at(summary, 1) + ',\n "problems": ' + _at(problems, 1))
    if listing.logs:
        write(',\n "logs": ' + _at(listing.logs, 1))
    write("\n}\n")
    tail = {"graphdbg": __version__, "schema": "ls", "root": str(listing.root), "groups": groups, "summary": summary,
            "problems": problems}
    return {**tail, "logs": listing.logs} if listing.logs else tail


class _Items:
    """A list one level into the output, written about ``BATCH`` items at a time (one encoding per
    batch: json's encoder is made anew for each); an item may weigh more than one (a group, its
    members). ``written``: the characters written."""

    BATCH = 256

    def __init__(self, write: Callable[[str], Any]):
        self.out, self.batch, self.any, self.weight, self.written = write, [], False, 0, 0

    def write(self, text: str) -> None:
        self.written += len(text)
        self.out(text)

    def add(self, item: Any, weight: int = 1) -> None:
        self.batch.append(item)
        self.weight += max(1, weight)
        if self.weight >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        if self.batch:
            text = _at(self.batch, 1)  # "[\n  {...},\n  {...}\n ]"
            self.write(("," if self.any else "[") + text[1:-3])
            self.batch, self.any, self.weight = [], True, 0

    def close(self) -> None:
        self._flush()
        self.write("\n ]" if self.any else "[]")


class _Parts:
    """Writes to ``out``, and keeps what it wrote in ``staged`` (where given), a part of about a
    MiB at a time."""

    PART = 1 << 20

    def __init__(self, out: TextIO, staged: StagedListing | None):
        self.out, self.staged = out, staged
        self.pending: list[str] = []
        self.size = 0

    def write(self, piece: str) -> None:
        self.out.write(piece)
        if self.staged is not None:
            self.pending.append(piece)
            self.size += len(piece)
            if self.size >= self.PART:
                self.close()

    def close(self) -> None:
        if self.staged is not None and self.pending:
            self.staged.add("".join(self.pending))
            self.pending, self.size = [], 0


def _key(root: Path, log: str | Path | None, failed: bool, kind: str | None) -> tuple[str, str] | None:
    """``(slot, signature)``: which listing (folder, options, code) and of which files; None when a
    file changed too recently to tell a rewrite from no change."""
    log_stat = None
    if log is not None:
        try:
            st = os.stat(log)
            log_stat = [str(Path(log).resolve()), st.st_size, st.st_mtime_ns]
        except OSError:
            log_stat = [str(log), None, None]
    options = json.dumps([str(root), str(root.resolve()), str(log) if log is not None else None, failed, kind,
                          code_stamp(True), code_stamp(False)])
    slot = hashlib.sha256(options.encode()).hexdigest()
    newest = 0
    h = hashlib.sha256(slot.encode())
    h.update(json.dumps(log_stat).encode())
    for name, size, mtime in _files(root):
        h.update(f"{name}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
        newest = max(newest, mtime)
    if log_stat is not None and isinstance(log_stat[2], int):
        newest = max(newest, log_stat[2])
    if time.time_ns() - newest < RACY_NS:
        return None
    return slot, h.hexdigest()


def _files(root: Path) -> Iterator[tuple[str, int, int]]:
    """``(path below root, size, mtime)`` of every file under ``root``, hidden ones and those in
    dump folders too, through links to folders (as the readers follow them), each folder once;
    in an order that depends on the names only (each folder's entries sorted, its subfolders
    after its files), one folder's entries held at a time."""
    seen: set[tuple[int, int]] = set()
    stack = [(str(root), "")]
    while stack:
        folder, rel = stack.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            yield rel + "/", -1, 0  # a folder that can't be read: its state is part of the listing
            continue
        folders = []
        for e in entries:
            name = f"{rel}/{e.name}" if rel else e.name
            try:
                if e.is_dir():
                    folders.append((e.path, name))
                    continue
                st = e.stat()
            except OSError:
                yield name, -1, 0  # a dangling link
                continue
            yield name, st.st_size, st.st_mtime_ns
        stack.extend(reversed(folders))
