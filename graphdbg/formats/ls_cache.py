"""What ``graphdbg ls`` learnt of a file, kept between runs: one sqlite3 table keyed by the
file's path, size and mtime, so a second ``ls`` of the same folder reads no graph.

    >>> cache = LsCache.open()            # $GRAPHDBG_CACHE_DIR/ls.sqlite, else ~/.cache/graphdbg/
    >>> cache.get(path)                   # (manifest, None), (None, error) or None
    >>> cache.put(path, manifest, None)

An entry is only good for the graphdbg code that made it: the key also holds a stamp of the
graphdbg and torch versions, the source files that read graphs, and the registered op
namespaces (``--ops``). A cache that can't be opened or written (read-only home, a locked
file) is no cache: ``ls`` reads the files, never fails for it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from graphdbg._version import __version__
from graphdbg.errors import GraphdbgError
from graphdbg.store.checked import CACHE_ENV, cache_dir, files_stamp  # noqa: F401 - CACHE_ENV: the name tests and docs use here

RACY_NS = 2_000_000_000  # files modified this recently are not cached (git's "racy" rule)
# a kept listing: its text in parts of about a MiB (ls_report writes it as it is made), and where
# in that text its rows are (the table reads the rest)
_LISTINGS = "create table if not exists listings_v3 (slot text primary key, signature text, problems text, parts integer, rows_from integer, rows_to integer)"
_LISTING_PARTS = "create table if not exists listing_parts_v2 (slot text, n integer, text text, primary key (slot, n))"
# sqlite's page cache per connection (its default is 2 MiB): ls writes and reads its rows in
# order, and the system's file cache serves the rest (64x the corpus: 5 MiB less at the peak,
# the same CPU)
PAGE_CACHE = "pragma cache_size=-256"

_SCHEMA = "create table if not exists files_v1 (path text, size integer, mtime integer, stamp text, manifest text, error text, primary key (path))"


def code_stamp(graphs: bool = True) -> str:
    """What a cached manifest depends on besides the file: the code that read it. ``graphs``:
    the manifests of printed graphs, which also depend on the registered op namespaces."""
    return _code_stamp(graphs, os.environ.get("GRAPHDBG_OPS", ""))


@functools.lru_cache(maxsize=8)  # once per process: the code doesn't change under a running listing
def _code_stamp(graphs: bool, ops: str) -> str:
    package = Path(__file__).resolve().parent.parent
    parts = [__version__, "graphs" if graphs else "dumps", torch_version()]
    if graphs:  # the user's op modules (--ops), as register_ops exports them for child processes
        parts += sorted(m.strip() for m in ops.split(",") if m.strip())
    files = [f for sub in ("graph", "formats", "rebuild", "store")  # names_table.json too
             for f in sorted([*(package / sub).glob("*.py"), *(package / sub).glob("*.json")])]
    return files_stamp(parts, files)


def torch_version() -> str:
    """The installed torch's version without importing torch (2 s) or ``importlib.metadata``
    (0.04 s, a third of a cached ``ls``): its ``torch/version.py``, read as text."""
    try:
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            text = (Path(spec.origin).parent / "version.py").read_text(errors="replace")[:4096]
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            if m:
                return m[1]
    except (OSError, ImportError, ValueError):
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version  # lazy: only where version.py didn't say

        return version("torch")
    except PackageNotFoundError:  # pragma: no cover - torch is a dependency
        return "?"


def folder_of(path: Path | str) -> str:
    """``str(Path(path).parent)``, for a Path or a path's text as ``str(Path)`` writes it (a
    listing's thousands of files are texts), without making a Path."""
    return str(path.parent) if isinstance(path, Path) else os.path.dirname(path) or "."


def scratch_db(table: str) -> sqlite3.Connection:
    """A private temporary sqlite database with one table (``create table ...``): on disk past
    its page cache, gone when closed (what a listing of thousands sets aside while it is made)."""
    db = sqlite3.connect("")
    db.execute(PAGE_CACHE)
    db.execute(table)
    return db


@functools.lru_cache(maxsize=256)
def _resolved(folder: str) -> str:
    # a folder's real path, once per folder a listing puts files of (not a realpath per file);
    # cleared by each open, so a link changed since is followed anew
    return str(Path(folder).resolve())


class LsCache:
    def __init__(self, db: sqlite3.Connection | None, stamp: str):
        self.db, self.stamp = db, stamp
        self.pending: list[tuple] = []

    @classmethod
    def open(cls, folder: Path | None = None, graphs: bool = True) -> LsCache:
        stamp = code_stamp(graphs)
        _resolved.cache_clear()
        try:
            folder = folder or cache_dir()
            folder.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(folder / "ls.sqlite"), timeout=5)
            db.execute(PAGE_CACHE)
            db.execute(_SCHEMA)
            db.execute(_LISTINGS)
            db.execute(_LISTING_PARTS)
            return cls(db, stamp)
        except (OSError, sqlite3.Error):
            return cls(None, stamp)

    @staticmethod
    def key(path: Path) -> tuple[str, int, int] | None:
        """(path, size, mtime); for a folder (a dump), the sum of its files' sizes and the newest mtime."""
        try:
            if path.is_dir():
                stats = [e.stat() for e in os.scandir(path) if e.is_file(follow_symlinks=False)]
                return str(path.resolve()), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)
            st = os.stat(path)
            where = os.path.join(_resolved(str(path.parent)), path.name)  # as find_many names it
        except OSError:
            return None
        return where, st.st_size, st.st_mtime_ns

    def find_many(self, files: list[Path] | list[str]) -> dict[Any, tuple[str, int, int]]:
        """The files (Paths, or their texts as ``str(Path)`` writes them) the cache holds as they
        are now, each with its key for ``fetch``: one query for every entry under their folders,
        then one ``stat`` per file. Nothing is loaded (a listing of thousands loads each manifest
        when it comes to it)."""
        if self.db is None or not files:
            return {}
        folders: dict[str, str] = {}
        named: dict[str, Any] = {}
        try:
            for f in files:
                parent = folder_of(f)
                if parent not in folders:
                    folders[parent] = _resolved(parent)
                named[os.path.join(folders[parent], os.path.basename(f))] = f
            top = os.path.commonpath(list(folders.values()))
            rows = self.db.execute("select path, size, mtime from files_v1 where stamp=? and path >= ? and path < ?",
                                   (self.stamp, top, top + "\U0010ffff"))  # a cursor: rows are read as used
        except (OSError, ValueError, sqlite3.Error):
            return {}
        out = {}
        try:
            for where, size, mtime in rows:
                f = named.get(where)
                if f is None:
                    continue
                try:
                    st = os.stat(f)
                except OSError:
                    continue
                if st.st_size == size and st.st_mtime_ns == mtime:
                    out[f] = where, size, mtime
        except sqlite3.Error:  # a damaged cache: what was read stands, the rest is read again
            pass
        return out

    def fetch(self, key: tuple[str, int, int]) -> tuple[dict[str, Any] | None, str | None] | None:
        """What ``find_many`` found under ``key``: ``(manifest, error)``, or None if it is gone."""
        return self._get(key)

    def get(self, path: Path) -> tuple[dict[str, Any] | None, str | None] | None:
        return self._get(self.key(path))

    def put(self, path: Path, manifest: dict[str, Any] | None, error: str | None) -> None:
        self._put(self.key(path), manifest, error)

    def get_log(self, path: Path, names: Iterable[str]) -> dict[str, Any] | None:
        """A run log's parse (``RunLog.to_cache``) as kept for these graph names, if the log is
        as it was then."""
        hit = self._get(self._log_key(path, names))
        return hit[0] if hit is not None else None

    def put_log(self, path: Path, names: Iterable[str], data: dict[str, Any]) -> None:
        self._put(self._log_key(path, names), data, None)

    @staticmethod
    def _log_key(path: Path, names: Iterable[str]) -> tuple[str, int, int] | None:
        # a log's parse depends on the graph names it was read for (failures remember those it names)
        key = LsCache.key(path)
        if key is None:
            return None
        digest = hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()[:16]
        return f"log:{key[0]}:{digest}", key[1], key[2]  # never a file's key: those are absolute paths

    def _get(self, key: tuple[str, int, int] | None) -> tuple[dict[str, Any] | None, str | None] | None:
        if self.db is None or key is None:
            return None
        try:
            row = self.db.execute("select manifest, error from files_v1 where path=? and size=? and mtime=? and stamp=?",
                                  (*key, self.stamp)).fetchone()
            if row is None:
                return None
            return (json.loads(row[0]) if row[0] is not None else None), row[1]
        except (sqlite3.Error, ValueError):  # a damaged cache is no cache
            return None

    def _put(self, key: tuple[str, int, int] | None, manifest: dict[str, Any] | None, error: str | None) -> None:
        if self.db is None or key is None:
            return
        if time.time_ns() - key[2] < RACY_NS:
            return  # written just now: a rewrite of the same size within the clock's tick would look the same
        try:
            text = json.dumps(manifest) if manifest is not None else None
        except (TypeError, ValueError):
            return  # a manifest JSON can't hold is read again next time
        self.pending.append((*key, self.stamp, text, error))
        if len(self.pending) >= 256:
            self.flush()

    def get_listing(self, slot: str, signature: str) -> KeptListing | None:
        """A whole listing (``ls_report``), if it was made of the same files as now: its text is
        read a part at a time (``KeptListing.parts``, while this cache is open)."""
        if self.db is None:
            return None
        try:
            row = self.db.execute("select problems, parts, rows_from, rows_to from listings_v3 where slot=? and signature=?",
                                  (slot, signature)).fetchone()
            if row is None:
                return None
            problems = json.loads(row[0])
            count, odd = self.db.execute("select count(*), total(typeof(text) != 'text') from listing_parts_v2 where slot=?", (slot,)).fetchone()
        except (sqlite3.Error, ValueError, TypeError):
            return None
        if not isinstance(problems, list) or count != row[1] or odd or not (isinstance(row[2], int) and isinstance(row[3], int)):
            return None
        return KeptListing(self, slot, problems, (row[2], row[3]))

    def put_listing(self, slot: str, signature: str, parts: list[str], problems: list[dict[str, Any]], rows: tuple[int, int]) -> None:
        """Keep a listing's text (``parts``, joined) for its folder and options (``slot``): one
        per slot, the last made; ``rows``: where its rows are in that text."""
        staged = self.stage_listing(slot)
        for part in parts:
            staged.add(part)
        staged.keep(signature, problems, rows)

    def stage_listing(self, slot: str) -> StagedListing:
        """A listing's text kept part by part as it is written (``ls_report``); it replaces the
        slot's only when ``keep`` is called."""
        return StagedListing(self, slot)

    def flush(self) -> None:
        if self.db is None or not self.pending:
            return
        try:
            with self.db:
                self.db.executemany("insert or replace into files_v1 values (?, ?, ?, ?, ?, ?)", self.pending)
        except sqlite3.Error:
            pass
        self.pending.clear()

    def close(self) -> None:
        self.flush()
        if self.db is not None:
            self.db.close()
            self.db = None


@dataclass
class KeptListing:
    """A listing ``LsCache.get_listing`` found: its ``problems``, its text (read a part at a time)
    and where its rows are in that text (``rows``: ``[from, to)``)."""
    cache: LsCache
    slot: str
    problems: list[dict[str, Any]]
    rows: tuple[int, int]

    def parts(self) -> Iterator[str]:
        """The text's parts, in order (its size is not held: 10,000 rows are ~10 MB). A part that
        can't be read now (the cache damaged since it was counted) is a GraphdbgError."""
        yield from self._parts(None)

    def tail(self) -> dict[str, Any]:
        """The listing but its rows (``dumps``): what the table shows, read from the parts around
        the rows (their text replaced by ``[]``)."""
        start, end = self.rows
        pieces, at = [], 0
        for n, size in list(self._sizes()):
            if at < start or at + size > end:  # some of this part is not rows
                text = next(self._parts(n), None)
                if text is None:  # gone since it was counted
                    raise GraphdbgError(f"the listing kept in {cache_dir()} could not be read; run with --no-cache")
                lo, hi = max(0, start - at), max(0, end - at)  # the rows in this part: text[lo:hi]
                pieces.append(text[:lo] + ("[]" if at <= start < at + size else "") + text[hi:])
            at += size
        try:
            data = json.loads("".join(pieces))
        except ValueError:
            raise GraphdbgError(f"the listing kept in {cache_dir()} could not be read; run with --no-cache") from None
        if not isinstance(data, dict):
            raise GraphdbgError(f"the listing kept in {cache_dir()} could not be read; run with --no-cache")
        data.pop("dumps", None)
        return data

    def _sizes(self) -> Iterator[tuple[int, int]]:
        try:
            yield from self.cache.db.execute("select n, length(text) from listing_parts_v2 where slot=? order by n", (self.slot,))  # type: ignore[union-attr]
        except (sqlite3.Error, AttributeError) as e:
            raise GraphdbgError(f"the listing kept in {cache_dir()} could not be read ({e}); run with --no-cache") from None

    def _parts(self, n: int | None) -> Iterator[str]:
        query, args = ("select text from listing_parts_v2 where slot=? order by n", (self.slot,)) if n is None else \
            ("select text from listing_parts_v2 where slot=? and n=?", (self.slot, n))
        try:
            for (text,) in self.cache.db.execute(query, args):  # type: ignore[union-attr]
                yield text
        except (sqlite3.Error, AttributeError) as e:
            raise GraphdbgError(f"the listing kept in {cache_dir()} could not be read ({e}); run with --no-cache") from None


class StagedListing:
    """Parts of a listing's text, stored as they come under a name of their own (no
    transaction held while the listing is made), taken as the slot's by ``keep``."""

    def __init__(self, cache: LsCache, slot: str):
        self.cache, self.slot, self.n = cache, slot, 0
        self.name = f"{slot}\0{os.getpid()}\0{time.time_ns()}"
        self.failed = cache.db is None

    def add(self, text: str) -> None:
        if self.failed or self.cache.db is None:
            return
        try:
            with self.cache.db:
                self.cache.db.execute("insert into listing_parts_v2 values (?, ?, ?)", (self.name, self.n, text))
            self.n += 1
        except sqlite3.Error:
            self.failed = True

    def keep(self, signature: str, problems: list[dict[str, Any]], rows: tuple[int, int]) -> None:
        """Take the parts as the slot's listing, with its ``problems`` and where its rows are in
        its text (``[from, to)``: the table reads the rest)."""
        db = self.cache.db
        if db is None:
            return
        try:
            with db:
                if not self.failed:
                    db.execute("delete from listing_parts_v2 where slot=?", (self.slot,))
                    db.execute("update listing_parts_v2 set slot=? where slot=?", (self.slot, self.name))
                    db.execute("insert or replace into listings_v3 values (?, ?, ?, ?, ?, ?)",
                               (self.slot, signature, json.dumps(problems), self.n, *rows))
                # parts left by a listing of this slot that never finished (a killed ls), and these if not taken
                db.execute("delete from listing_parts_v2 where slot >= ? and slot < ?", (self.slot + "\0", self.slot + "\1"))
        except (sqlite3.Error, TypeError, ValueError):
            pass

    def drop(self) -> None:
        if self.cache.db is None:
            return
        try:
            with self.cache.db:
                self.cache.db.execute("delete from listing_parts_v2 where slot=?", (self.name,))
        except sqlite3.Error:
            pass
