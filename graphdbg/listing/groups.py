"""A listing's dumps grouped: dump folders by (graph hash, failure kind, signature), printed
graph files (SGLang's ``rank{R}_{G}.py``, Dynamo's ``graph_module_*.py``) by model and by their
graph with rank-specific literals masked (device index, vocab-shard offsets), so eight ranks
printing the same layer are one row with their ranks."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphdbg._version import __version__
from graphdbg.display import Displayed
from graphdbg.dump import LOG_KEYS, Dump, is_failure

_SUMMARY_KEYS = ("id", "nodes", "kind", "backend", "error_type", "message", "signature", "graph_hash", "frame", "compile_id")


@dataclass
class Listing(Displayed):
    root: Path
    dumps: list[Dump] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)  # each log read: RunLog.to_json(), or path + error

    @property
    def groups(self) -> list[dict[str, Any]]:
        """One group per (graph hash, failure kind, signature), with the ranks and paths in it,
        failures first (else in the listing's order).

        Printed graph files group per (model, graph with rank literals masked); their groups
        also carry ``model``, ``graphs`` (graph numbers from the headers), ``files``,
        ``constructs`` (what needs stand-ins) and ``rank_literals`` (the literals that differ
        between the members, one list of values per literal, in member order).
        """
        return make_groups(self.dumps, [d.summary() for d in self.dumps])

    def select(self, failed: bool = False, kind: str | None = None) -> Listing:
        """The same listing with only failed dumps (``failed``), or dumps of one failure ``kind``."""
        keep = [d for d in self.dumps if (not failed or is_failure(d.failure_kind)) and (kind is None or d.failure_kind == kind)]
        return Listing(self.root, keep, self.problems, self.logs)

    def summary(self, groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``files``, ``groups``, ``failed`` (groups whose dumps record a failure), ``by_kind``
        (groups per failure kind) and ``unreadable`` (files that could not be read)."""
        groups = self.groups if groups is None else groups
        return {"files": len(self.dumps), "groups": len(groups), "failed": sum(is_failure(g["kind"]) for g in groups),
                "by_kind": dict(Counter(g["kind"] for g in groups)), "unreadable": len(self.problems)}

    def to_json(self) -> dict[str, Any]:
        rows = [d.summary() for d in self.dumps]
        groups = make_groups(self.dumps, rows)
        return {"graphdbg": __version__, "root": str(self.root), "dumps": rows, "groups": groups,
                "summary": self.summary(groups), "problems": self.problems, **({"logs": self.logs} if self.logs else {})}


def make_groups(dumps: list[Dump], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups of ``dumps`` (``rows``: their ``summary()``)."""
    groups: dict[tuple, dict[str, Any]] = {}
    members: dict[tuple, list[Dump]] = {}
    first: dict[tuple, dict[str, Any]] = {}  # each group's first row
    for d, s in zip(dumps, rows):
        foreign = s.get("format") == "printed_graph"
        key = ("printed_graph", s["model"], s["group_hash"], s["signature"]) if foreign else (s["graph_hash"], s["kind"], s["signature"])
        if (g := groups.get(key)) is None:
            g = groups[key] = {**{k: s.get(k) for k in _SUMMARY_KEYS}, "ranks": [], "paths": [], "modules": [], "frames": []}
            if foreign:
                g.update({"format": "printed_graph", "model": s["model"], "graphs": [], "files": [],
                          "constructs": s["constructs"], "rank_literals": []})
            if "log" in s:  # another tool's file: its failure may come from the run's log
                g.update({k: s[k] for k in LOG_KEYS})
            members[key], first[key] = [], s
        members[key].append(d)
        g["ranks"].append(s["rank"])
        g["paths"].append(s["path"])
        g["modules"].append(s.get("module"))  # identical per-block graphs: which blocks
        g["frames"].append(" ".join(x for x in (s.get("frame"), f"[{s['compile_id']}]" if s.get("compile_id") else None) if x) or None)
        if foreign:
            g["files"].append(os.path.basename(s["path"]))
            if s["graph"] is not None and s["graph"] not in g["graphs"]:
                g["graphs"].append(s["graph"])
    odd = _odd_ranks([d for d in dumps if d.format == "dump"])  # captured dumps, not printed graphs
    for key, g in groups.items():
        if g.get("format") == "printed_graph":
            g["graphs"].sort()
            g["rank_literals"] = _differing([d.manifest.printed.rank_literals for d in members[key]])
        s = first[key]  # a piece of a nested compile names the dump of its graph, and back
        if s.get("parent"):
            g["parent"], g["piece"] = s["parent"], s["piece"]
        if s.get("children"):
            g["children"] = s["children"]
        if g.get("format") != "printed_graph":
            g["differs"] = sorted({what for d in members[key] for what in odd.get(d.path, [])})
    # failures first (a stable sort: within each, the listing's order); pieces stay under their graph
    return sorted(groups.values(), key=lambda g: not is_failure(g["kind"]))


def _differing(literals: list[list[Any]]) -> list[list[Any]]:
    """For each position where members' rank literals differ, every member's value there; none
    where the members' counts differ."""
    if len(literals) < 2 or len({len(m) for m in literals}) > 1:
        return []
    return [list(column) for column in zip(*literals) if len(set(column)) > 1]


def _input_specs(d: Dump) -> tuple:
    return tuple((i.get("kind"), i.get("dtype"), str(i.get("shape")), str(i.get("value")) if i.get("kind") != "symint" else None)
                 for i in d.manifest_data.get("inputs", []))


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
            majority = counts.most_common(1)[0][0]  # where all agree, none differs from it
            for path, f in facts.items():
                if repr(f[what]) != majority:
                    flags.setdefault(path, []).append(what)
    return flags
