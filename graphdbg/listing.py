"""Find dumps under a folder and group the ones that are the same failure of the same graph.

    >>> listing = list_dumps("dumps/")
    >>> [(g["ranks"], g["kind"]) for g in listing.groups]
    [([0, 1, 2, 3, 4, 5, 6, 7], 'compile_error')]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.manifest import find_dumps
from graphdbg.replay.dump import Dump, load


@dataclass
class Listing:
    root: Path
    dumps: list[Dump] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)

    @property
    def groups(self) -> list[dict[str, Any]]:
        """One group per (graph hash, failure kind, signature), with the ranks and paths in it."""
        groups: dict[tuple, dict[str, Any]] = {}
        for d in self.dumps:
            s = d.summary()
            key = (s["graph_hash"], s["kind"], s["signature"])
            g = groups.get(key)
            if g is None:
                g = groups[key] = {**{k: s[k] for k in ("id", "nodes", "kind", "backend", "error_type", "message", "signature", "graph_hash")},
                                   "ranks": [], "paths": []}
            g["ranks"].append(s["rank"])
            g["paths"].append(s["path"])
        return list(groups.values())

    def to_json(self) -> dict[str, Any]:
        import graphdbg

        return {
            "graphdbg": graphdbg.__version__,
            "root": str(self.root),
            "dumps": [d.summary() for d in self.dumps],
            "groups": self.groups,
            "problems": self.problems,
        }


def list_dumps(path: str | Path) -> Listing:
    root = Path(path)
    if not root.exists():
        raise GraphdbgError(f"{root}: no such file or folder")
    listing = Listing(root)
    folders = find_dumps(root)
    if not folders:
        raise DumpError(f"{root}: no graphdbg dumps here")
    for folder in folders:
        try:
            listing.dumps.append(load(folder))
        except DumpError as e:
            listing.problems.append({"path": str(folder), "error": str(e)})
    listing.dumps.sort(key=lambda d: (d.id, d.rank))
    return listing
