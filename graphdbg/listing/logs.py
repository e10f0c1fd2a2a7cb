"""The run's logs beside printed graphs: the failures they record, attached to the graphs that
record none (``formats/run_log.py`` reads a log and decides which graph a failure is of)."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any

from graphdbg.dump import Dump
from graphdbg.errors import GraphdbgError
from graphdbg.formats.run_log import RunLog, attach_log, find_logs, name_and_stem, read_log
from graphdbg.listing.cache import FileCache
from graphdbg.listing.walk import shown


def apply_logs(dumps: list[Dump], root: Path, log: str | Path | None = None, *, cache: FileCache | None = None) -> list[dict[str, Any]]:
    """Attach the failures of run logs to the dumps that record none; one entry per log read.

    With ``log``, that log serves every dump. Otherwise each dump's folder, then its parents up
    to ``root``, are searched for ``log.txt`` / ``*.log``; the nearest folder with one wins.
    ``cache``: a log read before, unchanged, comes parsed from it.
    """
    # captured dumps speak for themselves, even those of mode="always" that record no failure
    bare = [d for d in dumps if d.format != "dump" and not d.signature]
    if not bare and log is None:
        return []
    by_log: dict[Path, list[Dump]] = {}
    if log is not None:
        by_log[Path(log)] = bare
    else:
        top = root if root.is_dir() else root.parent

        @functools.lru_cache(maxsize=None)  # each folder searched once
        def nearest(folder: Path) -> list[Path]:
            logs = find_logs(folder)
            return logs if logs or folder == top or top not in folder.parents else nearest(folder.parent)

        for d in bare:
            where = str(d.path)
            for p in nearest(Path((os.path.dirname(where) or ".") if os.path.isfile(where) else where)):
                by_log.setdefault(p, []).append(d)
    entries = []
    cache = cache if cache is not None else FileCache(None)
    for path, members in by_log.items():
        if shown(str(path)) != str(path):  # its name can't be written in the listing's JSON
            entries.append({"path": shown(str(path)), "error": f"{shown(str(path))}: the name is not UTF-8 text"})
            continue
        names = {n for d in members for n in name_and_stem(str(d.path))}
        try:
            run_log = _read_log(path, names, cache)
        except GraphdbgError as e:
            if log is not None:
                raise
            entries.append({"path": str(path), "error": str(e)})
            continue
        attach_log(run_log, members)
        entries.append(run_log.to_json())
    return entries


def _read_log(path: Path, names: set[str], cache: FileCache) -> RunLog:
    """``read_log(path, names)``, from ``cache`` where it kept this log (then kept there)."""
    key = FileCache.log_key(path, names)
    kept = cache.get(key)
    if kept is not None and kept[0] is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):  # else not one this code made
            return RunLog.from_cache(path, kept[0])
    run_log = read_log(path, names)
    cache.put(key, run_log.to_cache(), None)
    return run_log
