"""Printed graphs inside a log, written out as graph files graphdbg reads.

``TORCH_LOGS=graph_code`` (and ``aot_graphs``, ``output_code``'s graph, a backend that prints
``gm.print_readable()``) puts whole GraphModules into a run's log, one log line per source line,
each behind a prefix: glog's ``V1122 14:38:14.339000 13742 torch/_dynamo/output_graph.py:2835]
[0/0] [__graph_code]``, a launcher's ``[rank3]:``. A bug report often has nothing else.

    >>> graphs = graphs_in_log("run.log")
    >>> graphs[0].title, graphs[0].rank, graphs[0].line
    ('__compiled_fn_1_055ff90e', 0, 3)
    >>> written = extract_graphs("run.log", "graphs/")   # graphs/rank0_0.py, ...

A graph starts at a ``class X(torch.nn.Module):`` line (after the prefix; Dynamo's logger puts
the file of the lazy module before it) and takes the indented lines of the same log record and
rank that follow. The title is the ``===== ... =====`` line before it. Each file begins with
``# Rank: R, Graph G`` and where it came from, then the graph as logged; nothing is run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from graphdbg.errors import GraphdbgError
from graphdbg.formats.run_log import log_lines, split_prefix
from graphdbg.store.safe_files import Folder, open_stream

__all__ = ["LoggedGraph", "graphs_in_log", "extract_graphs"]

# glog's record header, as torch's logging writes it; lines of one record share it
_GLOG = re.compile(r"^(?P<head>[VIWEDCF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]\s]+\]) (?:\[[\w/.\-]+\] )*")
_TITLE = re.compile(r"^\s*=====\s*(?P<title>.+?)\s*=====\s*$")
_CLASS = re.compile(r"(?:^|\s)(?P<cls>class\s+(?:\w+|<\w+>)\((?:torch\.)?nn\.Module\):\s*)$")
_ARTIFACT = re.compile(r"\[__(\w+)\]")
MAX_LINE = 4 << 20  # a whole model's forward signature is one line; past this a line is cut (and the graph won't parse)
MAX_GRAPH_LINES = 200_000  # a printed graph graphdbg reads has fewer (graph/parser.py: MAX_SOURCE_LINES)
MAX_GRAPHS = 10_000


@dataclass
class LoggedGraph:
    """One GraphModule printed in a log."""

    rank: int | None
    line: int  # where its class line is in the log
    title: str = ""
    artifact: str = ""  # graph_code, aot_graphs, ... (TORCH_LOGS' name for it), if the prefix says
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def _record(text: str) -> tuple[int | None, str, str, str]:
    """(rank, the record's key, the artifact, the line without its prefixes)."""
    rank, body = split_prefix(text)
    m = _GLOG.match(body)
    if m is None:
        return rank, "", "", body
    artifact = _ARTIFACT.search(m.group(0))
    return rank, m.group("head"), artifact.group(1) if artifact else "", body[m.end():]


def graphs_in_log(path: str | Path) -> list[LoggedGraph]:
    """Every printed GraphModule in the log at ``path``, in log order; GraphdbgError if it can't be read."""
    path = Path(path)
    try:
        f = open_stream(path)
    except OSError as e:
        raise GraphdbgError(f"{path}: cannot read the log ({e.strerror or type(e).__name__})") from None
    found: list[LoggedGraph] = []
    open_graphs: dict[tuple[int | None, str], LoggedGraph] = {}  # (rank, record) -> the graph it is printing
    titles: dict[int | None, str] = {}
    with f:
        for lineno, text in log_lines(f, MAX_LINE):
            rank, key, artifact, body = _record(text)
            graph = open_graphs.get((rank, key))
            if graph is not None:
                if (not body.strip() or body[:1].isspace()) and len(graph.lines) < MAX_GRAPH_LINES:
                    graph.lines.append(body)
                    continue
                del open_graphs[(rank, key)]  # the record moved on: the graph is complete
            if (m := _TITLE.match(body)) is not None:
                titles[rank] = m.group("title")
                continue
            if (m := _CLASS.search(body)) is not None and len(found) < MAX_GRAPHS:
                graph = LoggedGraph(rank, lineno, titles.pop(rank, ""), artifact, [m.group("cls").rstrip()])
                found.append(graph)
                open_graphs[(rank, key)] = graph
    return [g for g in found if len(g.lines) > 1]


def _safe(text: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", text)[:60].strip("_")


def extract_graphs(log: str | Path, out: str | Path, *, follow: bool = True) -> list[Path]:
    """Write each graph of ``log`` to ``out/rank{R}_{G}.py`` (G counts per rank, in log order,
    so ``graphdbg ls out`` groups them by rank); returns the files written. A file that exists
    is not overwritten: GraphdbgError names it. ``follow=False`` (an ``out`` graphdbg chose):
    no part of ``out`` may be a symbolic link."""
    log, out = Path(log), Path(out)
    graphs = graphs_in_log(log)
    if not graphs:
        raise GraphdbgError(f"{log}: no printed graphs in this log (TORCH_LOGS=graph_code or print_readable() output)")
    counts: dict[int, int] = {}
    plan = []
    for g in graphs:
        rank = g.rank if g.rank is not None else 0
        number = counts.get(rank, 0)
        counts[rank] = number + 1
        suffix = f"_{_safe(g.artifact)}" if g.artifact and g.artifact != "graph_code" else ""
        plan.append((out / f"rank{rank}_{number}{suffix}.py", rank, number, g))
    existing = [p for p, *_ in plan if os.path.lexists(p)]  # a dangling link counts: it is never written through
    if existing:
        raise GraphdbgError(f"{existing[0]} exists; extract into an empty folder (or remove it)")
    written = []
    with Folder.open(out, create=True, follow=follow) as folder:
        for path, rank, number, g in plan:
            where = f"{log.name} line {g.line}" + (f", {g.title}" if g.title else "") + (f" [{g.artifact}]" if g.artifact else "")
            written.append(folder.create(path.name, f"# Rank: {rank}, Graph {number}\n# extracted by graphdbg from {where}\n{g.text}"))
    return written
