"""One self-contained HTML page for a dump folder, a corpus folder or a minify output.

    >>> write_report("graphdbg_dumps/", "report.html")   # or: graphdbg report graphdbg_dumps -o report.html

The page is ``templates/report.html.j2`` (Jinja2, autoescaped) filled with ``page_context``'s plain
values. It has no scripts, fonts or images from elsewhere (it opens offline and in CI artifacts):
the groups of identical failures with their ranks, each failure's signature and traceback, the
graph source with the failing node highlighted and the user's source lines, the stand-ins, the
minify steps as a small inline SVG (nodes against queries), and any ``bisect*.json`` beside the
dumps (``graphdbg bisect ... --json > bisect-passes.json``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from graphdbg._version import __version__
from graphdbg.backends.recipe import backend_label, shown_backend
from graphdbg.errors import GraphdbgError
from graphdbg.judge.failing_node import node_of_traceback
from graphdbg.store.safe_files import MAX_TEXT_BYTES, files_under, read_inside, read_json, write_file
from graphdbg.store.schema import Minified, MinifyStep
from graphdbg.tables import failing_node_names
from graphdbg.ui.render import cell_text, escape_text, rank_ranges, stand_ins_text

MAX_SOURCE_LINES = 4000  # per graph; a huge graph is cut, with a note saying so
TEMPLATES = Path(__file__).parent / "templates"  # package data (pyproject's package-data ships it)
MAX_TEMPLATE_BYTES = 1 << 20


def write_report(path: str | Path, out: str | Path) -> Path:
    """Write the HTML page for everything under ``path`` to ``out``; returns ``out``."""
    out = Path(out)
    return write_file(out, report_html(path))


def report_html(path: str | Path) -> str:
    """The report page as a string (see ``write_report``)."""
    from graphdbg.listing import list_dumps  # this module loads without torch (fast CLI start); this brings torch in

    return _template().render(**page_context(list_dumps(Path(path))))


def page_context(listing: Any) -> dict[str, Any]:
    """What the page shows of a listing (``list_dumps``), as plain values: the template's context."""
    root = Path(listing.root)
    groups = sorted(listing.groups, key=_rank_key)
    found = _bisect_results(root)
    return {"title": root.name or root, "root": root.resolve(), "version": __version__,
            "answer": _answer(groups, listing, found), "bisect": _bisect_items(root, found), "dumps": len(listing.dumps),
            "problems": listing.problems, "groups": [_group(g, str(root), listing, found) for g in groups]}


def _shown(value: Any) -> Any:
    """What ``{{ value }}`` prints, before autoescaping: "" for None and NaN, every terminal control
    shown, not obeyed (``render.escape_text``). ``Markup`` is what the template itself made (a macro's
    output, a ``join`` of escaped items; nothing is marked safe): its text is already escaped, and
    its controls are shown the same way (they are never HTML syntax)."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(escape_text(str(value)))
    return escape_text(cell_text(value))


@cache
def _template() -> jinja2.Template:
    """report.html.j2, read through the gate; every ``{{ value }}`` HTML-escaped (autoescape) after ``_shown``."""

    def source(name: str) -> str:
        return read_inside(TEMPLATES, name, max_bytes=MAX_TEMPLATE_BYTES, text=True)

    env = jinja2.Environment(loader=jinja2.FunctionLoader(source), autoescape=True, finalize=_shown,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(num=_num, count_of=_count)
    return env.get_template("report.html.j2")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _num(value: Any) -> str:
    """A number as people read it: 3 significant digits for floats, thousands separated for ints."""
    if isinstance(value, bool) or value is None:
        return cell_text(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return cell_text(value)


FAILURES = ("compile_error", "runtime_error", "accuracy", "crash")


def _found_nodes(found: list[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Failing nodes that bisect nodes (or a saved replay --json) named, with where they came from."""
    nodes = []
    for path, data in found:
        if data.get("node") and ("method" in data or "status" in data):
            nodes.append({"node": data["node"], "from": path.name, "source": data.get("source"),
                          "target": data.get("target") or data.get("node_target"), "max_abs_error": data.get("max_abs_error")})
    return nodes


def _traceback_node(dump: Any) -> str | None:
    """The node the generated code was running when it raised, from the recorded traceback,
    when that node is in the graph."""
    exception = dump.manifest.failure.exception
    name = node_of_traceback((exception.traceback if exception else None) or "")
    return name if name in _node_names(dump) else None


def _replay_command(path: str, dump: Any) -> str:
    trust = " --trust-backend" if dump.manifest.needs_trust else ""
    return f"graphdbg replay {path}{trust}"


def _answer(groups: list[dict[str, Any]], listing: Any, found: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """The answer first: the verdict, the failing node, the command that replays it, and what
    minify and bisect found, above everything else."""
    failures = [g for g in groups if g["kind"] in FAILURES]
    if not failures:
        return {"failures": 0, "graphs": len(groups)}
    g = failures[0]
    dump = next(d for d in listing.dumps if str(d.path) == g["paths"][0])
    failing = sorted(failing_node_names(dump))
    minified = dump.manifest.minified
    return {"failures": len(failures), "kind": g["kind"], "verdict": g["signature"] or g.get("message") or "",
            "ranks": f" on {_count(len(g['ranks']), 'rank')}" if len(g["ranks"]) > 1 else "",
            "failing": failing, "how": " (where the generated code raised)" if failing and failing == [_traceback_node(dump)] else "",
            "node": _node_source(dump, failing[0]) if failing else {}, "found": _found_nodes(found),
            "minified": {"start_nodes": minified.start_nodes, "oracle_queries": minified.oracle_queries} if minified else None,
            "node_count": dump.node_count, "command": _replay_command(g["paths"][0], dump)}


def _node_source(dump: Any, name: str) -> dict[str, Any]:
    """The failing node's target and the user's source line it came from."""
    try:
        df = dump.nodes()
        row = df[df.name == name].iloc[0]
    except Exception:
        return {"target": "", "source": ""}
    return {"target": row.target or "", "source": row.source if isinstance(row.source, str) else ""}


USER_FRAME_SKIP = ("site-packages", "dist-packages", "/torch/", "/graphdbg/", "<eval_with_key>", "<frozen ", "/lib/python3")


def _users_frame(file: str) -> bool:
    """A frame of the user's code: not torch's, Python's, or graphdbg's (paths may be redacted: relative)."""
    return not any(skip in file for skip in USER_FRAME_SKIP) and not file.startswith(("graphdbg/", "torch/", "<"))


def _traceback(tb: str) -> dict[str, Any]:
    """The user's frames first (their code, not torch's or graphdbg's), then the whole traceback."""
    frames = re.findall(r'^  File "([^"]+)", line (\d+), in (\S+)\n((?:    .*\n)?)', tb + "\n", re.M)
    mine = [f for f in frames if _users_frame(f[0])]
    yours = "" if not mine or len(mine) == len(frames) else \
        "".join(f"{file}:{line} in {fn}\n{code}" for file, line, fn, code in mine[-8:]).rstrip()
    return {"yours": yours, "frames": len(frames), "whole": tb[-12000:]}


_KIND_ORDER = {"compile_error": 0, "runtime_error": 1, "accuracy": 2}


def _rank_key(g: dict[str, Any]) -> tuple:
    """Failures first (compile, run time, accuracy), the most ranks first within a kind."""
    return (_KIND_ORDER.get(g["kind"], 3), -len(g["ranks"]), g["id"])


def _rel(p: str, root: str) -> str:
    try:
        return os.path.relpath(p, root)
    except ValueError:
        return p


def _group(g: dict[str, Any], root: str, listing: Any, found: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """What the page shows of one group: its row in the table of groups and its section."""
    dump = next(d for d in listing.dumps if str(d.path) == g["paths"][0])
    exception = dump.manifest.failure.exception
    message = (exception.message if exception else None) or dump.message
    failing = failing_node_names(dump)
    if not failing and g["kind"] in FAILURES:  # the dump doesn't say: the traceback's node, or what bisect or a replay found
        named = {n["node"] for n in _found_nodes(found)} | {_traceback_node(dump)}
        failing = named & set(_node_names(dump))
    minified = dump.manifest.minified
    log = {"file": g["log"], "line": g.get("log_line"), "inferred": g.get("log_inferred"), "how": g.get("log_how")} \
        if g.get("log") else None
    return {"id": dump.id, "kind": g["kind"], "ranks": rank_ranges(g["ranks"]), "nodes": g["nodes"],
            "signature": g["signature"] or "", "backend": shown_backend(dump.manifest), "table_path": _rel(g["paths"][0], root),
            "paths": [_rel(p, str(listing.root)) for p in g["paths"]], "log": log, "differs": g.get("differs") or [],
            "message": message.strip()[:4000] if message else "",
            "traceback": _traceback(exception.traceback) if exception and exception.traceback else None,
            "constructs": g.get("constructs") or [], "stand_ins": stand_ins_text(g.get("constructs") or []),
            "failing": sorted(failing), **_nodes(dump, failing), **_source(dump, failing),
            "minify": _minify(minified, dump) if minified else None}


def _node_names(dump: Any) -> list[str]:
    try:
        return list(dump.nodes().name)
    except Exception:
        return []


def _nodes(dump: Any, failing: set[str]) -> dict[str, Any]:
    """The computing nodes with the user source line each came from; the failing one marked."""
    try:
        df = dump.nodes()
    except Exception as e:  # a graph that doesn't rebuild still gets its source and error shown
        return {"nodes_error": f"{type(e).__name__}: {e}", "node_rows": []}
    rows = [{"name": r.name, "target": r.target, "dtype": r.dtype, "source": r.source, "module": r.module,
             "shape": "[" + ", ".join(map(str, r.shape)) + "]" if isinstance(r.shape, tuple) else r.shape,
             "code": r.code.strip() if isinstance(r.code, str) else r.code, "failing": r.name in failing}
            for r in df[~df.op.isin(["placeholder", "output"])].head(400).itertuples(index=False)]
    return {"nodes_error": "", "node_rows": rows}


def _source(dump: Any, failing: set[str]) -> dict[str, Any]:
    """The graph's source as (class, line): the failing node's line and its ``# File:`` line marked."""
    try:
        lines = dump.source.splitlines()
    except Exception as e:
        return {"source_error": str(e), "source": [], "source_cut": 0}
    defines = re.compile(r"^\s*(" + "|".join(map(re.escape, sorted(failing))) + r")\s*(:|=)") if failing else None
    marked: list[list[str]] = []
    last_file: int | None = None
    for n, line in enumerate(lines[:MAX_SOURCE_LINES]):
        cls = ""
        if line.lstrip().startswith(("# File:", "# Annotation:")):
            cls, last_file = "file", n
        elif defines is not None and defines.match(line):
            cls = "failing"
            if last_file is not None and marked[last_file][0] == "file":
                marked[last_file][0] = "file failing-file"
        marked.append([cls, line])
    return {"source_error": "", "source": marked, "source_cut": len(lines) if len(lines) > MAX_SOURCE_LINES else 0}


def steps_chart(steps: Sequence[MinifyStep], start_nodes: int, width: int = 420, height: int = 180) -> dict[str, Any]:
    """Nodes (y) against oracle queries (x) after each winning minify step: what the page draws as inline SVG."""
    points = [(0, start_nodes)]
    queries = 0
    for s in steps:
        queries += int(s.queries or 0)
        points.append((queries, int(s.nodes_after or 0)))
    max_q = max(q for q, _ in points) or 1
    max_n = max(n for _, n in points) or 1
    left, bottom, top, right = 44, 28, 10, 12

    def xy(q: int, n: int) -> tuple[float, float]:
        return (left + (width - left - right) * q / max_q, top + (height - top - bottom) * (1 - n / max_n))

    return {"width": width, "height": height, "left": left, "top": top, "right": right, "y0": xy(0, 0)[1],
            "max_nodes": max_n, "max_queries": max_q,
            "points": [{"queries": q, "nodes": n, "x": xy(q, n)[0], "y": xy(q, n)[1]} for q, n in points]}


def _minify(minified: Minified, dump: Any) -> dict[str, Any]:
    steps = minified.steps
    start = minified.start_nodes or (steps[0].nodes_before if steps else dump.node_count)
    repro, shown = dump.path.parent.parent / "repro.py", None
    if os.path.lexists(repro):  # through the gate: a link, a FIFO or a device is refused, not followed
        try:
            text = read_inside(repro.parent, repro.name, max_bytes=MAX_TEXT_BYTES).decode("utf-8", errors="replace")
        except GraphdbgError as e:
            text = f"(not shown: {e})"
        shown = {"path": repro, "text": text[:20000]}
    return {"start": start, "node_count": dump.node_count, "queries": minified.oracle_queries,
            "interrupted": minified.interrupted, "backend": backend_label(minified.backend), "source": minified.from_,
            "chart": steps_chart(steps, int(start)), "repro": shown,
            "steps": [{"pass_name": s.pass_name, "nodes_before": s.nodes_before, "nodes_after": s.nodes_after,
                       "queries": s.queries, "seconds": f"{float(s.seconds or 0):.1f}"} for s in steps]}


def _bisect_results(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """``bisect*.json`` (``bisect --json``) and ``replay*.json`` (``replay --json``) files under ``root``."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted([*files_under(root, "bisect*.json", limit=20), *files_under(root, "replay*.json", limit=20)])[:20]:
        try:
            data = read_json(path.parent, path.name, what="bisect result")
        except GraphdbgError:
            continue
        if isinstance(data, dict):
            found.append((path, data))
    return found


def _bisect_items(root: Path, found: list[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """What each bisect result found: a culprit pass, odd ranks or the first diverging node."""
    items = []
    for path, data in found:
        item = {"file": path.name, "path": path.relative_to(root), "culprit": None, "pattern": None, "odd": [],
                "node": None, "source": None, "max_abs_error": None}
        if "culprit" in data:
            item.update(kind="culprit", culprit=data["culprit"], pattern=data.get("pattern"))
        elif "odd" in data:
            diffs = data.get("differences") or {}
            item.update(kind="odd", odd=[(r, "; ".join(diffs.get(str(r), []))) for r in data["odd"] or []])
        elif "node" in data and "method" in data:
            item.update(kind="node", node=data["node"], source=data.get("source"), max_abs_error=data.get("max_abs_error"))
        else:
            continue
        items.append(item)
    return items
