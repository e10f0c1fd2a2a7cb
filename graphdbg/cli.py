"""The graphdbg command line: a thin layer over the Python API.

Every command prints with rich, or JSON with ``--json``. Exit codes: 0 fine, 1 a failure
was reproduced (replay), 2 the input could not be used (one line on stderr says why).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from graphdbg.errors import GraphdbgError

app = typer.Typer(
    name="graphdbg",
    help="Capture the FX graphs a torch.compile backend fails on, and replay them offline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (stable; see README) instead of tables.")]


def _print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def capture(
    ctx: typer.Context,
    dump_dir: Annotated[Path, typer.Option("--dump-dir", "-o", help="Where dumps go (rank<R>/<id>/ below it).")] = Path("graphdbg_dumps"),
    mode: Annotated[str, typer.Option(help="error | accuracy | always")] = "error",
    budget_gb: Annotated[float, typer.Option("--budget-gb", help="Input bytes stored per graph, in GiB.")] = 4.0,
) -> None:
    """Run a command with every torch.compile backend in it wrapped: graphdbg capture -- python train.py"""
    from graphdbg.capture.launch import run_captured

    code = run_captured(list(ctx.args), dump_dir, mode, int(budget_gb * (1 << 30)))
    raise typer.Exit(code if code >= 0 else 128 - code)


@app.command("ls")
def ls(path: Annotated[Path, typer.Argument(help="A dump, or a folder of dumps.")], as_json: JsonFlag = False) -> None:
    """List dumps under PATH; identical failures on several ranks are one row."""
    from graphdbg.listing import list_dumps
    from graphdbg.render import listing_table

    listing = list_dumps(path)
    if as_json:
        _print_json(listing.to_json())
    else:
        console.print(listing_table(listing.groups, str(listing.root)))
    for p in listing.problems:
        Console(stderr=True).print(f"graphdbg: skipped {p['error']}", highlight=False, soft_wrap=True)
    if listing.problems:
        raise typer.Exit(2)


@app.command()
def show(dump: Annotated[Path, typer.Argument(help="A dump folder.")], as_json: JsonFlag = False) -> None:
    """Show a dump: what failed, the graph with its source lines, and its inputs."""
    import graphdbg
    from graphdbg.render import show as render_show

    d = graphdbg.load(dump)
    if as_json:
        _print_json({**d.summary(), "nodes_table": d.nodes().to_dict(orient="records"),
                     "inputs_table": d.inputs_table().to_dict(orient="records")})
        return
    console.print(render_show(d))


def main() -> None:
    """Entry point: user errors become one line and exit code 2, never a traceback.

    An unexpected exception is a graphdbg bug: one line and exit code 3, with the traceback
    only when GRAPHDBG_DEBUG=1.
    """
    import os

    try:
        app()  # standalone: typer/click print usage errors themselves and exit 2
    except GraphdbgError as e:
        _fail(str(e), e.exit_code)
    except Exception as e:
        if os.environ.get("GRAPHDBG_DEBUG"):
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        _fail(f"internal error: {type(e).__name__}: {first} (set GRAPHDBG_DEBUG=1 for the traceback)", 3)


def _fail(message: str, code: int) -> None:
    Console(stderr=True).print(f"graphdbg: error: {message}", highlight=False, soft_wrap=True, markup=False)
    sys.exit(code)


if __name__ == "__main__":
    main()
