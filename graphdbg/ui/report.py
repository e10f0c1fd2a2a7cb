"""One self-contained HTML page for a dump folder, a corpus folder or a minify output.

    >>> write_report("graphdbg_dumps/", "report.html")   # or: graphdbg report graphdbg_dumps -o report.html

The page has no scripts, fonts or images from elsewhere (it opens offline and in CI artifacts):
the groups of identical failures with their ranks, each failure's signature and traceback, the
graph source with the failing node highlighted and the user's source lines, the stand-ins, the
minify steps as a small inline SVG (nodes against queries), and any ``bisect*.json`` beside the
dumps (``graphdbg bisect ... --json > bisect-passes.json``).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphdbg._version import __version__
from graphdbg.backends.recipe import backend_label, shown_backend
from graphdbg.errors import GraphdbgError
from graphdbg.judge.failing_node import node_of_traceback
from graphdbg.store.safe_files import MAX_TEXT_BYTES, files_under, read_inside, read_json, write_file
from graphdbg.store.schema import Minified, MinifyStep
from graphdbg.tables import failing_node_names
from graphdbg.ui.render import cell_text, escape_text, rank_ranges, stand_ins_text

MAX_SOURCE_LINES = 4000  # per graph; a huge graph is cut, with a note saying so

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d1d1f; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 6px; }
code, pre, .path { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
.path { overflow-wrap: anywhere; }
pre { background: #f6f8fa; padding: 8px 10px; overflow-x: auto; border-radius: 4px; }
pre.source { max-height: 520px; overflow: auto; }
pre.source span { display: block; white-space: pre; }
pre.source .file { color: #6a737d; }
pre.source .failing { background: #ffd7d5; outline: 2px solid #d73a49; font-weight: bold; }
pre.source .failing-file { background: #fff1c2; color: #5c4400; }
table { border-collapse: collapse; margin: 6px 0; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
tr.failing td { background: #ffd7d5; font-weight: bold; }
.kind-compile_error { color: #c00; } .kind-runtime_error { color: #a0a; } .kind-accuracy { color: #a60; }
.sig { font-weight: bold; }
.muted { color: #6a737d; }
.answer { border: 2px solid #d73a49; border-radius: 6px; padding: 10px 16px; margin: 12px 0 20px; background: #fff8f7; }
.answer.pass { border-color: #2da44e; background: #f3fbf5; }
.answer .verdict { font-size: 18px; font-weight: bold; margin: 4px 0 8px; overflow-wrap: anywhere; }
.answer p { margin: 4px 0; } .answer pre { margin: 4px 0; }
pre.tb { white-space: pre-wrap; overflow-wrap: anywhere; }
.answer code.failing-node { background: #ffd7d5; outline: 2px solid #d73a49; padding: 1px 4px; font-size: 15px; }
"""


def write_report(path: str | Path, out: str | Path) -> Path:
    """Write the HTML page for everything under ``path`` to ``out``; returns ``out``."""
    out = Path(out)
    return write_file(out, report_html(path))


def report_html(path: str | Path) -> str:
    """The report page as a string (see ``write_report``)."""
    from graphdbg.listing import list_dumps  # this module loads without torch (fast CLI start); this brings torch in

    root = Path(path)
    listing = list_dumps(root)
    groups = sorted(listing.groups, key=_rank_key)
    found = _bisect_results(root)
    body = [f"<h1>graphdbg report</h1><p class=path>{_e(root.resolve())}</p>"]
    body.append(_answer_section(groups, listing, found))
    body.extend(_bisect_sections(root, found))
    body.append(f"<p class=muted>graphdbg {_e(__version__)}; {_count(len(listing.dumps), 'dump')} in {_count(len(groups), 'group')}"
                + (f"; {len(listing.problems)} could not be read" if listing.problems else "") + "</p>")
    body.append(_groups_table(groups, str(root)))
    for p in listing.problems:
        body.append(f"<p class=muted>skipped: {_e(p['error'])}</p>")
    for i, g in enumerate(groups):
        body.append(_group_section(i, g, listing, found))
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>graphdbg report: {_e(root.name or root)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _num(value: Any) -> str:
    """A number as people read it: 3 significant digits for floats, thousands separated for ints."""
    if isinstance(value, bool) or value is None:
        return _e(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return _e(value)


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


def _answer_section(groups: list[dict[str, Any]], listing: Any, found: list[tuple[Path, dict[str, Any]]]) -> str:
    """The answer first: the verdict, the failing node, the command that replays it, and what
    minify and bisect found, above everything else."""

    failures = [g for g in groups if g["kind"] in FAILURES]
    if not failures:
        return (f"<div class='answer pass'><p class=verdict>no failures: {_count(len(groups), 'graph')}, none recorded a failure</p>"
                + "".join(f"<p>{_e(b)}</p>" for b in _bisect_lines(found)) + "</div>")
    g = failures[0]
    dump = next(d for d in listing.dumps if str(d.path) == g["paths"][0])
    ranks = f" on {_count(len(g['ranks']), 'rank')}" if len(g["ranks"]) > 1 else ""
    parts = [f"<p class=verdict>{_e(g['kind'])}{_e(ranks)}: {_e(g['signature'] or g.get('message') or '')}</p>"]
    if len(failures) > 1:
        parts.append(f"<p class=muted>{_count(len(failures), 'failing group')}; the first is shown here, all below</p>")
    failing = sorted(failing_node_names(dump))
    how = " (where the generated code raised)" if failing and failing == [_traceback_node(dump)] else ""
    if failing:
        parts.append(f"<p>failing node{how}: <code class=failing-node>{_e(', '.join(failing))}</code>{_node_source(dump, failing[0])}</p>")
    for n in _found_nodes(found):
        parts.append(f"<p>failing node (from {_e(n['from'])}): <code class=failing-node>{_e(n['node'])}</code>"
                     + (f" <code>{_e(n['target'])}</code>" if n.get("target") else "")
                     + (f" at <span class=path>{_e(n['source'])}</span>" if n.get("source") else "")
                     + (f", max abs error {_num(n['max_abs_error'])}" if n.get("max_abs_error") is not None else "") + "</p>")
    if not failing and not _found_nodes(found):
        parts.append("<p class=muted>the dump does not say which node failed; the replay's Outcome names it</p>")
    minified = dump.manifest.minified
    if minified:
        parts.append(f"<p>minified: {_num(minified.start_nodes)} &rarr; {_num(dump.node_count)} nodes in "
                     f"{_num(minified.oracle_queries)} queries</p>")
    parts.extend(f"<p>{b}</p>" for b in _bisect_lines(found))
    parts.append(f"<p>replay it:</p><pre class=tb>{_e(_replay_command(g['paths'][0], dump))}</pre>")
    return "<div class=answer>" + "".join(parts) + "</div>"


def _node_source(dump: Any, name: str) -> str:
    try:
        df = dump.nodes()
        row = df[df.name == name].iloc[0]
    except Exception:
        return ""
    target = f" <code>{_e(row.target)}</code>" if row.target else ""
    source = f" at <span class=path>{_e(row.source)}</span>" if isinstance(row.source, str) and row.source else ""
    return target + source


USER_FRAME_SKIP = ("site-packages", "dist-packages", "/torch/", "/graphdbg/", "<eval_with_key>", "<frozen ", "/lib/python3")


def _users_frame(file: str) -> bool:
    """A frame of the user's code: not torch's, Python's, or graphdbg's (paths may be redacted: relative)."""
    return not any(skip in file for skip in USER_FRAME_SKIP) and not file.startswith(("graphdbg/", "torch/", "<"))


def _traceback_html(tb: str) -> str:
    """The user's frames first (their code, not torch's or graphdbg's), then the whole traceback."""
    frames = re.findall(r'^  File "([^"]+)", line (\d+), in (\S+)\n((?:    .*\n)?)', tb + "\n", re.M)
    mine = [f for f in frames if _users_frame(f[0])]
    whole = f"<pre class=tb>{_e(tb[-12000:])}</pre>"
    if not mine or len(mine) == len(frames):
        return f"<h3>traceback</h3>{whole}"
    yours = "".join(f"{file}:{line} in {fn}\n{code}" for file, line, fn, code in mine[-8:])
    return (f"<h3>traceback: your frames</h3><pre class=tb>{_e(yours.rstrip())}</pre>"
            f"<details><summary>the whole traceback ({len(frames)} frames)</summary>{whole}</details>")


def _e(value: Any) -> str:
    return html.escape(escape_text(cell_text(value)))


_KIND_ORDER = {"compile_error": 0, "runtime_error": 1, "accuracy": 2}


def _rank_key(g: dict[str, Any]) -> tuple:
    """Failures first (compile, run time, accuracy), the most ranks first within a kind."""
    return (_KIND_ORDER.get(g["kind"], 3), -len(g["ranks"]), g["id"])


def _groups_table(groups: list[dict[str, Any]], root: str) -> str:
    rows = []
    for i, g in enumerate(groups):
        rel = _rel(g["paths"][0], root)
        more = f" <span class=muted>(+{len(g['paths']) - 1})</span>" if len(g["paths"]) > 1 else ""
        rows.append(f"<tr><td><a href='#group-{i}' class=path>{_e(rel)}</a>{more}</td>"
                    f"<td class='kind-{_e(g['kind'])}'>{_e(g['kind'])}</td><td>{_e(rank_ranges(g['ranks']))}</td>"
                    f"<td>{_e(g['nodes'])}</td><td class=sig>{_e(g['signature'] or '')}</td></tr>")
    return ("<h2>Groups</h2><table><tr><th>dump</th><th>failure</th><th>ranks</th><th>nodes</th><th>signature</th></tr>"
            + "".join(rows) + "</table>")


def _rel(p: str, root: str) -> str:
    try:
        return os.path.relpath(p, root)
    except ValueError:
        return p


def _group_section(i: int, g: dict[str, Any], listing: Any, found: list[tuple[Path, dict[str, Any]]] | None = None) -> str:
    dump = next(d for d in listing.dumps if str(d.path) == g["paths"][0])
    parts = [f"<h2 id='group-{i}'>{_e(dump.id)} <span class='kind-{_e(g['kind'])}'>{_e(g['kind'])}</span></h2>",
             f"<p>ranks {_e(rank_ranges(g['ranks']))}; {_e(g['nodes'])} nodes; backend <code>{_e(shown_backend(dump.manifest))}</code></p>"]
    parts.append("<p>" + "<br>".join(f"<span class=path>{_e(_rel(p, str(listing.root)))}</span>" for p in g["paths"][:8])
                 + (f"<br><span class=muted>and {len(g['paths']) - 8} more</span>" if len(g["paths"]) > 8 else "") + "</p>")
    if g.get("signature"):
        parts.append(f"<p class=sig>{_e(g['signature'])}</p>")
    if g.get("log"):
        parts.append(f"<p class=muted>failure from the run's log {_e(g['log'])}:{_e(g.get('log_line'))}"
                     f"{' (inferred)' if g.get('log_inferred') else ''}: {_e(g.get('log_how'))}</p>")
    if g.get("differs"):
        parts.append(f"<p><b>differs from the other ranks:</b> {_e(', '.join(g['differs']))}</p>")
    exception = dump.manifest.failure.exception
    message = (exception.message if exception else None) or dump.message
    if message:
        parts.append(f"<h3>error</h3><pre>{_e(message.strip()[:4000])}</pre>")
    if exception and exception.traceback:
        parts.append(_traceback_html(exception.traceback))
    constructs = g.get("constructs") or []
    if constructs:
        parts.append(f"<h3>stand-ins</h3><p>{_e(stand_ins_text(constructs))}</p><ul>"
                     + "".join(f"<li><code>{_e(c)}</code></li>" for c in constructs) + "</ul>")
    failing = failing_node_names(dump)
    if not failing and g["kind"] in FAILURES:  # the dump doesn't say: the traceback's node, or what bisect or a replay found
        named = {n["node"] for n in _found_nodes(found or [])} | {_traceback_node(dump)}
        failing = named & set(_node_names(dump))
    parts.append(_nodes_section(dump, failing))
    parts.append(_source_section(dump, failing))
    minified = dump.manifest.minified
    if minified:
        parts.append(_minify_section(minified, dump))
    return "\n".join(parts)


def _node_names(dump: Any) -> list[str]:
    try:
        return list(dump.nodes().name)
    except Exception:
        return []


def _nodes_section(dump: Any, failing: set[str]) -> str:
    """The computing nodes with the user source line each came from; the failing one marked."""
    try:
        df = dump.nodes()
    except Exception as e:  # a graph that doesn't rebuild still gets its source and error shown
        return f"<p class=muted>nodes: {_e(type(e).__name__)}: {_e(e)}</p>"
    rows = []
    for r in df[~df.op.isin(["placeholder", "output"])].head(400).itertuples(index=False):
        cls = " class=failing" if r.name in failing else ""
        shape = "[" + ", ".join(map(str, r.shape)) + "]" if isinstance(r.shape, tuple) else r.shape
        rows.append(f"<tr{cls}><td><code>{_e(r.name)}</code></td><td><code>{_e(r.target)}</code></td>"
                    f"<td>{_e(r.dtype)}{_e(shape)}</td><td class=path>{_e(r.source)}</td>"
                    f"<td><code>{_e(_e_strip(r.code))}</code></td><td>{_e(r.module)}</td></tr>")
    note = (f"<p>failing node: <code>{_e(', '.join(sorted(failing)))}</code></p>" if failing
            else "<p class=muted>the dump does not say which node failed (replay it: the Outcome names the node)</p>")
    return ("<h3>nodes and their source lines</h3>" + note
            + "<table><tr><th>node</th><th>target</th><th>value</th><th>source</th><th>code</th><th>module</th></tr>"
            + "".join(rows) + "</table>")


def _e_strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _source_section(dump: Any, failing: set[str]) -> str:
    """The graph's source, one span per line: the failing node's line and its ``# File:`` line marked."""
    try:
        lines = dump.source.splitlines()
    except Exception as e:
        return f"<p class=muted>graph source: {_e(e)}</p>"
    defines = re.compile(r"^\s*(" + "|".join(map(re.escape, sorted(failing))) + r")\s*(:|=)") if failing else None
    spans = []
    last_file: int | None = None
    for n, line in enumerate(lines[:MAX_SOURCE_LINES]):
        stripped = line.lstrip()
        cls = ""
        if stripped.startswith(("# File:", "# Annotation:")):
            cls, last_file = "file", n
        elif defines is not None and defines.match(line):
            cls = "failing"
            if last_file is not None:
                spans[last_file] = spans[last_file].replace("class='file'", "class='file failing-file'", 1)
        spans.append(f"<span class='{cls}' id='L{n + 1}'>{_e(line) or ' '}</span>" if cls else f"<span>{_e(line) or ' '}</span>")
    cut = f"<p class=muted>first {MAX_SOURCE_LINES} of {len(lines)} lines</p>" if len(lines) > MAX_SOURCE_LINES else ""
    return "<h3>graph source</h3><pre class=source>" + "".join(spans) + "</pre>" + cut


def steps_svg(steps: Sequence[MinifyStep], start_nodes: int, width: int = 420, height: int = 180) -> str:
    """Nodes (y) against oracle queries (x) after each winning minify step, as inline SVG."""
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

    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(q, n) for q, n in points))
    dots = "".join(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='#0366d6'><title>{q} queries: {n} nodes</title></circle>"
                   for (q, n), (x, y) in zip(points, (xy(q, n) for q, n in points)))
    x0, y0 = xy(0, 0)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' class=steps role=img "
            f"aria-label='nodes against queries'>"
            f"<line x1='{left}' y1='{y0}' x2='{width - right}' y2='{y0}' stroke='#999'/>"
            f"<line x1='{left}' y1='{top}' x2='{left}' y2='{y0}' stroke='#999'/>"
            f"<text x='{left - 6}' y='{top + 10}' font-size='11' text-anchor='end'>{max_n}</text>"
            f"<text x='{left - 6}' y='{y0}' font-size='11' text-anchor='end'>0</text>"
            f"<text x='{width - right}' y='{height - 8}' font-size='11' text-anchor='end'>{max_q} queries</text>"
            f"<text x='{left}' y='{height - 8}' font-size='11'>nodes</text>"
            f"<polyline fill='none' stroke='#0366d6' stroke-width='2' points='{line}'/>{dots}</svg>")


def _minify_section(minified: Minified, dump: Any) -> str:
    steps = minified.steps
    start = minified.start_nodes or (steps[0].nodes_before if steps else dump.node_count)
    rows = "".join(f"<tr><td>{_e(s.pass_name)}</td><td>{_e(s.nodes_before)} &rarr; {_e(s.nodes_after)}</td>"
                   f"<td>{_e(s.queries)}</td><td>{float(s.seconds or 0):.1f}s</td></tr>" for s in steps)
    parts = [f"<h3>minify</h3><p>{_e(start)} &rarr; {_e(dump.node_count)} nodes in {_e(minified.oracle_queries)} queries"
             f"{' (interrupted)' if minified.interrupted else ''}; backend <code>{_e(backend_label(minified.backend))}</code>"
             + (f"; from <span class=path>{_e(minified.from_)}</span>" if minified.from_ else "") + "</p>",
             steps_svg(steps, int(start)),
             "<table><tr><th>pass</th><th>nodes</th><th>queries</th><th>time</th></tr>" + rows + "</table>"]
    repro = dump.path.parent.parent / "repro.py"
    if os.path.lexists(repro):  # through the gate: a link, a FIFO or a device is refused, not followed
        try:
            text = read_inside(repro.parent, repro.name, max_bytes=MAX_TEXT_BYTES).decode("utf-8", errors="replace")
        except GraphdbgError as e:
            text = f"(not shown: {e})"
        parts.append(f"<h3>repro.py</h3><p class=path>{_e(repro)}</p><pre>{_e(text[:20000])}</pre>")
    return "\n".join(parts)


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


def _bisect_lines(found: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """One HTML line per bisect result."""
    return [f"bisect (<span class=path>{_e(path.name)}</span>): {what}" for path, what in _bisect_items(found)]


def _bisect_items(found: list[tuple[Path, dict[str, Any]]]) -> list[tuple[Path, str]]:
    """(file, what it found, as HTML) for each bisect result."""
    lines = []
    for path, data in found:
        if "culprit" in data:
            what = f"culprit pass <code>{_e(data['culprit'])}</code>" if data["culprit"] else "no pass breaks it"
            if data.get("pattern"):
                what += f"; pattern <code>{_e(data['pattern'])}</code>"
        elif "odd" in data:
            diffs = data.get("differences") or {}
            what = ("odd ranks: " + ", ".join(f"{_e(r)} ({_e('; '.join(diffs.get(str(r), [])))})" for r in data["odd"])
                    if data["odd"] else "no rank differs")
        elif "node" in data and "method" in data:
            what = (f"first diverging node <code>{_e(data['node'])}</code> at <span class=path>{_e(data.get('source'))}</span>"
                    f" (max abs error {_num(data.get('max_abs_error'))})" if data["node"] else "no node diverges")
        else:
            continue
        lines.append((path, what))
    return lines


def _bisect_sections(root: Path, found: list[tuple[Path, dict[str, Any]]] | None = None) -> list[str]:
    """What ``bisect`` found, from ``bisect*.json`` files (its ``--json`` output) under ``root``."""
    found = _bisect_results(root) if found is None else found
    items = [f"<li><span class=path>{_e(path.relative_to(root))}</span>: {what}</li>" for path, what in _bisect_items(found)]
    return ["<h2>bisect</h2><ul>" + "".join(items) + "</ul>"] if items else []
