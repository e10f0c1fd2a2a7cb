"""``capture`` (run a program with its backends wrapped) and ``extract`` (the graphs a log printed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.ui.commands.common import (
    JsonFlag,
    _default_output,
    _example,
    _print_json,
    command,
    console,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, epilog=_example("graphdbg capture --dump-dir dumps -- python train.py"))
def capture(
    ctx: typer.Context,
    dump_dir: Annotated[Optional[Path], typer.Option("--dump-dir", "-o", envvar="GRAPHDBG_DUMP_DIR", help="Where dumps go (rank<R>/<id>/ below it; "
                                                     "default ./graphdbg_dumps, never through a link).")] = None,
    mode: Annotated[str, typer.Option(help="error | accuracy | always")] = "error",
    budget_gb: Annotated[float, typer.Option("--budget-gb", help="Input bytes stored per graph, in GiB.")] = 4.0,
    redact: Annotated[bool, typer.Option("--redact", help="Write dumps safe to share (relative paths, no host or user names).")] = False,
) -> None:
    """Run a command with every torch.compile backend in it wrapped: graphdbg capture -- python train.py"""
    from graphdbg.capture.launch import die_like, dumps_in, nothing_captured_hint, run_captured

    dump_dir = dump_dir if dump_dir is not None else _default_output(Path("graphdbg_dumps"))
    before = dumps_in(dump_dir)
    code = run_captured(list(ctx.args), dump_dir, mode, int(budget_gb * (1 << 30)), redact=redact)
    hint = nothing_captured_hint(mode) if dumps_in(dump_dir) == before else None
    if hint:
        typer.echo(hint, err=True)
    raise typer.Exit(die_like(code))  # a child killed by a signal: re-raised, so our parent sees the same death


@command(epilog=_example("graphdbg extract run.log -o graphs"))
def extract(
    log: Annotated[Path, typer.Argument(help="A log with printed graphs (TORCH_LOGS=graph_code, aot_graphs, print_readable()).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Folder for the graph files (must not hold files of the same "
                                                "names; default ./graphs, never through a link; a link named here is followed).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write the graphs printed in a log as graph files (rankR_G.py) that ls, replay and minify read."""
    from graphdbg.formats.log_graphs import extract_graphs

    chosen = out is not None
    out = out if out is not None else _default_output(Path("graphs"))
    written = extract_graphs(log, out, follow=chosen)
    if as_json:
        _print_json({"log": str(log), "out": str(out), "files": [str(p) for p in written]}, "extract")
    else:
        console.print(f"wrote {len(written)} graph file(s) to {out}: {', '.join(p.name for p in written[:8])}"
                      + (" ..." if len(written) > 8 else "") + f"\nnext: graphdbg ls {out}", highlight=False, soft_wrap=True)
