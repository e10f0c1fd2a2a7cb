"""rich renderables for dumps, cases and listings; the CLI and notebooks both print these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

if TYPE_CHECKING:
    from graphdbg.case import Case
    from graphdbg.dump import Dump

def _txt(value: Any) -> str:
    """Table cell text; pandas gives NaN for missing strings."""
    if value is None or (isinstance(value, float) and value != value):
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


def listing_table(groups: list[dict[str, Any]], root: str | None = None) -> Table:
    """One row per group of identical failures; paths shown relative to ``root``."""
    import os

    table = Table(title=f"graphdbg dumps under {root}" if root else "graphdbg dumps")
    # Printed graph files (graphdbg.formats.printed_graph) add a graph number and the stand-ins they need.
    foreign = any(g.get("format") == "printed_graph" for g in groups)
    table.add_column("dump", overflow="fold", ratio=3)
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
    for g in groups:
        paths = [os.path.relpath(p, root) if root else p for p in g["paths"]]
        path_text = paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1})"
        where = [x for x in (g.get("frames") or [])[:1] + [", ".join(m for m in g.get("modules") or [] if m)] if x]
        error = ": ".join(x for x in (g["error_type"], g["message"]) if x)
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
            row.append(Text(", ".join(_short_construct(c) for c in g.get("constructs", [])), style="yellow"))
        if odd:
            row.append(Text(", ".join(g.get("differs") or []), style="bold red"))
        table.add_row(*row)
    return table


def log_notes(logs: list[dict[str, Any]], root: str | None = None) -> Text:
    """One line per distinct failure of each run log read by ``ls``: its ranks, backend, and
    which graphs it was attached to and how (``graphdbg.formats.run_log``)."""
    import os

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


def _short_construct(name: str) -> str:
    return name.removeprefix("torch.ops.higher_order.").removeprefix("torch.ops.").removeprefix("torch.")


def dump_panel(dump: Dump) -> Panel:
    lines = Text()
    lines.append(f"{dump.failure_kind}", style=KIND_STYLE.get(dump.failure_kind, "bold"))
    failure = dump.manifest.get("failure") or {}
    log = failure.get("log") if failure.get("source") == "log" else None
    lines.append(f" in backend {(failure.get('backend') if log else None) or dump.backend!r}, rank {dump.rank} of {dump.world_size}\n")
    if dump.signature:
        lines.append(f"{dump.signature}\n", style="bold")
    if log:
        lines.append(f"from the run's log {log['path']}:{log['line']} ({log['occurrences']} traceback{'s' if log['occurrences'] != 1 else ''}); {log['how']}\n", style="yellow")
        if log.get("rank_how"):
            lines.append(f"ranks {rank_ranges(log['ranks'] or [])}: {log['rank_how']}\n", style="yellow")
    env = dump.manifest.get("env", {})
    lines.append(f"torch {env.get('torch')}, python {env.get('python')}, {env.get('device_name')}; "
                 f"{dump.node_count} nodes, graph {dump.graph_hash[:12]}", style="dim")
    return Panel(lines, title=f"[bold]{dump.id}[/]", subtitle=str(dump.path), expand=False)


def _arg_text(value: Any) -> str:
    import torch.fx as fx

    if isinstance(value, fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_arg_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def graph_tree(dump: Dump) -> Tree:
    """The graph grouped under the user source line each node came from."""
    from graphdbg.graph_hash import target_name

    info = dump.manifest["graph"].get("node_info", {})
    tree = Tree(Text(f"graph: {dump.node_count} nodes", style="bold"))
    branch = tree.add(Text("inputs", style="cyan"))
    current: tuple | None = ("inputs",)
    for node in dump.printed.graph.nodes:
        spec = node.meta.get("graphdbg_spec")
        ann = spec.annotation() if spec is not None else ""
        module = info.get(node.name, {}).get("module")
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
        line = Text(f"{node.name} = ")
        line.append(target_name(node), style="bold")
        line.append(f"({args})")
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
        typ = f"{_txt(row.dtype)}{_txt(row.shape)} {_txt(row.device)}" if row.kind == "tensor" else ""
        if row.kind == "tensor" and _txt(row.mean):
            detail = f"min {row.min:.3g} max {row.max:.3g} mean {row.mean:.3g} std {row.std:.3g}"
        else:
            detail = _txt(row.value)
        stored = {True: "yes", False: Text("no: stats only", style="yellow")}.get(row.stored, "")
        table.add_row(Text(_txt(row.name)), Text(_txt(row.kind)), Text(typ), Text(detail), stored)
    return table


def show(dump: Dump) -> Group:
    parts: list[Any] = [dump_panel(dump)]
    message = dump.message.strip()
    if message:
        parts.append(Panel(Text(message[:2000]), title="error", border_style="red", expand=False))
    parts.extend([graph_tree(dump), inputs_table(dump)])
    return Group(*parts)


def case_panel(case: Case) -> Panel:
    text = Text(f"{len(case.placeholders)} inputs on {case.device}, {len(case.gm.graph.nodes)} nodes\n")
    for s in case.stand_ins:
        text.append(f"stand-in {s.describe()}\n", style="yellow")
    return Panel(text, title="Case", expand=False)


STATUS_STYLE = {"pass": "green", "crash": "red", "mismatch": "yellow", "timeout": "magenta"}


def outcome_panel(outcome: Any) -> Panel:
    text = Text()
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
        text.append(f"{m.get('what', 'output')} {m['index']}: {m['reason']} {detail}\n", style="yellow")
    if outcome.reference:
        text.append(f"reference: eager ({outcome.reference})\n", style="dim")
    for p in outcome.passes:
        delta = ", ".join(f"{k} {v:+d}" for k, v in list(p.get("ops_delta", {}).items())[:6])
        result = f", returned {p['result']}" if p.get("result") is not None else ""
        text.append(f"pass {p['name']} [{p['stage']}]: {p['nodes_before']} -> {p['nodes_after']} nodes{result}" + (f" ({delta})" if delta else "") + "\n")
    for s in outcome.stand_ins:
        text.append(f"stand-in {s}\n", style="yellow")
    if outcome.exit_signal or outcome.exit_code_child is not None:
        tail = (outcome.stderr_tail or "").strip().splitlines()[-5:]
        text.append("child stderr:\n" + "\n".join(tail) + "\n", style="dim")
    timing = ", ".join(f"{k} {getattr(outcome, k):.2f}s" for k in ("compile_s", "run_s", "total_s") if getattr(outcome, k) is not None)
    if timing:
        text.append(timing, style="dim")
    return Panel(text, title="Outcome", expand=False, border_style=STATUS_STYLE.get(outcome.status, ""))


def compare_table(df: Any) -> Table:
    table = Table(title="backends")
    for col in ("backend", "outcome", "signature", "seconds", "max abs error"):
        table.add_column(col, overflow="fold")
    for row in df.itertuples(index=False):
        err = "" if row.max_abs_error is None or row.max_abs_error != row.max_abs_error else f"{row.max_abs_error:.3g}"
        secs = "" if row.seconds is None or row.seconds != row.seconds else f"{row.seconds:.2f}"
        table.add_row(Text(row.backend), Text(row.status, style=STATUS_STYLE.get(row.status, "")), Text(_txt(row.signature)), secs, err)
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


RENDERERS = {"Dump": lambda d: dump_panel(d), "Case": lambda c: case_panel(c), "Outcome": lambda o: outcome_panel(o)}


def renderable(obj: Any) -> Any:
    """The rich renderable of a graphdbg noun: the first renderer registered for a class in its MRO."""
    for cls in type(obj).__mro__:
        fn = RENDERERS.get(cls.__name__)
        if fn is not None:
            return fn(obj)
    return Text(repr(obj))


def html_of(obj: Any, width: int = 120) -> str:
    """``renderable(obj)`` as an HTML fragment, for notebooks."""
    from rich.console import Console

    console = Console(record=True, width=width, file=_Null(), force_jupyter=False)
    console.print(renderable(obj))
    return console.export_html(inline_styles=True, code_format="<pre style=\"font-family:monospace\">{code}</pre>")


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass
