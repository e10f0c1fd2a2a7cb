"""Manifests that passed the schema check, remembered by their bytes, so that a dump read again
(``replay`` after ``ls``, a second backend, ``bisect``, a replay right after capture wrote the
dump) is not checked again: the check imports pydantic and builds the schema's models, about
0.1 s of every command that reads a dump, a third of what ``replay`` adds to the run itself.

    >>> remembered(raw)                    # the manifest as the check returned it, or None
    >>> remember(raw, manifest)            # after the check passed

An entry is keyed by the sha256 of the manifest file's bytes and a stamp of the code that
checks them (graphdbg's version, the schema's and the reader's source files, pydantic's); its
value is the manifest the check returned. Nothing that failed the check is remembered, and a
file whose bytes differ by one bit is checked again. The cache is the user's own folder
(``$GRAPHDBG_CACHE_DIR``, else the platform's user cache folder: ``~/.cache/graphdbg`` on
Linux; ``ls`` keeps its own there too); one that can't be opened or written is no cache, and a
damaged entry is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from graphdbg._version import __version__
from graphdbg.store.cache_folder import cache_dir, files_stamp, open_table

MAX_REMEMBERED_BYTES = 4 << 20  # a larger manifest (node_info of a huge graph) is checked every time
MAX_ENTRIES = 20_000
_FILE = "checked.sqlite"
_SCHEMA = "create table if not exists checked_v1 (sha text primary key, stamp text, manifest text)"


@functools.lru_cache(maxsize=1)
def _stamp() -> str:
    """What a check's verdict depends on besides the bytes: the checking code, by file."""
    here = Path(__file__).resolve().parent
    files = [here / name for name in ("schema.py", "manifest.py", "sizes.py", "manifest_cache.py")]
    spec = importlib.util.find_spec("pydantic")  # found, not imported
    if spec is not None and spec.origin:
        files.append(Path(spec.origin).parent / "version.py")
    return files_stamp([__version__], files)


_DB: tuple[int, str, sqlite3.Connection] | None = None  # (pid, file, connection): one per process and cache folder
_LOCK = threading.Lock()  # capture may write dumps from several threads


def _open(timeout: float) -> sqlite3.Connection | None:
    """This process's connection to the cache (``ls`` of 100 dump folders reads 100 manifests:
    one connection, not one each); None where there is no cache to be had."""
    global _DB
    try:
        where = str(cache_dir() / _FILE)
        if _DB is not None and _DB[0] == os.getpid() and _DB[1] == where:
            _DB[2].execute(f"pragma busy_timeout={int(timeout * 1000)}")
            return _DB[2]
        db = open_table(_FILE, _SCHEMA, timeout)
        _DB = (os.getpid(), where, db) if db is not None else None
        return db
    except (OSError, sqlite3.Error):
        return None


def _key(raw: bytes | str) -> str | None:
    data = raw.encode() if isinstance(raw, str) else raw
    return hashlib.sha256(data).hexdigest() if len(data) <= MAX_REMEMBERED_BYTES else None


def remembered(raw: bytes | str) -> dict[str, Any] | None:
    """The manifest these exact bytes gave when they passed the check, or None."""
    if os.environ.get("GRAPHDBG_NO_CHECK_CACHE"):
        return None
    sha = _key(raw)
    if sha is None:
        return None
    with _LOCK:
        db = _open(timeout=1)
        if db is None:
            return None
        try:
            row = db.execute("select manifest from checked_v1 where sha=? and stamp=?", (sha, _stamp())).fetchone()
            value = json.loads(row[0]) if row is not None else None
            return value if isinstance(value, dict) else None
        except (sqlite3.Error, ValueError, TypeError):
            return None  # a damaged cache is no cache


def remember(raw: bytes | str, manifest: dict[str, Any], *, timeout: float = 1) -> None:
    """Keep ``manifest`` as what ``raw`` gave after passing the check. Never raises; a locked or
    read-only cache is skipped (capture passes a short ``timeout``: a user's job never waits on it)."""
    if os.environ.get("GRAPHDBG_NO_CHECK_CACHE"):
        return
    sha = _key(raw)
    if sha is None:
        return
    try:
        text = json.dumps(manifest)
    except (TypeError, ValueError):
        return
    with _LOCK:
        db = _open(timeout)
        if db is None:
            return
        try:
            with db:
                db.execute("insert or replace into checked_v1 values (?, ?, ?)", (sha, _stamp(), text))
                db.execute("delete from checked_v1 where rowid <= (select max(rowid) from checked_v1) - ?", (MAX_ENTRIES,))
        except sqlite3.Error:
            pass
