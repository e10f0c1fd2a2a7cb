"""graphdbg's cache folder, and the stamp that tells a cached result made by other code.

The folder is the user's own (``$GRAPHDBG_CACHE_DIR``, else the platform's user cache folder):
the schema check's manifests (``store/manifest_cache``), ``ls``'s per-file cache
(``listing/cache``) and the compiler caches of a dump's isolated replays (``execution/sandbox``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from graphdbg.errors import DumpError
from graphdbg.store.safe_files import open_stream

if TYPE_CHECKING:
    import sqlite3

CACHE_ENV = "GRAPHDBG_CACHE_DIR"


def cache_dir() -> Path:
    """``$GRAPHDBG_CACHE_DIR``, else the platform's user cache folder (platformdirs: on Linux
    ``$XDG_CACHE_HOME/graphdbg``, else ``~/.cache/graphdbg``; on macOS ``~/Library/Caches/graphdbg``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    # imported here: the self-check's launcher (execution/sandboxed_file) imports graphdbg in the
    # user's interpreter and must start there with the standard library alone
    import platformdirs

    return Path(platformdirs.user_cache_dir("graphdbg", appauthor=False))


def files_stamp(parts: Iterable[str], files: Iterable[Path]) -> str:
    """What a cached result depends on besides its input, as 16 hex digits: ``parts`` (versions,
    options) and each of ``files`` (the code that made it) by name, size and mtime."""
    lines = list(parts)
    for f in files:
        try:
            st = f.stat()
            lines.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            lines.append(f"{f.name}:?")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


_MAX_FILES = 100_000  # a dump folder's files hashed for its compile cache's key (more: no cache)
_MAX_BYTES = 16 << 30  # and their bytes (more, a sparse file of a terabyte say: no cache, rather than minutes of hashing)
_digests: dict[tuple[str, int, int, int, int], str] = {}  # this process's: (path, inode, size, mtime, ctime) -> sha256


def content_key(root: Path, trust: str = "") -> str | None:
    """24 hex digits: ``root`` (a dump folder or file) by the content of every file under it
    (sha256 of each, by its path inside ``root``) and ``trust``, what the replay trusted (its
    code, settings, kernels: ``""`` for nothing). A file rewritten with the same size and mtime
    gives another key, and so does the same dump replayed with more trust. None where a file
    can't be read, or the files are too many or too big to hash (no cache then: the replay compiles
    in its own folder). Links are not followed: a link's key is where it points."""
    root = Path(root).resolve()
    h = hashlib.sha256(f"{root}\0{trust}\0".encode("utf-8", "surrogateescape"))
    try:
        files = [root] if not root.is_dir() else sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())
        if len(files) > _MAX_FILES or sum(f.lstat().st_size for f in files if not f.is_symlink()) > _MAX_BYTES:
            return None
        for f in files:
            rel = f.relative_to(root).as_posix() if f != root else f.name
            digest = os.readlink(f) if f.is_symlink() else _digest(f)
            h.update(f"{rel}\0{digest}\n".encode("utf-8", "surrogateescape"))
    except (OSError, ValueError, DumpError):
        return None
    return h.hexdigest()[:24]


def _digest(f: Path) -> str:
    """sha256 of ``f``'s bytes; remembered in this process by its inode, size, mtime and ctime
    (ctime moves on every write, whatever a writer sets the mtime to)."""
    st = f.stat()
    memo = (str(f), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if memo not in _digests:
        h = hashlib.sha256()
        with open_stream(f, follow=False) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _digests[memo] = h.hexdigest()
    return _digests[memo]


def open_table(file: str, schema: str, timeout: float) -> sqlite3.Connection | None:
    """The sqlite ``file`` of the cache folder with ``schema``'s table made, or None where there is
    none to be had (a read-only home, a locked or damaged file: then nothing is cached). Writes
    are not synced (a cache: what a power cut loses is made again)."""
    import sqlite3  # here: the self-check's launcher imports this module, and needs no database

    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(folder / file), timeout=timeout, check_same_thread=False)
        db.execute("pragma synchronous = off")
        db.execute(schema)
        return db
    except (OSError, sqlite3.Error):
        return None
