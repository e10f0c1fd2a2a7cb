"""Find dumps and printed graph files under a folder, and group the ones that are the same.

Dump folders group by (graph hash, failure kind, signature). Printed graph files (SGLang's
``rank{R}_{G}.py``, Dynamo's ``graph_module_*.py``) group by model and by their graph with
rank-specific literals masked (device index, vocab-shard offsets), so eight ranks printing
the same layer are one row with their ranks.

    >>> listing = list_dumps("dumps/")
    >>> [(g["ranks"], g["kind"]) for g in listing.groups]
    [([0, 1, 2, 3, 4, 5, 6, 7], 'compile_error')]
    >>> listing = list_dumps("corpus/sglang-thunderfx")
    >>> g = listing.groups[0]
    >>> g["model"], g["graphs"], g["ranks"], g["constructs"][:1]
    ('Llama-4-Maverick-17B-128E-Instruct', [0], [0, 1, 2, 3], ['torch.ops.sglang.inplace_all_reduce'])

Graph files that record no failure take theirs from the run's log beside them (``log.txt``,
``*.log``, or ``log=``; ``graphdbg.formats.run_log``), which also says whether that was inferred.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import re
import sqlite3
from collections import Counter, OrderedDict, deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from graphdbg._version import __version__
from graphdbg.backends.recipe import shown_backend
from graphdbg.display import Displayed, gc_paused
from graphdbg.dump import Dump, is_failure
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.formats import load
from graphdbg.formats.dump_folder import DumpFolder
from graphdbg.formats.ls_cache import LsCache, folder_of, scratch_db
from graphdbg.formats.printed_file import (
    FAILURE_KIND,
    NO_FAILURE,
    RANK_FILE,
    BodyScan,
    PrintedFile,
    body_from_text,
    body_text,
    head_and_key,
    printed_dump,
    printed_from_body,
    read_printed_source,
    scan_body,
)
from graphdbg.formats.run_log import RunLog, attach_log, find_logs, log_key, name_and_stem, read_log
from graphdbg.formats.scan import forget_forwards, sharing
from graphdbg.formats.sniff import looks_like_printed_graph, may_be_torch_repro
from graphdbg.judge.fatal_signal import resolve_crash
from graphdbg.store.manifest import MANIFEST, find_dumps

_SUMMARY_KEYS = ("id", "nodes", "kind", "backend", "error_type", "message", "signature", "graph_hash", "frame", "compile_id")
_LOG_KEYS = ("log", "log_line", "log_inferred", "log_how")


@dataclass
class Listing(Displayed):
    root: Path
    dumps: list[Dump] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)  # each log read: RunLog.to_json(), or path + error

    @property
    def groups(self) -> list[dict[str, Any]]:
        """One group per (graph hash, failure kind, signature), with the ranks and paths in it.

        Printed graph files group per (model, graph with rank literals masked); their groups
        also carry ``model``, ``graphs`` (graph numbers from the headers), ``files``,
        ``constructs`` (what needs stand-ins) and ``rank_literals`` (the literals that differ
        between the members, one list of values per literal, in member order).
        """
        maker = GroupMaker()
        for d in self.dumps:
            maker.add(d, summary_row(d))
        return maker.groups(_odd_ranks([d for d in self.dumps if d.format == "dump"]))  # captured dumps, not foreign files

    def select(self, failed: bool = False, kind: str | None = None) -> Listing:
        """The same listing with only failed dumps (``failed``), or dumps of one failure ``kind``."""
        keep = [d for d in self.dumps if (not failed or is_failure(d.failure_kind)) and (kind is None or d.failure_kind == kind)]
        return Listing(self.root, keep, self.problems, self.logs)

    def summary(self, groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``files``, ``groups``, ``failed`` (groups whose dumps record a failure), ``by_kind``
        (groups per failure kind) and ``unreadable`` (files that could not be read)."""
        groups = self.groups if groups is None else groups
        by_kind: dict[str, int] = {}
        for g in groups:
            by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + 1
        return {"files": len(self.dumps), "groups": len(groups), "failed": sum(is_failure(g["kind"]) for g in groups),
                "by_kind": by_kind, "unreadable": len(self.problems)}

    @gc_paused()
    def to_json(self) -> dict[str, Any]:
        groups = self.groups
        return {
            "graphdbg": __version__,
            "root": str(self.root),
            "dumps": [summary_row(d) for d in self.dumps],
            "groups": groups,
            "summary": self.summary(groups),
            "problems": self.problems,
            **({"logs": self.logs} if self.logs else {}),
        }


class GroupMaker:
    """``Listing.groups``, one dump at a time (``add`` each dump with its ``summary_row``, in the
    listing's order): what a group needs of its members is kept, not the members (``ls`` streams
    thousands)."""

    def __init__(self) -> None:
        self._groups: dict[tuple, dict[str, Any]] = {}
        self._first: dict[tuple, Dump] = {}
        self._literals: dict[tuple, _Literals] = {}  # the printed members' rank literals that differ
        self._paths: dict[tuple, list[Path]] = {}  # each captured member's path (for differs)
        self._names: dict[str, str] = {}

    def add(self, d: Dump, s: dict[str, Any]) -> None:
        foreign = s.get("format") == "printed_graph"
        key = ("printed_graph", s["model"], s["group_hash"], s["signature"]) if foreign else (s["graph_hash"], s["kind"], s["signature"])
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = {**{k: s.get(k) for k in _SUMMARY_KEYS}, "ranks": [], "paths": [], "modules": [], "frames": []}
            if foreign:
                g.update({"format": "printed_graph", "model": s["model"], "graphs": [], "files": [],
                          "constructs": s["constructs"], "rank_literals": []})
            if "log" in s:  # another tool's file: its failure may come from the run's log
                g.update({k: s[k] for k in _LOG_KEYS})
            self._first[key], self._literals[key], self._paths[key] = d, _Literals(), []
        g["ranks"].append(s["rank"])
        g["paths"].append(s["path"])
        g["modules"].append(s.get("module"))  # identical per-block graphs: which blocks
        g["frames"].append(" ".join(x for x in (s.get("frame"), f"[{s['compile_id']}]" if s.get("compile_id") else None) if x) or None)
        if not foreign:
            self._paths[key].append(d.path)
        else:
            self._literals[key].add(d.rank_literals)
            name = os.path.basename(s["path"])  # Path(...).name of a path as str(Path) writes it
            g["files"].append(self._names.setdefault(name, name))  # copies of a run share their file names
            if s["graph"] is not None and s["graph"] not in g["graphs"]:
                g["graphs"].append(s["graph"])

    def groups(self, odd: dict[Path, list[str]]) -> list[dict[str, Any]]:
        """The groups, failures first; ``odd``: ``_odd_ranks`` of the captured dumps."""
        groups = self._groups
        for key, g in groups.items():
            if g.get("format") == "printed_graph":
                g["graphs"].sort()
                g["rank_literals"] = self._literals[key].differing()
        for key, g in groups.items():  # a piece of a nested compile names the dump of its graph, and back
            links = _links(self._first[key])
            if links.get("parent"):
                g["parent"] = links["parent"]
                g["piece"] = links["piece"]
            if links.get("children"):
                g["children"] = links["children"]
        for key, g in groups.items():
            if g.get("format") != "printed_graph":
                g["differs"] = sorted({what for p in self._paths[key] for what in odd.get(p, [])})
        # failures first (a stable sort: within each, the listing's order); pieces stay under their graph
        return sorted(groups.values(), key=lambda g: not is_failure(g["kind"]))


def _links(d: Dump) -> dict[str, Any]:
    """A captured dump's place in a nested compile: ``parent`` (the dump of the graph it is a
    piece of) and ``piece``, and ``children`` (its pieces' dumps), as paths."""

    m = getattr(d, "manifest", None) or {}
    out: dict[str, Any] = {}
    parent = m.get("parent") if isinstance(m.get("parent"), dict) else {}
    if parent.get("dir"):
        out["parent"] = str(Path(d.path).parent / parent["dir"])
        out["piece"] = parent.get("piece")
    children = [c for c in m.get("children") or [] if isinstance(c, dict) and c.get("dir")]
    if children:
        out["children"] = [os.path.normpath(Path(d.path).parent / c["dir"]) for c in children]
    return out


def summary_row(d: Dump) -> dict[str, Any]:
    """``d.summary()``; for a file of another tool's, plus where its failure came from when a
    run's log gave it: ``log`` (the log's path), ``log_line``, ``log_inferred`` and ``log_how``
    (all None otherwise). The backend is then the log's. A captured dump's row adds ``frame``,
    ``compile_id`` (capture/origin.py) and ``module``, the module path all its nodes share."""
    row = d.summary()
    if d.manifest.get("backend_recipe") is not None:  # aot_autograd(...) / partial: what it was built from

        row["backend"] = shown_backend(d.manifest)
    if d.format == "dump":
        origin = d.manifest.get("origin") or {}
        where = f"{origin['function']} ({Path(origin['file']).name}:{origin['line']})" if origin.get("function") else None
        row.update(frame=where, compile_id=origin.get("compile_id"),
                   module=module_prefix((d.manifest.get("graph") or {}).get("node_info") or {}))
        links = _links(d)
        row.update(parent=links.get("parent"), piece=links.get("piece"), children=links.get("children", []))
        return row
    failure = d.manifest.get("failure") or {}
    log = failure.get("log") if failure.get("source") == "log" else None
    row.update({"log": log["path"], "log_line": log["line"], "log_inferred": log["inferred"], "log_how": log["how"]}
               if log else dict.fromkeys(_LOG_KEYS))
    if log and failure.get("backend"):
        row["backend"] = failure["backend"]
    return row


def _input_specs(d: Dump) -> tuple:
    return tuple((i.get("kind"), i.get("dtype"), str(i.get("shape")), str(i.get("value")) if i.get("kind") != "symint" else None)
                 for i in d.manifest.get("inputs", []))


def _odd_ranks(dumps: list[Dump]) -> dict[Path, list[str]]:
    """For each graph of a world (same g<N> on every rank), what of a rank's dump differs from
    what most ranks have: "graph" (hash), "inputs" (specs) or "error" (signature)."""

    worlds: dict[str, list[Dump]] = {}
    for d in dumps:
        if d.world_size > 1:
            worlds.setdefault(d.id.split("-")[0], []).append(d)
    flags: dict[Path, list[str]] = {}
    for members in worlds.values():
        if len({d.rank for d in members}) < 2:
            continue
        facts = {d.path: {"graph": d.graph_hash, "inputs": _input_specs(d), "error": d.signature} for d in members}
        for what in ("graph", "inputs", "error"):
            counts = Counter(repr(f[what]) for f in facts.values())
            majority, n = counts.most_common(1)[0]
            if n == len(members):
                continue
            for path, f in facts.items():
                if repr(f[what]) != majority:
                    flags.setdefault(path, []).append(what)
    return flags


class _Literals:
    """The rank literals of a group's members, one member at a time: for each position where
    members differ, every member's value there (the same lists as ``[list(v) for v in
    zip(*members) if len(set(v)) > 1]``, none where the members' counts differ), holding the
    first member's literals and those columns only."""

    def __init__(self) -> None:
        self.first: list[Any] | None = None
        self.members = 0
        self.columns: dict[int, list[Any]] = {}
        self.uneven = False

    def add(self, literals: list[Any]) -> None:
        self.members += 1
        if self.first is None:
            self.first = literals
            return
        if self.uneven or len(literals) != len(self.first):
            self.uneven = True
            return
        for i, (a, b) in enumerate(zip(self.first, literals)):
            column = self.columns.get(i)
            if column is not None:
                column.append(b)
            elif a != b:  # literals are ints (and device indices)
                self.columns[i] = [a] * (self.members - 1) + [b]

    def differing(self) -> list[list[Any]]:
        if self.members < 2 or self.uneven:
            return []
        return [self.columns[i] for i in sorted(self.columns)]


Progress = Callable[[int, int], None]  # (files read, files to read)


class PrintedStub:
    """A printed graph in a listing while its manifest waits in a ``Spill``: what sorting,
    filtering and the run logs' attachment (``apply_logs``) read of it, and nothing more. Of its
    manifest it holds the failure only, and is that manifest itself (``stub.manifest["failure"]``,
    which ``attach_log`` sets): a dict per stub was a fifth of a listing's memory."""

    __slots__ = ("path", "_id", "model", "graph_number", "rank", "failure", "seq")
    format = "printed_graph"

    def __init__(self, dump: Dump, seq: int, path: str, model: str | None):
        self.path, self.model = path, model
        self._id = None if dump.id == name_and_stem(path)[1] else dump.id  # the file's stem, as a rule: made when asked
        self.graph_number, self.rank, self.seq = dump.graph_number, dump.rank, seq
        failure = dump.manifest.get("failure")
        self.failure = _PRINTED_FAILURE if failure == _PRINTED_FAILURE else failure

    @property
    def id(self) -> str:
        return self._id if self._id is not None else name_and_stem(self.path)[1]

    @property
    def manifest(self) -> PrintedStub:
        return self

    def get(self, key: str, default: Any = None) -> Any:
        return self.failure if key == "failure" else default

    def __getitem__(self, key: str) -> Any:
        if key != "failure":
            raise KeyError(key)
        return self.failure

    def __setitem__(self, key: str, value: Any) -> None:
        if key != "failure":
            raise KeyError(key)
        self.failure = value

    @property
    def failure_kind(self) -> str:
        kind = str((self.failure or {}).get("kind", "?"))
        return "printed_graph" if kind == "foreign" else kind  # as Dump.failure_kind

    @property
    def contents(self) -> PrintedFile:  # the run logs' construct matching peeks at the text
        return PrintedFile(Path(self.path))


# a printed graph's own failure, as printed_manifest writes it (one object for thousands of stubs;
# attach_log replaces a failure, never changes it)
_PRINTED_FAILURE = {"kind": FAILURE_KIND, "exception": None, "signature": None, "message": NO_FAILURE}


class Spill:
    """Printed graphs' manifests set aside on disk while a listing of thousands is made (a
    private temporary sqlite database): ``put`` a Dump, keep its ``PrintedStub``; ``dump`` it
    back, with the failure the stub was given since."""

    def __init__(self) -> None:
        self.db = scratch_db("create table m (seq integer primary key, manifest text)")
        self.n = 0
        self.models: dict[str, str] = {}  # one text per model name, for its thousands of stubs

    def put(self, dump: Dump, path: str | None = None) -> PrintedStub:
        """``path``: ``str(dump.path)``, where the caller holds it already."""
        self.db.execute("insert into m values (?, ?)", (self.n, json.dumps(dump.manifest)))
        self.n += 1
        model = dump.model
        return PrintedStub(dump, self.n - 1, path if path is not None else str(dump.path),
                           self.models.setdefault(model, model) if model is not None else None)

    def dump(self, stub: PrintedStub) -> Dump:
        manifest = json.loads(self.db.execute("select manifest from m where seq=?", (stub.seq,)).fetchone()[0])
        manifest["failure"] = stub.failure
        path = Path(stub.path)
        return Dump(path, manifest, PrintedFile(path))

    def close(self) -> None:
        self.db.close()


@gc_paused()
def list_dumps(path: str | Path, log: str | Path | None = None, *, progress: Progress | None = None,
               cache: bool = True, workers: int | None = None, full: bool = False, slim: bool = False,
               spill: Spill | None = None) -> Listing:
    """Every dump and printed graph file under ``path`` (or ``path`` itself), read and grouped.

    A file that can't be read is a ``problems`` entry (one line, with file and line), not an
    exception; a folder with neither dumps nor printed graphs is an empty listing (a CI step
    after a green run has nothing to list), a file that is neither a DumpError. Graph files
    with no recorded failure take it from ``log``, or from the logs found beside them; a
    ``log`` that can't be read is a GraphdbgError, a found one a ``logs`` entry with its error.

    Printed graphs are scanned for their manifest (``formats/scan.py``: one ``ast.parse``, no
    torch; ``show`` and ``replay`` read them in full), and a file the scan can't decide is read
    with the full reader (``full=True``: every file, for tests that compare the two); 48 files
    or more are read in worker processes, one per usable core (``workers=N`` to choose).
    Manifests, and the parses of run logs, are kept in ``ls_cache`` (``cache=False``: not), so a
    second listing of the same files reads none. ``progress(done, total)`` is called as files
    are read. ``slim``: printed graphs' manifests keep only what the listing shows (``ls``, which
    holds thousands: not their inputs, ops or environment). ``spill``: printed graphs are
    ``PrintedStub``s, their manifests in the spill (``ls_report`` writes the listing from it).
    """
    root = Path(path)
    if not root.exists():
        raise GraphdbgError(f"{root}: no such file or folder")
    listing = Listing(root)
    folders = find_dumps(root) if root.is_dir() else []
    store = LsCache.open() if cache else None
    try:
        candidates = list(_walk(root))  # texts, not Paths: a Path is ~400 bytes, and a folder holds thousands
        known = store.find_many(candidates) if store is not None else {}
    finally:
        if store is not None:
            store.close()
    files, repros = _graphs_among(candidates, known)
    if not folders and not files and not repros and not root.is_dir():
        raise DumpError(f"{root}: no graphdbg dumps here")
    total = len(folders) + len(files) + len(repros)
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for folder, dump, error in read_dump_folders(folders, cache=cache):
        if dump is not None:
            listing.dumps.append(dump)
        else:
            listing.problems.append({"path": str(folder), "error": error})
        step()
    dumps = listing.dumps
    foreign = []
    for file, dump, error in read_printed_graphs(files, cache=cache, workers=workers, full=full, known=known,
                                                 ranks=_ranks_by_folder(candidates) if root.is_dir() else None):
        if dump is not None:
            if slim:
                _slim(dump.manifest)
            foreign.append(spill.put(dump, str(file)) if spill is not None else dump)
        else:
            listing.problems.append({"path": str(file), "error": error})
        step()
    for file in repros:
        try:
            foreign.append(load(file))
        except GraphdbgError as e:
            listing.problems.append({"path": str(file), "error": str(e)})
        step()
    dumps.sort(key=lambda d: (natural_key(d.id), d.rank))  # g2 before g10
    foreign.sort(key=lambda d: (d.model or "", d.graph_number if d.graph_number is not None else -1, d.id.rstrip("0123456789"), d.rank, d.id))
    listing.dumps = dumps + foreign
    listing.logs = apply_logs(listing.dumps, root, log, cache=cache)
    forget_forwards()
    return listing


# A printed graph's manifest as a listing needs it: without what only show and replay read.
_NOT_SHOWN = ("inputs", "env", "attrs", "external_objects")
_NOT_SHOWN_GRAPH = ("ops", "node_info")


def _slim(manifest: dict[str, Any]) -> None:
    for key in _NOT_SHOWN:
        manifest.pop(key, None)
    graph = manifest.get("graph")
    if isinstance(graph, dict):
        manifest["graph"] = {k: v for k, v in graph.items() if k not in _NOT_SHOWN_GRAPH}


def read_dump_folders(folders: list[Path], *, cache: bool = True) -> Iterator[tuple[Path, Dump | None, str | None]]:
    """``(folder, dump, None)`` or ``(folder, None, error)`` per dump folder, in order. A folder
    whose files are as they were when it was last listed is not validated again (its manifest
    comes from ``ls_cache``), and then torch is not imported."""

    store = LsCache.open(graphs=False) if cache else None
    try:
        for folder in folders:
            hit = store.get(folder) if store is not None else None
            if hit is not None and hit[0] is not None:
                manifest = hit[0]
                resolve_crash(folder, manifest)  # fault.txt is read every time: a crash may come later
                yield folder, Dump(folder, manifest, DumpFolder(folder, manifest)), None
                continue
            try:
                dump = load(folder)
            except DumpError as e:  # not cached: the user may be fixing it
                yield folder, None, str(e)
                continue
            if store is not None and dump.failure_kind != "crash":  # an armed dump may still become a crash
                store.put(folder, dump.manifest, None)
            yield folder, dump, None
    finally:
        if store is not None:
            store.close()


def _full_manifest(path: Path) -> tuple[Path, dict[str, Any] | None, str | None]:
    # lazy: only files the scan can't decide import torch (formats/listing.py)
    from graphdbg.formats.printed_graph import load_printed_graph

    try:
        return path, load_printed_graph(path).manifest, None
    except GraphdbgError as e:
        return path, None, str(e)


def _scan_bodies(batch: list[tuple[str, str, str]]) -> dict[str, BodyScan]:
    """A worker's share: ``(key, file name, text)`` each, scanned; a scan that fails leaves the
    file to the full reader, which says what is wrong with it."""
    out = {}
    for key, name, source in batch:
        try:
            out[key] = scan_body(source, name)
        except Exception as e:  # e.g. RecursionError on an absurdly nested expression
            out[key] = BodyScan(undecided=f"the scan failed ({type(e).__name__})")
    return out


def read_printed_graphs(files: list[Path] | list[str], *, cache: bool = True, workers: int | None = None, full: bool = False,
                        known: dict[Any, tuple[str, int, int]] | None = None,
                        ranks: dict[str, frozenset[int]] | None = None) -> Iterator[tuple[Any, Dump | None, str | None]]:
    """``(file, dump, None)`` or ``(file, None, error)`` for each file (a Path, or a path's text as
    ``str(Path)`` writes it), in order, as they are read. ``full``: every file through the full
    reader (fx), as before the scan (tests compare the two). ``known``: the files the cache holds
    (``LsCache.find_many``, looked up already), each loaded when it comes and taken out of it (not
    copied: a listing of thousands holds one); ``ranks``: the rank
    files' ranks in each folder (by its text), from the walk that found them (else each folder
    is listed)."""
    if not files:
        return
    store = LsCache.open() if cache else None
    if known is None:
        known = store.find_many(files) if store is not None else {}
    todo = [f for f in files if f not in known]
    fresh = _parse_all(todo, workers, full, ranks)
    try:
        for f in files:
            path = f if isinstance(f, Path) else Path(f)
            if f in known:
                hit = store.fetch(known.pop(f)) if store is not None else None
                if hit is None:  # let go of since it was found: read here
                    _, manifest, error = next(_parse_all([f], 1, full))
                else:
                    manifest, error = hit
            else:
                _, manifest, error = next(fresh)
                if store is not None:
                    store.put(path, manifest, error)
            dump = printed_dump(path, manifest, ranks.get(folder_of(f)) if ranks is not None else None) if manifest is not None else None
            yield f, dump, error
    finally:
        if store is not None:
            store.close()


def _parse_all(files: list[Path] | list[str], workers: int | None, full: bool,
               ranks: dict[str, frozenset[int]] | None = None) -> Iterator[tuple[Path, dict[str, Any] | None, str | None]]:
    """``(file, manifest, error)`` for each file, in order, as they are read. Each distinct body
    (``printed_file.head_and_key``: the ranks of one model print one graph under their own headers)
    is scanned once; files the scan can't decide go to the full reader, one by one. ``ranks``: the
    rank files' ranks in each folder (by its text), for the world sizes, where the walk found them."""
    # Many files: one worker per core this process may use (forked, so a worker starts in
    # milliseconds). On the quiet 2-core machine, 9,728 printed graphs: 19.6 s wall in one
    # process, 10.8 s with two workers, the same CPU seconds (19.5 and 19.3).
    n = workers if workers is not None else min(_usable_cores(), _MAX_WORKERS)
    if n <= 1 or len(files) < _PARALLEL_FROM:
        yield from (_full_manifest(Path(f)) for f in files) if full else _BodyReader(files, None, 1, ranks).results()
        return
    chunk = max(1, min(16, len(files) // (4 * n)))
    # _worker_start: a worker is forked from a listing that paused the collector (gc_paused), and
    # the walks leave cycles (9,728 distinct files: each worker grew by 28 MiB without it)
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start) as pool:
        yield from pool.map(_full_manifest, map(Path, files), chunksize=chunk) if full else _BodyReader(files, pool, chunk, ranks).results()


def _worker_start() -> None:
    """A worker's collector: what it was forked with is frozen (never looked at again, and its
    pages not copied by the looking), what it makes is collected."""
    gc.freeze()
    gc.set_threshold(20_000)  # a walk makes objects by the hundred thousand: a look per 20,000 of them, not 700
    gc.enable()


class _BodyReader:
    """Reads the files in order, hands each distinct body to the workers (or scans it here) in
    batches, and makes each file's manifest from its body's scan once that is back. The batches
    in flight are bounded (their texts are held), and so are the scans held for later files:
    past ``KEEP``, the oldest is set aside on disk (``_Aside``) until a file of its body comes."""

    KEEP = 256  # bodies' scans held for files still to come with the same body (~5 KiB each)

    def __init__(self, files: list[Path] | list[str], pool: ProcessPoolExecutor | None, batch: int,
                 ranks: dict[str, frozenset[int]] | None = None):
        self.files, self.pool, self.batch_size, self.ranks = files, pool, batch, ranks
        self.scanned: OrderedDict[str, BodyScan] = OrderedDict()
        self.aside = _Aside()
        self.flying: dict[str, Future] = {}  # body key -> the future of its batch
        self.batches: set[Future] = set()
        self.batch: dict[str, tuple[str, str, str]] = {}
        self.fulls: dict[Path, Future] = {}  # files the full reader reads in a worker
        self.limit = 4 * (getattr(pool, "_max_workers", 1) if pool is not None else 1)
        self.share = sharing()

    def results(self) -> Iterator[tuple[Path, dict[str, Any] | None, str | None]]:
        queue: deque[tuple[Path, str | None, str | None, str | None]] = deque()  # (file, head, error, body key)
        try:
            for name in self.files:
                f = Path(name)
                try:
                    source = read_printed_source(f)
                except GraphdbgError as e:  # unreadable, or no longer a regular file
                    queue.append((f, None, str(e), None))
                else:
                    head, key = head_and_key(source)
                    key = key if self.share else str(f)
                    if key not in self.scanned and key not in self.flying and key not in self.batch and not self.aside.has(key):
                        self.batch[key] = (key, str(f), source)
                        if len(self.batch) >= self.batch_size:
                            self._send()
                    queue.append((f, head, None, key))
                yield from self._ready(queue, final=False)
            self._send()
            yield from self._ready(queue, final=True)
        finally:
            self.aside.close()

    def _send(self) -> None:
        if not self.batch:
            return
        batch, self.batch = list(self.batch.values()), {}
        if self.pool is None:
            self._keep(_scan_bodies(batch))
            return
        future = self.pool.submit(_scan_bodies, batch)
        self.batches.add(future)
        for key, _, _ in batch:
            self.flying[key] = future

    def _keep(self, bodies: dict[str, BodyScan], future: Future | None = None) -> None:
        self.batches.discard(future)  # type: ignore[arg-type]
        for key, body in bodies.items():
            self.scanned[key] = body
            self.scanned.move_to_end(key)
            self.flying.pop(key, None)
        while len(self.scanned) > self.KEEP:
            self.aside.put(*self.scanned.popitem(last=False))

    def _ready(self, queue: deque, final: bool) -> Iterator[tuple[Path, dict[str, Any] | None, str | None]]:
        """The answers at the head of ``queue`` that are in; the first awaited where the batches
        in flight are too many (or ``final``)."""
        while queue:
            f, head, error, key = queue[0]
            wait = final or len(self.batches) > self.limit
            if key is None:
                manifest = None
            elif f in self.fulls:
                if not (wait or self.fulls[f].done()):
                    return
                _, manifest, error = self.fulls.pop(f).result()
            else:
                body = self.scanned.get(key)
                if body is None:
                    if key in self.batch:
                        self._send()
                    future = self.flying.get(key)
                    if future is not None:
                        if not (wait or future.done()):
                            return
                        self._keep(future.result(), future)
                        continue
                    body = self.aside.get(key)
                    if body is not None:
                        self._keep({key: body})
                    else:
                        body = self._rescan(f)  # its scan was let go: this file's, here
                if not self.share:  # a body of its own: no file to come needs it
                    self.scanned.pop(key, None)
                manifest, error, undecided = self._answer(f, head, body)
                if undecided is not None:  # the full reader's, in a worker: awaited in turn
                    if self.pool is not None:
                        self.fulls[f] = self.pool.submit(_full_manifest, f)
                        continue
                    _, manifest, error = _full_manifest(f)
            queue.popleft()
            yield f, manifest, error

    def _answer(self, f: Path, head: str | None, body: BodyScan) -> tuple[dict[str, Any] | None, str | None, str | None]:
        if head is None or head.count("\n") < body.class_line - 1:  # the header runs past the text kept
            try:
                head = read_printed_source(f)
            except GraphdbgError as e:
                return None, str(e), None
            return printed_from_body(f, head, body, ranks=self._ranks(f))
        return printed_from_body(f, head, body, whole=False, ranks=self._ranks(f))

    def _ranks(self, f: Path) -> frozenset[int] | None:
        return self.ranks.get(folder_of(f)) if self.ranks is not None else None

    @staticmethod
    def _rescan(f: Path) -> BodyScan:
        try:
            return _scan_bodies([("", str(f), read_printed_source(f))])[""]
        except GraphdbgError as e:
            return BodyScan(undecided=str(e))  # changed since: the full reader says what it is now


class _Aside:
    """Bodies' scans set aside on disk (``printed_file.body_text``; a private temporary sqlite
    database, made when the first is set aside): a folder of thousands of distinct graphs is
    listed in the memory of a few hundred. A scan whose values JSON can't keep is let go."""

    def __init__(self) -> None:
        self.db: sqlite3.Connection | None = None

    def put(self, key: str, body: BodyScan) -> None:
        text = body_text(body)
        if text is None:
            return
        if self.db is None:
            self.db = scratch_db("create table b (key text primary key, body text)")
        self.db.execute("insert or replace into b values (?, ?)", (key, text))

    def has(self, key: str) -> bool:
        return self.db is not None and self.db.execute("select 1 from b where key=?", (key,)).fetchone() is not None

    def get(self, key: str) -> BodyScan | None:
        row = self.db.execute("select body from b where key=?", (key,)).fetchone() if self.db is not None else None
        return body_from_text(row[0]) if row is not None else None

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


_PARALLEL_FROM = 48  # files to read before worker processes pay for their start
_MAX_WORKERS = 16


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on (a container's, a taskset's)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def module_prefix(node_info: dict[str, dict[str, Any]]) -> str | None:
    """The module path every node of a graph shares (``transformer.h.2``), or None."""
    paths = [info["module"].split(".") for info in node_info.values() if info.get("module")]
    if not paths:
        return None
    common = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return ".".join(common) or None


def natural_key(text: str) -> list[Any]:
    """Sort key with the numbers in ``text`` compared as numbers: g2-... before g10-..."""

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def apply_logs(dumps: list[Dump], root: Path, log: str | Path | None = None, *, cache: bool = False) -> list[dict[str, Any]]:
    """Attach the failures of run logs to the dumps that record none; one entry per log read.

    With ``log``, that log serves every dump. Otherwise each dump's folder, then its parents up
    to ``root``, are searched for ``log.txt`` / ``*.log``; the nearest folder with one wins.
    ``cache``: a log read before, unchanged, comes parsed from ``ls_cache``.
    """

    # captured dumps speak for themselves, even those of mode="always" that record no failure
    bare = [d for d in dumps if d.format != "dump" and not (d.manifest.get("failure") or {}).get("signature")]
    if not bare and log is None:
        return []
    by_log: dict[Path, list[Dump]] = {}
    if log is not None:
        by_log[Path(log)] = bare
    else:
        top = root if root.is_dir() else root.parent
        found: dict[Path, list[Path]] = {}
        nearest: dict[str, list[Path]] = {}  # a file's folder (its text) -> the logs found for it
        for d in bare:
            where = folder_of(d.path) if isinstance(d, PrintedStub) else None  # a listed printed graph is a file
            logs = nearest.get(where) if where is not None else None
            if logs is None:
                folder = Path(where) if where is not None else Path(d.path).parent if Path(d.path).is_file() else Path(d.path)
                while True:
                    if folder not in found:
                        found[folder] = find_logs(folder)
                    if found[folder] or folder == top or top not in folder.parents:
                        break
                    folder = folder.parent
                logs = found[folder]
                if where is not None:
                    nearest[where] = logs
            for p in logs:
                by_log.setdefault(p, []).append(d)
    entries = []
    store = LsCache.open() if cache and by_log else None
    read: dict[tuple, dict[str, Any]] | None = {} if sharing() else None  # logs read, by log_key: a copied run's logs are read once
    try:
        for path, members in by_log.items():
            names = {n for d in members for n in name_and_stem(str(d.path))}
            try:
                run_log = _read_log(path, names, store, read)
            except GraphdbgError as e:
                if log is not None:
                    raise
                entries.append({"path": str(path), "error": str(e)})
                continue
            attach_log(run_log, members)
            entries.append(run_log.to_json())
    finally:
        if store is not None:
            store.close()
    return entries


def _read_log(path: Path, names: set[str], store: LsCache | None, read: dict[tuple, dict[str, Any]] | None = None) -> RunLog:
    """``read_log(path, names)``, from ``store`` where it kept this log, else from ``read`` where
    a log of the same ``log_key`` was read before (then kept in both)."""
    kept = store.get_log(path, names) if store is not None else None
    if kept is not None:
        try:
            return RunLog.from_cache(path, kept)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # not one this code made: read the log again
    key = log_key(path, names) if read is not None else None
    if read is not None and key is not None and key in read:
        run_log = RunLog.from_cache(path, read[key])
    else:
        run_log = read_log(path, names)
        if read is not None and key is not None:
            read[key] = run_log.to_cache()
    if store is not None:
        store.put_log(path, names, run_log.to_cache())
    return run_log


def load_with_log(path: str | Path, log: str | Path | None = None) -> Dump:
    """``load(path)``, with the failure the run's log gives it when it records none.

    The log is ``log`` or one found beside the file; which graph a failure belongs to is
    decided among the printed graphs in the file's folder, as ``graphdbg ls`` would.
    """
    # lazy: ls imports no torch (formats/listing.py)
    from graphdbg.formats.printed_graph import load_printed_graph
    from graphdbg.formats.run_log import find_logs, read_log

    dump = load(path)
    if dump.format == "dump" or (dump.manifest.get("failure") or {}).get("signature"):
        return dump
    folder = Path(dump.path).parent if Path(dump.path).is_file() else Path(dump.path)
    logs = [Path(log)] if log is not None else find_logs(folder)
    if not logs:
        return dump
    siblings = printed_graph_files(folder) if Path(dump.path).is_file() else []
    names = {n for p in [Path(dump.path), *siblings] for n in (p.name, p.stem)}
    attachable = []
    for p in logs:
        try:
            attachable.append(any(f.kind != "error" for f in read_log(p, names).failures))
        except GraphdbgError:
            if log is not None:
                raise
            attachable.append(False)
    if not any(attachable):
        return dump
    others: list[Dump] = []
    for p in siblings:
        if p.resolve() == Path(dump.path).resolve():
            continue
        try:
            others.append(load_printed_graph(p))
        except GraphdbgError:
            continue  # a sibling that doesn't parse is ls's problem, not this file's
    apply_logs([dump, *others], folder, log)
    return dump


def _python_files(root: Path) -> Iterator[Path]:
    """``root`` itself if it is a file, else the ``.py`` files under it in order, skipping dump
    folders (their graph.py belongs to the dump) and hidden ones (dumps being written)."""
    return map(Path, _walk(root))


def _walk(root: Path) -> Iterator[str]:
    """``_python_files``, each as ``str`` of its Path."""
    if root.is_file():
        yield str(root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if MANIFEST in filenames:
            dirnames[:] = []
            continue
        folder = str(Path(dirpath))  # as a Path's text: "." and "//" as pathlib writes them
        prefix = "" if folder == "." else folder if folder.endswith("/") else folder + "/"
        yield from (prefix + name for name in sorted(filenames) if name.endswith(".py"))


def _is_torch_repro(path: Path) -> bool:
    if path.suffix != ".py" or not may_be_torch_repro(path):
        return False
    # lazy: ls imports no torch (formats/listing.py)
    from graphdbg.formats.torch_repro import detect_format

    return detect_format(path) is not None


def _graphs_among(paths: list[str], known: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The printed graph files among walked ``paths``, and PyTorch's own runnable repros there
    (the minifier's ``repro.py``, Inductor's ``fx_graph_runnable.py`` from ``TORCH_COMPILE_DEBUG=1``):
    a file that starts as a printed graph is not read again as a repro (that look reads up to
    256 KiB), and those in ``known`` (the cache holds them as printed graphs, unchanged since)
    are not looked at at all."""
    graphs: list[str] = []
    repros: list[str] = []
    for p in paths:
        if p in known:
            graphs.append(p)
            continue
        path = Path(p)
        if looks_like_printed_graph(path):
            graphs.append(p)
        elif _is_torch_repro(path):
            repros.append(p)
    return graphs, repros


def _ranks_by_folder(paths: list[str]) -> dict[str, frozenset[int]]:
    """The ranks of the ``rank{R}_{G}.py`` files in each walked folder (a printed graph's world size)."""
    found: dict[str, set[int]] = {}
    for p in paths:
        m = RANK_FILE.match(os.path.basename(p))
        ranks = found.setdefault(folder_of(p), set())
        if m:
            ranks.add(int(m[1]))
    return {folder: frozenset(r) for folder, r in found.items()}


def printed_graph_files(root: Path) -> list[Path]:
    """Printed graph files under ``root`` (or ``root`` itself), skipping dump folders' graph.py."""

    return [p for p in _python_files(root) if looks_like_printed_graph(p)]
