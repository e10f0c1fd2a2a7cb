"""What ``ls`` learnt of a file, kept between runs: one sqlite table keyed by the file's path,
size and modification time, and the code's stamp, so that a second ``ls`` of the same folder
reads no graph (``ls.sqlite`` in the cache folder: ``store/cache_folder.py``).

    >>> with FileCache.open() as cache:
    ...     cache.put(cache.key(path), manifest, None)
    ...     cache.get(cache.key(path))        # (manifest, None), (None, error) or None

The stamp is the graphdbg and torch versions, the sources that read files and the registered
op namespaces (``--ops``). A cache that can't be opened or written (a read-only home, a locked
file) is no cache: ``ls`` reads the files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any, Iterable

from graphdbg._version import __version__
from graphdbg.formats.names_table import torch_version
from graphdbg.store.cache_folder import CACHE_ENV, files_stamp, open_table  # noqa: F401 - CACHE_ENV: the name tests and docs use here

RACY_NS = 2_000_000_000  # files modified this recently are not kept (git's "racy" rule)
_SCHEMA = "create table if not exists files_v1 (path text, size integer, mtime integer, stamp text, manifest text, error text, primary key (path))"
Key = tuple[str, int, int]  # (where, size, mtime)


@functools.lru_cache(maxsize=8)  # once per process: the code doesn't change under a running listing
def code_stamp(ops: str = "") -> str:
    """What a kept manifest depends on besides the file: the code that read it, and the user's
    op modules (``GRAPHDBG_OPS``, as ``--ops`` exports them for child processes)."""
    package = Path(__file__).resolve().parent.parent
    parts = [__version__, torch_version(), *sorted(m.strip() for m in ops.split(",") if m.strip())]
    files = [f for sub in ("graph", "formats", "rebuild", "store", "listing")  # the names tables too
             for f in sorted([*(package / sub).glob("*.py"), *(package / sub).glob("*.json")])]
    return files_stamp(parts, files)


class FileCache:
    def __init__(self, db: sqlite3.Connection | None):
        self.db, self.stamp = db, code_stamp(os.environ.get("GRAPHDBG_OPS", "")) if db is not None else ""
        self.pending: list[tuple] = []

    @classmethod
    def open(cls, enabled: bool = True) -> FileCache:
        """The cache (``enabled=False``: one that holds nothing)."""
        _real_folder.cache_clear()  # a link changed since the last listing is followed anew
        return cls(open_table("ls.sqlite", _SCHEMA, timeout=5) if enabled else None)

    def __enter__(self) -> FileCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def key(path: Path | str) -> Key | None:
        """A file's key; a folder's (a dump): the sum of its files' sizes and the newest mtime."""
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode):
                stats = [e.stat() for e in os.scandir(path) if e.is_file(follow_symlinks=False)]
                return os.path.realpath(path), sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)
            return os.path.join(_real_folder(os.path.dirname(path) or "."), os.path.basename(path)), st.st_size, st.st_mtime_ns
        except OSError:
            return None

    @staticmethod
    def log_key(path: Path, names: Iterable[str]) -> Key | None:
        # a log's parse depends on the graph names it was read for (failures remember those it names)
        key = FileCache.key(path)
        if key is None:
            return None
        digest = hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()[:16]
        return f"log:{key[0]}:{digest}", key[1], key[2]  # never a file's key: those are absolute paths

    def get(self, key: Key | None) -> tuple[dict[str, Any] | None, str | None] | None:
        """``(manifest, error)`` kept under ``key``, or None."""
        if self.db is None or key is None:
            return None
        try:
            row = self.db.execute("select manifest, error from files_v1 where path=? and size=? and mtime=? and stamp=?",
                                  (*key, self.stamp)).fetchone()
            return None if row is None else ((json.loads(row[0]) if row[0] is not None else None), row[1])
        except (sqlite3.Error, ValueError):  # a damaged cache is no cache
            return None

    def put(self, key: Key | None, manifest: dict[str, Any] | None, error: str | None) -> None:
        if self.db is None or key is None or time.time_ns() - key[2] < RACY_NS:
            return  # written just now: a rewrite of the same size within the clock's tick would look the same
        try:
            text = json.dumps(manifest) if manifest is not None else None
        except (TypeError, ValueError):
            return  # a manifest JSON can't hold is read again next time
        self.pending.append((*key, self.stamp, text, error))
        if len(self.pending) >= 256:
            self.flush()

    def flush(self) -> None:
        if self.db is not None and self.pending:
            try:
                with self.db:
                    self.db.executemany("insert or replace into files_v1 values (?, ?, ?, ?, ?, ?)", self.pending)
            except sqlite3.Error:
                pass
        self.pending = []

    def close(self) -> None:
        self.flush()
        if self.db is not None:
            self.db.close()
            self.db = None


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    # a folder's real path, once per folder of a listing (not a realpath per file)
    return os.path.realpath(folder)
