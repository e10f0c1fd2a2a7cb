"""The one walk of the folder ``ls`` lists: its dump folders, its ``.py`` files and the rank
files' ranks in each folder (a printed graph's world size), in an order that depends on the
names only. Hidden folders are skipped (dumps being written), and so are the ``.py`` files of a
dump folder (its graph.py belongs to the dump). A name that is not UTF-8 can't be written in
the listing's JSON: it is a problem of its own, shown escaped, and what is under it is not read.
A ``.py`` file that is a symbolic link is a problem too, never read; linked folders are not entered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from graphdbg.formats.printed_file import RANK_FILE
from graphdbg.store.manifest import MANIFEST


@dataclass
class Walk:
    dumps: list[Path] = field(default_factory=list)  # sorted as Paths sort
    files: list[str] = field(default_factory=list)  # texts as str(Path) writes them: a Path is ~400 bytes
    ranks: dict[str, frozenset[int]] | None = None  # folder text -> the ranks of its rank files
    problems: list[dict[str, str]] = field(default_factory=list)


def shown(path: str) -> str:
    """``path`` as it can be written in UTF-8: bytes that are not UTF-8 as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _refused(walk: Walk, path: str, file: bool = False) -> bool:
    """A name that is not UTF-8, or a ``file`` that is a symbolic link (it could lead out of the
    folder, and ``report`` would put what it leads to in its page): a problem, never read."""
    if shown(path) != path:
        error = f"{shown(path)}: the name is not UTF-8 text"
    elif file and os.path.islink(path):
        error = f"{path}: refusing a symbolic link inside a folder of dumps (it could lead anywhere)"
    else:
        return False
    walk.problems.append({"path": shown(path), "error": error})
    return True


def walk(root: Path) -> Walk:
    """The walk of ``root`` (a file: itself)."""
    if not root.is_dir():
        return Walk(files=[str(root)])
    if (root / MANIFEST).is_file():
        return Walk(dumps=[root], ranks={})
    out = Walk(ranks={})
    ranks: dict[str, set[int]] = {}
    in_dump: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not _refused(out, os.path.join(dirpath, d)))
        folder = str(Path(dirpath))  # as a Path's text: "." and "//" as pathlib writes them
        if MANIFEST in filenames:
            out.dumps.append(Path(folder))
        if MANIFEST in filenames or os.path.dirname(folder) in in_dump:
            in_dump.add(folder)  # a dump's own subfolders hold no printed graphs of the listing
            continue
        prefix = "" if folder == "." else folder if folder.endswith("/") else folder + "/"
        here = ranks.setdefault(folder, set())
        for name in sorted(filenames):
            if name.endswith(".py") and not _refused(out, prefix + name, file=True):
                out.files.append(prefix + name)
                if m := RANK_FILE.match(name):
                    here.add(int(m[1]))
    out.dumps.sort()
    out.ranks = {folder: frozenset(r) for folder, r in ranks.items()}
    return out
