"""rich renderables for dumps, cases and listings; the CLI and notebooks both print these."""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from graphdbg.backends.recipe import shown_backend
from graphdbg.dump import Dump, is_failure  # not graphdbg.listing: its cache and readers are ls's alone
from graphdbg.judge.difference import describe_difference
from graphdbg.judge.environment_diff import suspects
from graphdbg.tables import failing_node_names

if TYPE_CHECKING:
    from graphdbg.case import Case
    from graphdbg.dump import Dump
    from graphdbg.store.schema import Manifest

# C0 and C1 controls but newline and tab, DEL, and the bidi overrides: a dump's text may hold an
# OSC (window title, OSC 52 clipboard write), a CSI (screen clear) or a Trojan-Source reordering.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_text(text: Any) -> str:
    """``text`` with every terminal control character shown, not obeyed (``\\x1b``, ``\\u202e``):
    the one helper render, report and the CLI use on anything a dump says."""
    text = str(text)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def escape_markup(text: Any) -> str:
    """``text`` made safe to put inside rich markup: controls shown (``escape_text``), ``[`` escaped."""

    return escape(escape_text(text))


def safe_console(**kwargs: Any) -> Any:
    """A rich Console that reads no markup in strings (``[/]`` in a signature is text) and shows,
    rather than sends, any control character in what it prints (rich's own styling still works)."""

    class SafeConsole(Console):
        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(
                Segment(escape_text(s.text), s.style, s.control) if not s.control and _CONTROL.search(s.text) else s
                for s in buffer)

    kwargs.setdefault("markup", False)
    return SafeConsole(**kwargs)


@functools.singledispatch
def renderable(obj: Any) -> Any:
    """The rich renderable of a graphdbg noun: the function registered for the nearest class in its
    MRO (``functools.singledispatch``); any other object shows as its repr."""
    if _register_loaded():
        return renderable(obj)
    return Text(repr(obj))


@functools.singledispatch
def _repr_line(obj: Any) -> str:
    """The one-line repr of a graphdbg noun (``short_repr``), by its class as ``renderable``."""
    if _register_loaded():
        return _repr_line(obj)
    return object.__repr__(obj)


# Functions for classes whose module this one doesn't import: render loads without torch or
# pydantic (``ls`` shows its table through it), and an object of a class whose module isn't
# loaded can't be shown. Each waits here, as (dispatcher, module, class name) -> function, until
# a dispatch finds no function and that module is loaded; then it is registered with the class
# itself, so a renamed class is an AttributeError, not a display that silently falls back.
_WAITING: dict[tuple[Any, str, str], Callable[[Any], Any]] = {}


def _when_loaded(dispatcher: Any, module: str, name: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Register the decorated function with ``dispatcher`` for the class ``module.name`` once that
    module is loaded."""

    def wait(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        _WAITING[dispatcher, module, name] = fn
        return fn
    return wait


def _register_loaded() -> bool:
    """Register every waiting function whose class's module is loaded now; whether any was."""
    ready = [key for key in list(_WAITING) if key[1] in sys.modules]
    for dispatcher, module, name in ready:
        fn = _WAITING.pop((dispatcher, module, name), None)
        if fn is not None:
            dispatcher.register(getattr(sys.modules[module], name), fn)
    return bool(ready)


def cell_text(value: Any) -> str:
    """Table cell text: "" for None, NaN and pandas' NA (a missing string in a DataFrame)."""
    if value is None or (isinstance(value, float) and value != value) or type(value).__name__ == "NAType":
        return ""
    return str(value)


KIND_STYLE = {"compile_error": "red", "runtime_error": "magenta", "accuracy": "yellow", "captured": "green", "crash": "bright_red"}


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 6] -> '0-2,5-6'."""
    ranks = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


def _group_paths(g: dict[str, Any], root: str | None) -> list[str]:
    return [os.path.relpath(p, root) if root else p for p in g["paths"]]


def _path_text(path: str, style: str = "") -> Text:
    """A path that is never folded or cut: printed whole, past the edge if it must (print with crop=False)."""
    return Text(path, style=style, no_wrap=True, overflow="ignore")


STAND_IN_KINDS = (("stream", ("stream", "Stream", "Event")), ("triton kernel", ("triton",)),
                  ("device", ("device(", "Device")), ("collective", ("all_reduce", "all_gather", "reduce_scatter", "_c10d", "all_to_all")))


def stand_in_kind(construct: str) -> str:
    """What kind of thing needs a stand-in: stream, triton kernel, device, collective, custom op, other."""
    for kind, needles in STAND_IN_KINDS:
        if any(n in construct for n in needles):
            return kind
    return "custom op" if construct.startswith("torch.ops.") else "other"


def stand_ins_text(constructs: list[str], limit: int = 3) -> str:
    """The constructs by name when few, else counted by kind with an example of each:
    ``8: 3 stream (cuda.current_stream), 2 device (...), ...``."""
    if len(constructs) <= limit:
        return ", ".join(_short_construct(c) for c in constructs)
    by_kind: dict[str, list[str]] = {}
    for c in constructs:
        by_kind.setdefault(stand_in_kind(c), []).append(_short_construct(c))
    parts = [f"{len(names)} {kind} ({names[0]}{', ...' if len(names) > 1 else ''})"
             for kind, names in sorted(by_kind.items(), key=lambda kv: -len(kv[1]))]
    return f"{len(constructs)}: " + ", ".join(parts)


class ListingView:
    """``ls`` as a table on a wide terminal, else as a list with each path whole on its own line
    (pipes, CI logs, narrow terminals): a path is never folded, so it can be copied."""

    def __init__(self, groups: list[dict[str, Any]], root: str | None = None, unreadable: int = 0):
        self.groups, self.root, self.unreadable = groups, root, unreadable

    def __rich_console__(self, console: Any, options: Any) -> Any:
        longest = max((len(p) for g in self.groups for p in _group_paths(g, self.root)), default=0)
        if console.is_terminal and options.max_width >= longest + 100:
            yield Text(listing_summary(self.groups, self.unreadable), style="bold")
            yield listing_table(self.groups, self.root)
        else:
            yield listing_list(self.groups, self.root, self.unreadable)


def plural(n: int, word: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def listing_summary(groups: list[dict[str, Any]], unreadable: int = 0) -> str:
    """``ls``'s answer in one line: files, groups, failures by kind, unreadable files."""

    files = sum(len(g["paths"]) for g in groups)
    kinds: dict[str, int] = {}
    for g in groups:
        if is_failure(g["kind"]):
            kinds[g["kind"]] = kinds.get(g["kind"], 0) + 1
    failed = sum(kinds.values())
    text = f"{plural(files, 'file')} in {plural(len(groups), 'group')}: "
    text += (f"{failed} failing (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])) + ")"
             if failed else "no failures")
    if unreadable:
        text += f"; {unreadable} unreadable"
    return text


class ListingProgress:
    """``ls``'s progress: a bar on a terminal, a plain line every few seconds when piped; nothing
    for a folder read in under a second."""

    def __init__(self, console: Any, every_s: float = 5.0):

        self.console, self.every_s, self.clock = console, every_s, time.monotonic
        self.started = self.last = self.clock()
        self.bar: Any = None
        self.task: Any = None
        self.lines = 0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.started < 1.0 and self.bar is None:
            return
        if self.console.is_terminal:
            if self.bar is None:
                # lazy: ls imports no torch (listing/)
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                self.bar = Progress(TextColumn("reading"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                    console=self.console, transient=True)
                self.bar.start()
                self.task = self.bar.add_task("ls", total=total)
            self.bar.update(self.task, completed=done, total=total)
        elif now - self.last >= self.every_s or (done == total and self.lines):
            self.console.print(f"ls: read {done}/{total} files", highlight=False, soft_wrap=True, markup=False)
            self.last, self.lines = now, self.lines + 1

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def listing_list(groups: list[dict[str, Any]], root: str | None = None, unreadable: int = 0) -> Group:
    """One block per group: its path whole on one line, then what failed, where, and what it needs."""
    head = Text(f"graphdbg dumps under {root}" if root else "graphdbg dumps", style="bold")
    head.append(": " + listing_summary(groups, unreadable), style="")
    parts: list[Any] = [head]

    tree = _as_tree(groups)
    for i, (g, depth) in enumerate(tree):
        paths = _group_paths(g, root)
        parts.append(Text(""))
        parts.append(_path_text(("  " * depth + f"└─ {g.get('piece')}: " if depth else "") + paths[0], style="bold cyan"))
        for child, child_depth in tree[i + 1:]:  # the pieces a nested compile failed on, named right under their graph
            if child_depth <= depth:
                break
            if child_depth == depth + 1:
                name = os.path.basename(_group_paths(child, root)[0])
                parts.append(Text("  " * child_depth + f"└─ {child.get('piece')}: {name}", style="dim"))
        facts = Text("  ")
        facts.append(g["kind"], style=KIND_STYLE.get(g["kind"], ""))
        if g.get("log"):
            facts.append(" (from log, inferred)" if g.get("log_inferred") else " (from log)", style="dim")
        facts.append(f" · rank{'s' if len(g['ranks']) > 1 else ''} {rank_ranges(g['ranks'])} · {g['nodes']} nodes")
        if g.get("graphs"):
            facts.append(f" · graph {','.join(map(str, g['graphs']))}")
        parts.append(facts)
        where = [x for x in (g.get("frames") or [])[:1] + [", ".join(m for m in g.get("modules") or [] if m)] if x]
        for line in where:  # frame, compile id and the blocks a collapsed group stands for (capture/origin.py)
            parts.append(Text("  " + line, style="dim"))  # indented by text, not Padding: no trailing blanks when piped
        error = _error_text(g)
        if error:
            parts.append(Text("  " + error))
        if g.get("constructs"):
            parts.append(Text("  needs stand-ins: " + stand_ins_text(g["constructs"]), style="yellow"))
        if g.get("differs"):
            parts.append(Text("  differs from the other ranks: " + ", ".join(g["differs"]), style="bold red"))
        for more in paths[1:3]:
            parts.append(_path_text("  also " + more, style="dim"))
        if len(paths) > 3:
            parts.append(Text(f"  and {len(paths) - 3} more (ls --json lists them)", style="dim"))
    return Group(*parts)


def _error_text(g: dict[str, Any]) -> str:
    """A group's error; a crash (a process killed by a signal) by the signature it replays with."""
    error = ": ".join(x for x in (g["error_type"], g["message"]) if x)
    sig = g.get("signature")
    if g["kind"] == "crash" and sig and not error.startswith(sig):
        error = ": ".join(x for x in (sig, g["message"]) if x)
    return error


def listing_table(groups: list[dict[str, Any]], root: str | None = None) -> Table:
    """One row per group of identical failures; paths shown relative to ``root``, never folded."""
    table = Table(title=f"graphdbg dumps under {root}" if root else "graphdbg dumps")
    # Printed graph files (graphdbg.formats.printed_graph) add a graph number and the stand-ins they need.
    foreign = any(g.get("format") == "printed_graph" for g in groups)
    table.add_column("dump", no_wrap=True)
    if foreign:
        table.add_column("graph", no_wrap=True)
    table.add_column("ranks", no_wrap=True)
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("failure", no_wrap=True)
    table.add_column("error", overflow="fold", ratio=4)
    if foreign:
        table.add_column("needs stand-ins", overflow="fold", ratio=4)
    odd = any(g.get("differs") for g in groups)
    if odd:
        table.add_column("differs from the other ranks", overflow="fold", ratio=2)
    for g, depth in _as_tree(groups):
        paths = _group_paths(g, root)
        path_text = paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1})"
        if depth:  # a piece a nested compile failed on, under the dump of its graph
            path_text = "   " * (depth - 1) + f"└─ {g.get('piece')}: {os.path.basename(paths[0])}"
        where = [x for x in (g.get("frames") or [])[:1] + [", ".join(m for m in g.get("modules") or [] if m)] if x]
        error = _error_text(g)
        row = [Text(path_text)]
        if where:  # frame, compile id and the blocks a collapsed group stands for (capture/origin.py)
            row[0].append("\n" + "\n".join(where), style="dim")
        if foreign:
            row.append(",".join(map(str, g.get("graphs") or [])) or "-")
        kind = Text(g["kind"], style=KIND_STYLE.get(g["kind"], ""))
        if g.get("log"):  # the failure comes from the run's log (graphdbg.formats.run_log)
            kind.append("\nfrom log, inferred" if g.get("log_inferred") else "\nfrom log", style="dim")
        row += [rank_ranges(g["ranks"]), str(g["nodes"]), kind, Text(error)]
        if foreign:
            row.append(Text(stand_ins_text(g.get("constructs", [])), style="yellow"))
        if odd:
            row.append(Text(", ".join(g.get("differs") or []), style="bold red"))
        table.add_row(*row)
    return table


def log_notes(logs: list[dict[str, Any]], root: str | None = None) -> Text:
    """One line per distinct failure of each run log read by ``ls``: its ranks, backend, and
    which graphs it was attached to and how (``graphdbg.formats.run_log``)."""
    text = Text()
    for entry in logs:
        name = os.path.relpath(entry["path"], root) if root else entry["path"]
        if entry.get("error"):
            text.append(f"log {entry['error']}: not used\n", style="yellow")
            continue
        if not entry["failures"]:
            text.append(f"log {name}: no failure\n", style="dim")
        attached = entry.get("attached", [])
        for f in entry["failures"]:
            ranks = f["ranks"] or []
            where = f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}" if ranks else "an unknown rank"
            text.append(f"log {name}:{f['first_line']}: ", style="dim")
            text.append(f["signature"], style="bold")
            text.append(f" on {where}" + (f" (backend {f['backend']})" if f["backend"] else "")
                        + f", {f['occurrences']} traceback{'s' if f['occurrences'] != 1 else ''}\n")
            if f["rank_how"]:
                text.append(f"  ranks: {f['rank_how']}\n", style="dim")
            mine = [a for a in attached if a["signature"] == f["signature"]]
            if mine:
                files = [os.path.basename(a["path"]) for a in mine]
                text.append(f"  attached to {files[0]}" + (f" (+{len(files) - 1})" if len(files) > 1 else "")
                            + f": {mine[0]['how']}\n", style="dim")
            elif f["kind"] == "error":
                text.append("  not attached: it happened outside compiling or running a graph\n", style="dim")
            else:
                text.append("  not attached: no graph beside the log fits it\n", style="dim")
    return text


def _as_tree(groups: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Groups in listing order, each piece group right under the group holding its parent dump."""
    owner = {os.path.normpath(p): i for i, g in enumerate(groups) for p in g["paths"]}
    kids: dict[int, list[int]] = {}
    roots = []
    for i, g in enumerate(groups):
        parent = owner.get(os.path.normpath(g["parent"])) if g.get("parent") else None
        if parent is None or parent == i:
            roots.append(i)
        else:
            kids.setdefault(parent, []).append(i)
    out: list[tuple[dict[str, Any], int]] = []

    def visit(i: int, depth: int) -> None:
        if depth > 8:
            return
        out.append((groups[i], depth))
        for k in kids.get(i, []):
            visit(k, depth + 1)

    for i in roots:
        visit(i, 0)
    return out


def nested_panel(dump: Dump) -> Panel | None:
    """Where a piece dump comes from, the pieces of a graph, the backend's origin, and the
    compiler settings the replay restores."""
    m = dump.manifest
    text = Text()
    parent = m.parent
    if parent:
        text.append(f"piece {parent.piece} (position {parent.position}, compile #{parent.call}) "
                    f"of {parent.dir or 'graph g' + str(parent.seq)}, split by {parent.backend}\n")
    for c in m.children:
        text.append(f"piece {c.piece} failed in {c.backend}: {c.signature or c.kind} -> {c.dir}\n", style="yellow")
    script = m.backend_source.script if m.backend_source else None
    if script:
        text.append(f"backend {m.backend or ''} defined in {script} (replay loads it from there with --trust-backend)\n")
    for key, value in sorted(m.config.values.items()):
        text.append(f"setting {key} = {value!r}\n", style="cyan")
    if m.config.skipped:
        text.append("not recorded: " + ", ".join(f"{k} ({why})" for k, why in sorted(m.config.skipped.items())) + "\n",
                    style="dim")
    if not text.plain:
        return None
    return Panel(text, title="pieces, backend and compiler settings", expand=False)


def kernels_panel(manifest: Manifest) -> Panel | None:
    """The graph's own kernels (graph/kernels.py): each custom op and user Triton kernel, with
    where it came from."""
    text = Text()
    for op in manifest.custom_ops:
        where = op.module or "registered where torch.library does not say"
        if op.package:
            where += f" ({op.package} {op.version or ''})".replace(" )", ")")
        fake = "fake impl" if op.has_fake else "no fake impl"
        text.append(f"custom op {op.schema_ or op.name}\n", style="bold")
        text.append(f"    from {where}; {fake}; called {op.calls} times\n")
    for k in manifest.triton_kernels:
        name = k.name or f"kernel_idx={k.kernel_idx} (not in Dynamo's side table at capture)"
        text.append(f"triton kernel {name}\n", style="bold")
        facts = [f"from {k.module}" if k.module else None, f"grid {k.grid}",
                 f"{len(k.source.splitlines())} lines of source in the dump (replay --trust-kernels runs it)" if k.source
                 else "no source (it replays as a stand-in)",
                 f"{len(k.globals)} globals its source names" if k.globals else None,
                 f"{len(k.autotune_configs)} autotune configs" if k.autotune_configs else None,
                 f"triton {k.triton_version}" if k.triton_version else None, f"called {k.calls} times"]
        text.append("    " + "; ".join(f for f in facts if f) + "\n")
    if not text.plain:
        return None
    return Panel(text, title="kernels and custom ops", expand=False)


def _short_construct(name: str) -> str:
    return name.removeprefix("torch.ops.higher_order.").removeprefix("torch.ops.").removeprefix("torch.")


def _shown_backend(dump: Dump) -> str:
    """The dump's backend; an aot_autograd(...)/partial one as its recipe reads."""
    return shown_backend(dump.manifest)


def dump_panel(dump: Dump) -> Panel:
    lines = Text()
    m = dump.manifest
    log, captured = m.failure.from_log, m.captured
    backend = (m.failure.backend if log else None) or (_shown_backend(dump) if captured else None)
    if dump.failure_kind == "printed_graph" and not log:
        lines.append("printed graph, no failure recorded", style="bold")
    else:
        lines.append(f"{dump.failure_kind}", style=KIND_STYLE.get(dump.failure_kind, "bold"))
        lines.append(f" in backend {backend!r}" if backend else " (backend not recorded)")
    lines.append(f", rank {dump.rank} of {dump.world_size}\n")
    if dump.signature:
        lines.append(f"{dump.signature}\n", style="bold")
    if (m.failure.seen or 1) > 1:  # the same failure captured again (capture/seen.py)
        lines.append(f"captured {m.failure.seen} times, last at {m.failure.last_seen}\n")
    if log:
        lines.append(f"from the run's log {log.path}:{log.line} ({log.occurrences} traceback{'s' if log.occurrences != 1 else ''}); {log.how}\n", style="yellow")
        if log.rank_how:
            lines.append(f"ranks {rank_ranges(log.ranks)}: {log.rank_how}\n", style="yellow")
    where = (f"torch {m.env.torch}, python {m.env.python}, {m.env.device_name}; " if captured
             else "environment not recorded (not a graphdbg capture); ")
    lines.append(f"{where}{dump.node_count} nodes, graph {dump.graph_hash[:12]}", style="dim")
    return Panel(lines, title=Text(str(dump.id), style="bold"), expand=False)


def _arg_text(value: Any) -> str:
    import torch.fx as fx  # this module loads without torch (fast CLI start); this brings torch in

    if isinstance(value, fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


@renderable.register(Dump)
def _dump_with_path(dump: Dump) -> Group:
    return Group(_path_text(str(dump.path), style="dim"), dump_panel(dump))


def graph_tree(dump: Dump) -> Tree:
    """The graph grouped under the user source line each node came from."""
    from graphdbg.graph.hashing import target_name  # this module loads without torch (fast CLI start); this brings torch in

    modules = dump.manifest.graph.node_modules
    failing = failing_node_names(dump)
    tree = Tree(Text(f"graph: {dump.node_count} nodes", style="bold"))
    branch = tree.add(Text("inputs", style="cyan"))
    current: tuple | None = ("inputs",)
    for node in dump.printed.graph.nodes:
        spec = node.meta.get("graphdbg_spec")
        ann = spec.annotation() if spec is not None else ""
        module = modules.get(node.name)
        if node.op == "placeholder":
            line = Text(node.name)
            line.append(f"  {ann}", style="green")
            if module:
                line.append(f"  {module}", style="dim")
            branch.add(line)
            continue
        src = node.meta.get("graphdbg_source") or {}
        key = (src.get("file"), src.get("line")) if node.op != "output" else ("output",)
        if key != current:
            current = key
            if node.op == "output":
                label = Text("return", style="cyan")
            elif src.get("file"):
                label = Text(f"{src['file']}:{src['line']}", style="cyan")
                if src.get("code"):
                    label.append(f"  {src['code'].strip()}", style="italic")
            else:
                label = Text("(no source line)", style="dim")
            branch = tree.add(label)
        args = ", ".join([_arg_text(a) for a in node.args] + [f"{k}={_arg_text(v)}" for k, v in node.kwargs.items()])
        if node.op == "output":
            branch.add(Text(args))
            continue
        line = Text(f"{node.name} = ", style="bold red" if node.name in failing else "")
        line.append(target_name(node), style="bold")
        line.append(f"({args})")
        if node.name in failing:
            line.append("  <- failed here", style="bold red")
        if ann:
            line.append(f"  {ann}", style="green")
        if module:
            line.append(f"  {module}", style="dim")
        branch.add(line)
    return tree


def inputs_table(dump: Dump) -> Table:
    df = dump.inputs_table()
    table = Table(title="inputs")
    for col in ("name", "kind", "type", "value / stats", "stored"):
        table.add_column(col, overflow="fold")
    for row in df.itertuples(index=False):
        shape = "[" + ", ".join(map(str, row.shape)) + "]" if isinstance(row.shape, tuple) else cell_text(row.shape)
        typ = f"{cell_text(row.dtype)}{shape} {cell_text(row.device)}" if row.kind == "tensor" else ""
        if row.kind == "tensor" and cell_text(row.mean):
            detail = f"min {row.min:.3g} max {row.max:.3g} mean {row.mean:.3g} std {row.std:.3g}"
        else:
            detail = cell_text(row.value)
        stored = {True: "yes", False: Text("no: stats only", style="yellow")}.get(row.stored, "")
        table.add_row(Text(cell_text(row.name)), Text(cell_text(row.kind)), Text(typ), Text(detail), stored)
    return table


TRACEBACK_LINES = 24


def failing_node_text(dump: Dump) -> Text | None:
    """``failing node: linear = torch._C._nn.linear at model.py:15  self.up(self.norm(x))``, when
    the dump says which node failed (``tables.failing_node_names``)."""
    from graphdbg.graph.hashing import target_name  # this module loads without torch (fast CLI start); this brings torch in

    names = failing_node_names(dump)
    if not names:
        return None
    text = Text("failing node: ", style="bold red")
    for node in (n for n in dump.printed.graph.nodes if n.name in names):
        src = node.meta.get("graphdbg_source") or {}
        text.append(f"{node.name} = {target_name(node)}", style="bold")
        if src.get("file"):
            text.append(f" at {src['file']}:{src['line']}")
            if src.get("code"):
                text.append(f"  {src['code'].strip()}", style="italic")
        text.append("\n")
    text.rstrip()
    return text


def show(dump: Dump) -> Group:
    parts: list[Any] = [_path_text(str(dump.path), style="dim"), dump_panel(dump)]
    where = failing_node_text(dump)
    if where is not None:
        parts.append(where)
    message = dump.message.strip()
    if message:
        parts.append(Panel(Text(message[:2000]), title="error", border_style="red", expand=False))
    if isinstance(getattr(dump, "manifest_data", None), dict):
        parts += [p for p in (nested_panel(dump), kernels_panel(dump.manifest)) if p is not None]
    exception = dump.manifest.failure.exception
    tb = ((exception.traceback if exception else None) or "").strip().splitlines()
    if tb:
        shown = tb[-TRACEBACK_LINES:]
        more = f" (last {len(shown)} of {len(tb)} lines; show --json has it all)" if len(tb) > len(shown) else ""
        parts.append(Panel(Text("\n".join(shown), style="dim"), title="traceback" + more, border_style="red", expand=False))
    parts.extend([graph_tree(dump), inputs_table(dump)])
    return Group(*parts)


@_when_loaded(renderable, "graphdbg.case", "Case")
def case_panel(case: Case) -> Panel:
    text = Text(f"{len(case.placeholders)} inputs on {case.device}, {len(case.gm.graph.nodes)} nodes\n")
    for s in case.stand_ins:
        text.append(f"stand-in {s.describe()}\n", style="yellow")
    return Panel(text, title="Case", expand=False)


STATUS_STYLE = {"pass": "green", "crash": "red", "mismatch": "yellow", "timeout": "magenta"}


class Boxed:
    """A panel on a terminal; piped (CI logs, ``grep``), its title and lines as plain text: no box
    drawing, no padding, each line whole (print it with ``crop=False``)."""

    def __init__(self, body: Text, title: str, border_style: str = "") -> None:
        self.body, self.title, self.border_style = body, title, border_style

    def __rich_console__(self, console: Any, options: Any) -> Any:
        if console.is_terminal or console.record:  # a terminal, or HTML for a notebook
            yield Panel(self.body, title=self.title, expand=False, border_style=self.border_style)
            return
        for line in self.body.split("\n"):
            line.rstrip()
            line.no_wrap, line.overflow = True, "ignore"
            yield line


def stand_in_lines(stand_ins: list[str]) -> list[str]:
    """Stand-ins (``name: kind (detail)``), one line per kind when there are more than two:
    ``stand-ins: 40 synthesized (arg0_1, arg1_1, ... e.g. arg0_1: synthesized (...))``."""
    if len(stand_ins) <= 2:
        return [f"stand-in {s}" for s in stand_ins]
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for s in stand_ins:
        name, sep, rest = s.partition(": ")
        kind = rest.split(" (", 1)[0] if sep and rest else stand_in_kind(s)
        by_kind.setdefault(kind, []).append((name if sep else _short_construct(s), s))
    lines = []
    for kind, items in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(n for n, _ in items[:4]) + (", ..." if len(items) > 4 else "")
        lines.append(f"stand-ins: {len(items)} {kind} ({names})" if len(items) > 1 else f"stand-in {items[0][1]}")
    return lines


def outcome_verdict(outcome: Any, dump: Any, differences: list[Any] | None = None) -> tuple[str, str]:
    """(verdict, style) of a replay against what ``dump`` recorded: the first line of its output.
    A mismatch names its first output off and, where the replay found it, the node it starts at.
    A pass where the capture failed names the environment's ``differences`` (``judge.environment``)
    as suspects."""
    recorded = getattr(dump, "failure_kind", None) in ("compile_error", "runtime_error", "accuracy", "crash")
    captured = getattr(dump, "signature", None) or getattr(dump, "failure_kind", None)
    if outcome.status == "pass":
        if recorded:
            why = (f"; suspects: {suspects(differences)}" if differences
                   else "; nothing recorded about the environment differs" if _records_environment(dump) else "")
            return f"NOT REPRODUCED: the dump recorded {captured}; backend {outcome.backend} passes{why}", "bold yellow"
        return "PASS", "bold green"
    if not recorded:
        return f"FAILS: {outcome.summary()}", "bold red"
    if outcome.status == "mismatch" and getattr(dump, "failure_kind", None) == "accuracy":
        differs = outcome.difference_from(dump)
        if differs:
            return f"FAILED DIFFERENTLY: {differs}", "bold magenta"
        if outcome.reproduces(dump):
            return f"REPRODUCED: {mismatch_text(outcome, 'as captured')}", "bold red"
    if outcome.reproduces(dump):
        return "REPRODUCED: the same failure as captured", "bold red"
    return f"DIFFERENT FAILURE: captured was {captured}", "bold magenta"


def mismatch_text(outcome: Any, how: str = "") -> str:
    """``output 0 off by 0.0025 (100% of elements), as captured; it starts at node mul (model.py:31)``."""
    text = describe_difference(outcome.mismatches[0]) if outcome.mismatches else "outputs off"
    text += f", {how}" if how else ""
    start = getattr(outcome, "diverges_at", None) or {}
    if start.get("node"):
        where = f" ({start['source']})" if start.get("source") else ""
        text += (f"; it starts where the backend rewrote node {start['replaced']}{where}" if start.get("replaced")
                 else f"; it starts at node {start['node']}{where}")
    return text


def _records_environment(dump: Any) -> bool:
    env = (getattr(dump, "manifest_data", None) or {}).get("env")
    return isinstance(env, dict) and "settings" in env


def environment_panel(differences: list[Any], not_restored: list[str] | None = None) -> Boxed | None:
    """What differs from the capture, most likely cause first (``judge.environment``), and what
    ``--as-captured`` could not restore; None when there is nothing to say."""
    if not differences and not not_restored:
        return None
    text = Text()
    for d in differences:
        text.append(f"{d.line()}\n", style="bold" if d.kind in ("backend", "compiler setting") else "")
    for line in not_restored or []:
        text.append(f"{line}\n", style="dim")
    text.rstrip()
    return Boxed(text, "differs from the capture", "yellow")


@_when_loaded(renderable, "graphdbg.outcome", "Outcome")
def outcome_panel(outcome: Any, dump: Any = None, differences: list[Any] | None = None) -> Boxed:
    text = Text()
    if dump is not None:
        verdict, style = outcome_verdict(outcome, dump, differences)
        text.append(verdict + "\n", style=style)
    text.append(outcome.status.upper(), style=f"bold {STATUS_STYLE.get(outcome.status, '')}")
    text.append(f"  backend {outcome.backend} on {outcome.device}")
    if outcome.isolated:
        text.append("  (isolated)", style="dim")
    text.append("\n")
    if outcome.signature:
        text.append(f"{outcome.signature}\n", style="bold")
    if outcome.stage:
        text.append(f"failed in: {outcome.stage}\n")
    if outcome.node:
        text.append(f"node: {outcome.node} ({outcome.node_target})\n")
    for m in outcome.mismatches:
        err = m.get("max_abs_error")
        rel = m.get("max_rel_error")
        detail = f"max abs error {err:.3g}" + (f", max rel error {rel:.3g}" if rel is not None else "") if err is not None else m.get("detail", "")
        if m.get("measure") in ("mean ulps", "bit for bit"):  # what found it, where the sizes above don't say
            detail += f" ({m['detail']})" if m["measure"] == "mean ulps" else " (compared bit for bit)"
        text.append(f"{m.get('what', 'output')} {m['index']}: {m['reason']} {detail}\n", style="yellow")
    start = getattr(outcome, "diverges_at", None)
    if start and start.get("node"):
        where = f" at {start['source']}" + (f"  {start['code'].strip()}" if start.get("code") else "") if start.get("source") else ""
        rewritten = f", rewritten from {start['replaced']}" if start.get("replaced") else ""
        text.append(f"first node off: {start['node']} ({start.get('target')}{rewritten}){where}\n", style="yellow")
    if outcome.reference:
        compared = f"; {outcome.compared}" if getattr(outcome, "compared", None) else ""
        text.append(f"reference: {outcome.reference}{compared}\n", style="dim")
    if getattr(outcome, "reference_error", None):
        text.append(f"{outcome.reference_error}\n", style="dim")
    if not getattr(outcome, "trusted", True):
        text.append(f"untrusted: {outcome.untrusted_because}\n", style="bold yellow")
    for p in outcome.passes:
        delta = ", ".join(f"{k} {v:+d}" for k, v in list(p.get("ops_delta", {}).items())[:6])
        result = f", returned {p['result']}" if p.get("result") is not None else ""
        text.append(f"pass {p['name']} [{p['stage']}]: {p['nodes_before']} -> {p['nodes_after']} nodes{result}" + (f" ({delta})" if delta else "") + "\n")
    for line in stand_in_lines(list(outcome.stand_ins)):
        text.append(line + "\n", style="yellow")
    append_kernel_lines(text, getattr(outcome, "kernels", None) or [])
    if outcome.exit_signal or outcome.exit_code_child is not None:
        tail = (outcome.stderr_tail or "").strip().splitlines()[-5:]
        text.append("child stderr:\n" + "\n".join(tail) + "\n", style="dim")
    timing = ", ".join(f"{k} {getattr(outcome, k):.2f}s" for k in ("compile_s", "run_s", "total_s") if getattr(outcome, k) is not None)
    if timing:
        text.append(timing, style="dim")
    text.rstrip()
    return Boxed(text, "Outcome", STATUS_STYLE.get(outcome.status, ""))


class PlainWhenPiped:
    """A table on a terminal; piped, its title and one line per row, cells two spaces apart:
    no box drawing, no padding, no folding (print with ``crop=False``)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Any, options: Any) -> Any:
        if console.is_terminal or console.record:
            yield self.table
            return
        if self.table.title:
            yield Text(str(self.table.title))
        cells = [[c.plain if isinstance(c, Text) else str(c) for c in col._cells] for col in self.table.columns]
        yield Text("  ".join(col.header for col in self.table.columns), no_wrap=True, overflow="ignore")
        for row in zip(*cells):
            yield Text("  ".join(v or "-" for v in row), no_wrap=True, overflow="ignore")


def compare_table(df: Any) -> Table:
    table = Table(title="backends")
    for col in ("backend", "outcome", "signature", "seconds", "max abs error"):
        table.add_column(col, overflow="fold")
    for row in df.itertuples(index=False):
        err = "" if row.max_abs_error is None or row.max_abs_error != row.max_abs_error else f"{row.max_abs_error:.3g}"
        secs = "" if row.seconds is None or row.seconds != row.seconds else f"{row.seconds:.2f}"
        table.add_row(Text(row.backend), Text(row.status, style=STATUS_STYLE.get(row.status, "")), Text(cell_text(row.signature)), secs, err)
    return table


def world_table(world: Any) -> Table:
    node = f", node {world.node_rank} of {world.nnodes}" if world.nnodes > 1 else ""
    table = Table(title=f"{world.graph}: {world.world_size} ranks under {world.backend} on {world.device}, "
                        f"process group {world.pg_backend}{node} ({world.seconds:.1f}s)")
    for col in ("rank", "device", "outcome", "signature", "seconds"):
        table.add_column(col, overflow="fold")
    for r in world.ranks:
        o = r.outcome
        table.add_row(str(r.rank), r.device, Text(o.status, style=STATUS_STYLE.get(o.status, "")), Text(o.signature or ""),
                      f"{o.total_s:.2f}" if o.total_s is not None else "")
    return table


def _num(value: Any) -> str:
    return "" if value is None or value != value else f"{value:.3g}"


def _measure(value: Any, spec: str = ".3g") -> str:
    """A measure of judge/measures.py: ``inf`` where --json's strict JSON made it null (a zero reference)."""
    return "inf" if value is None else format(value, spec)


@_when_loaded(renderable, "graphdbg.minify.bisect", "PassBisection")
def pass_bisection_panel(result: Any) -> Panel:
    """``bisect passes``: the culprit pass (and pattern/match), then the good and bad outcomes."""
    text = Text()
    if result.culprit is None:
        text.append("no pass breaks it", style="bold green")
    else:
        text.append(f"culprit: pass {result.index} ", style="bold")
        text.append(result.culprit, style="bold red")
        if result.pattern:
            text.append(f"\npattern {result.pattern_index}: {result.pattern}")
        if result.match_index is not None:
            text.append(f"\nfirst bad match: #{result.match_index}")
    if result.outcome is not None:
        text.append(f"\nwith it:    {result.outcome.summary()}", style=STATUS_STYLE.get(result.outcome.status, ""))
    if result.good_outcome is not None:
        text.append(f"\nbefore it:  {result.good_outcome.summary()}", style=STATUS_STYLE.get(result.good_outcome.status, ""))
    text.append(f"\n{result.runs} runs", style="dim")
    if result.note:
        text.append(f"\n{result.note}", style="yellow")
    return Panel(text, title="bisect passes", expand=False)


@_when_loaded(renderable, "graphdbg.replay.divergence", "NodeDivergence")
def node_divergence_panel(result: Any) -> Panel:
    """``bisect nodes``: the first diverging node, its source line and module, how far off."""
    text = Text()
    if result.node is None and getattr(result, "failure", None):
        text.append("a pass fails before any node runs" + (": fails differently" if result.fails_differently else ""), style="bold red")
    elif result.node is None:
        text.append("no node diverges", style="bold green")
    else:
        text.append(result.node, style="bold red")
        if getattr(result, "fails_differently", False):
            text.append("  fails differently", style="bold yellow")
        if result.target:
            text.append(f" ({result.target})")
        if result.replaced:
            text.append(f"\nrewritten from {result.replaced}" + (f" into {', '.join(result.new_nodes)}" if result.new_nodes else ""))
        if result.source:
            text.append(f"\n{result.source}", style="cyan")
            if result.code:
                text.append(f"  {result.code.strip()}", style="italic")
        if result.module:
            text.append(f"\nmodule {result.module}", style="dim")
        if result.max_abs_error is not None:
            text.append(f"\nmax abs error {_num(result.max_abs_error)}" + (f", max rel error {_num(result.max_rel_error)}" if result.max_rel_error is not None else ""), style="yellow")
    text.append(f"\n{result.compared} nodes compared ({result.method})", style="dim")
    if result.note:
        text.append(f"\n{result.note}", style="yellow")
    return Panel(text, title="bisect nodes", expand=False)


@_when_loaded(renderable, "graphdbg.minify.bisect", "RankReport")
def rank_report_table(report: Any) -> Group:
    """``bisect ranks``: one row per rank, its graph and signature, what differs from the majority."""
    table = Table(title=f"{len(report.ranks)} ranks" + (f", odd: {rank_ranges(report.odd)}" if report.odd else ", none differs"))
    for col, opts in (("rank", {"no_wrap": True}), ("graph", {"no_wrap": True}), ("signature", {"overflow": "fold"}),
                      ("differs from the majority", {"overflow": "fold"})):
        table.add_column(col, **opts)
    for r in report.ranks:
        diff = report.differences.get(r) or []
        table.add_row(str(r), (report.graphs.get(r) or "")[:12], Text(report.signatures.get(r) or ""),
                      Text("\n".join(diff), style="bold red") if diff else Text("-", style="dim"))
    parts: list[Any] = [table]
    if report.notes:
        parts.append(Text("\n".join(report.notes), style="dim"))
    return Group(*parts)


@_when_loaded(renderable, "graphdbg.minify.shrinker", "MinifyResult")
def minify_panel(result: Any) -> Boxed:
    """``minify``: nodes before and after, queries, where it was saved, and each winning step."""
    lines = Text(f"{result.start_nodes} -> {result.final_nodes} nodes, {result.queries} queries, "
                 f"{result.cache_hits} cache hits, {result.seconds:.1f}s\n")
    lines.append(result.outcome.summary() + "\n", style=STATUS_STYLE.get(result.outcome.status, ""))
    for line in result.log:
        lines.append(line + "\n", style="dim")
    if getattr(result, "stopped", None):  # minify's budget: the graph is the best so far, not the smallest
        lines.append(f"budget ended after {result.stopped}: this is the best graph so far\n", style="bold yellow")
    if result.saved:
        lines.append(f"saved to {result.saved}", style="bold")
    title = " (interrupted)" if result.interrupted else (" (budget ended)" if getattr(result, "stopped", None) else "")
    lines.rstrip()
    return Boxed(lines, "minify" + title)


def append_kernel_lines(text: Text, kernels: list[dict[str, Any]]) -> None:
    """One line per custom op and user Triton kernel: how it ran (real, from the dump, stand-in)."""
    for k in kernels:
        why = f" ({k['why']})" if k.get("why") else ""
        text.append(f"{k['kind'].replace('_', ' ')} {k['kernel']}: ran {k['ran']}{why}\n",
                    style="yellow" if k["ran"] == "stand-in" else "dim")


@_when_loaded(renderable, "graphdbg.replay.compare_swap", "SwapReport")
def swap_table(report: Any) -> Group:
    """``compare --swap``: per output, how far the swaps move it."""
    swaps = ", ".join(f"{s['op']} -> {s['reference']}" for s in report.swaps)
    table = Table(title=f"the graph as captured against the graph with {swaps}", title_justify="left")
    within = getattr(report, "within", None) or []
    for col in ("output", "shape", "dtype", "max abs error", "mean abs error", "cosine", "rel l1", "rel l2", "ulps",
                "within" if within else "close"):
        table.add_column(col, justify="right" if col in ("max abs error", "mean abs error", "cosine", "rel l1", "rel l2", "ulps") else "left")
    for r in report.rows:
        close = Text("yes", style="green") if r["close"] else Text("no", style="red")
        if r.get("measure"):  # not a float: compared as the judge does (exactly, bit for bit), said in place of the measures
            largest = "" if r["max_abs_error"] is None else _measure(r["max_abs_error"])
            table.add_row(str(r["output"]), str(r["shape"]), r["dtype"], largest, r["note"], "", "", "", "", close)
            continue
        table.add_row(str(r["output"]), str(r["shape"]), r["dtype"], _measure(r["max_abs_error"]), _measure(r["mean_abs_error"]),
                      _measure(r["cosine"], ".6f"), _measure(r.get("rel_l1")), _measure(r.get("rel_l2", r.get("rel_error"))),
                      _measure(r.get("ulps")), close)
    notes = Text()
    if report.rows:  # what the verdict rests on: the reference, the measure and bound, how many values
        compared = sum(r.get("compared", 0) for r in report.rows)
        notes.append(f"judged against the graph with the references, {report.judged_by()}, over {compared} values\n")
    for s in report.swaps:
        for a in s.get("assumptions") or []:
            notes.append(f"{s['op']} -> {s['reference']}: {a['says']}\n", style="yellow" if a["source"] == "assumed" else "dim")
    notes.append(f"{len(report.replaced)} calls swapped\n", style="dim")
    for s in report.stand_ins:
        notes.append(f"stand-in {s}\n", style="yellow")
    append_kernel_lines(notes, getattr(report, "kernels", None) or [])
    return Group(table, notes)


@_when_loaded(renderable, "graphdbg.minify.bisect_envs", "EnvBisection")
def env_bisection_panel(result: Any) -> Boxed:
    """``bisect envs``: each environment's verdict, then the one that flips it and what differs."""
    text = Text()
    for line in result.lines():
        style = "bold red" if line.startswith("first to differ") else "dim" if line.startswith("not bisected") else ""
        text.append(line + "\n", style=style)
    text.rstrip()
    return Boxed(text, f"bisect envs ({result.mode})", "red" if result.culprit else "green")


@_when_loaded(renderable, "graphdbg.minify.bisect_ops", "BisectOpsResult")
def bisect_ops_panel(result: Any) -> Panel:
    text = Text()
    for name in result.culprits:
        text.append(f"culprit: {name}\n", style="bold red")
    text.append(result.note + "\n")
    text.append(f"captured graph against the all-reference graph: relative error {result.error:.3g}\n")
    if result.error_vs_float64 is not None:
        text.append(f"against the float64 reference: captured {result.error_vs_float64:.3g}, "
                    f"all-reference {result.all_reference_error_vs_float64:.3g}\n")
    elif result.float64_note:
        text.append(f"no float64 reference: {result.float64_note}\n", style="dim")
    for r in getattr(result, "rows", None) or []:  # with --within: each output's measures, judged by the bounds
        if r.get("measure"):  # not a float: compared exactly or bit for bit
            text.append(f"  output {r['output']}: {r['note']}\n", style="" if r["close"] else "red")
            continue
        judged = "; ".join(f"{c['bound']}: {_measure(c['value'], '.6g')} {'holds' if c['holds'] else 'does not hold'}"
                           for c in r.get("within") or [])
        text.append(f"  output {r['output']}: cosine {_measure(r['cosine'], '.6f')}, rel l1 {_measure(r['rel_l1'])}, "
                    f"rel l2 {_measure(r['rel_l2'])}, max abs {_measure(r['max_abs_error'])}, ulps {_measure(r['ulps'])}"
                    + (f" ({judged})" if judged else "") + "\n",
                    style="" if r["close"] else "red")
    for s in getattr(result, "assumptions", None) or []:
        for a in s.get("assumptions") or []:
            if a["source"] == "assumed":
                text.append(f"{s['op']} -> {s['reference']}: {a['says']}\n", style="yellow")
    for r in result.ops:
        extra = f", {r['accounts_for_vs_float64']:.0%} against float64" if "accounts_for_vs_float64" in r else ""
        text.append(f"  {r['op']} -> {r['reference']}: accounts for {r['accounts_for']:.0%}{extra} "
                    f"(error left {r['error_after']:.3g})\n")
    for s in result.stand_ins:
        text.append(f"stand-in {s}\n", style="yellow")
    append_kernel_lines(text, getattr(result, "kernels", None) or [])
    return Panel(text, title="bisect ops", expand=False)


@_when_loaded(renderable, "graphdbg.listing.groups", "Listing")
def _listing_view(listing: Any) -> ListingView:
    return ListingView(listing.groups, str(listing.root))


def _seconds(value: Any) -> str:
    return f", {value:.2f}s" if value is not None and value == value else ""


@_when_loaded(_repr_line, "graphdbg.case", "Case")
def _case_repr(c: Any) -> str:
    loaded = f", from {c.dump.id}" if getattr(c, "dump", None) is not None else ""
    stand_ins = f", {len(c.stand_ins)} stand-ins" if c.stand_ins else ""
    return f"Case({len(c.gm.graph.nodes)} nodes, {len(c.placeholders)} inputs on {c.device}{loaded}{stand_ins})"


@_when_loaded(_repr_line, "graphdbg.listing.groups", "Listing")
def _listing_repr(listing: Any) -> str:
    return f"Listing({len(listing.groups)} groups, {len(listing.dumps)} dumps under {str(listing.root)!r}" + \
        (f", {len(listing.problems)} unreadable" if listing.problems else "") + ")"


@_when_loaded(_repr_line, "graphdbg.minify.shrinker", "MinifyResult")
def _minify_repr(r: Any) -> str:
    saved = f", saved to {str(r.saved)!r}" if r.saved else ""
    return (f"MinifyResult({r.start_nodes} -> {r.final_nodes} nodes, {r.queries} queries, {r.outcome.status}"
            f"{', interrupted' if r.interrupted else ''}{saved})")


@_when_loaded(_repr_line, "graphdbg.outcome", "Outcome")
def _outcome_repr(o: Any) -> str:
    return f"Outcome({o.summary() if o.status != 'pass' else 'pass'}, backend {o.backend!r}{_seconds(o.total_s)})"


@_when_loaded(_repr_line, "graphdbg.minify.bisect", "PassBisection")
def _pass_bisection_repr(r: Any) -> str:
    return f"PassBisection(culprit={r.culprit!r}, {r.runs} runs)"


@_when_loaded(_repr_line, "graphdbg.replay.divergence", "NodeDivergence")
def _node_divergence_repr(r: Any) -> str:
    return f"NodeDivergence({r.summary()})"


@_when_loaded(_repr_line, "graphdbg.minify.bisect", "RankReport")
def _rank_report_repr(r: Any) -> str:
    return f"RankReport(ranks {rank_ranges(r.ranks)}, odd {rank_ranges(r.odd) or 'none'})"


def short_repr(obj: Any) -> str:
    """One line, no tensors, no tracebacks: what a notebook shows for a graphdbg noun."""
    try:
        return _repr_line(obj)
    except Exception as e:  # a repr must never raise
        return f"<{type(obj).__name__}: {type(e).__name__} in repr>"


def html_of(obj: Any, width: int = 120) -> str:
    """``renderable(obj)`` as an HTML fragment, for notebooks."""
    console = safe_console(record=True, width=width, file=_Null(), force_jupyter=False)
    console.print(renderable(obj), crop=False)
    return console.export_html(inline_styles=True, code_format="<pre style=\"font-family:monospace\">{code}</pre>")


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass
