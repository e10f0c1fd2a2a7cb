"""``ls``, ``show``, ``report`` and ``schema``: what is there, without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.ui.commands.common import (
    JsonFlag,
    LogOpt,
    OpsOpt,
    _example,
    _inputs_setup,
    _must_exist,
    _print_json,
    _progress,
    command,
    console,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command("ls", epilog=_example("graphdbg ls dumps"))
def ls(path: Annotated[Path, typer.Argument(help="A dump, or a folder of dumps or printed graphs.")], as_json: JsonFlag = False,
       ops: OpsOpt = None, log: LogOpt = None,
       failed: Annotated[bool, typer.Option("--failed", help="Only dumps that record a failure.")] = False,
       kind: Annotated[Optional[str], typer.Option("--kind", help="Only dumps of this failure kind (compile_error, accuracy, ...).")] = None,
       strict: Annotated[bool, typer.Option("--strict", help="Exit 2 when a file can't be read (for CI).")] = False,
       no_cache: Annotated[bool, typer.Option("--no-cache", help="Read every file again (the cache is $GRAPHDBG_CACHE_DIR or ~/.cache/graphdbg).")] = False) -> None:
    """List dumps under PATH, failures first; identical failures on several ranks are one row.

    Files that can't be read are listed as problems (exit 0; --strict: exit 2)."""
    from graphdbg.ui.ls_command import run_ls

    _must_exist(path)
    _inputs_setup(ops)
    raise typer.Exit(run_ls(path, as_json=as_json, log=log, failed=failed, kind=kind, strict=strict, no_cache=no_cache))


@command(epilog=_example("graphdbg show dumps/rank0/g0-runtime_error-3b0e0256"))
def show(dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")], as_json: JsonFlag = False,
         ops: OpsOpt = None, log: LogOpt = None) -> None:
    """Show a dump: what failed, the graph with its source lines, and its inputs."""
    _must_exist(dump)
    from graphdbg.listing import load_with_log
    from graphdbg.ui.render import show as render_show

    _inputs_setup(ops)
    d = load_with_log(dump, log)
    if as_json:
        _print_json({**d.summary(), **{k: d.manifest_data[k] for k in ("parent", "children", "config", "backend_source", "backend_recipe")
                                          if k in d.manifest_data},
                     "kernels": {k: d.manifest_data.get(k) or [] for k in ("custom_ops", "triton_kernels")},
                     "nodes_table": d.nodes().to_dict(orient="records"),
                     "inputs_table": d.inputs_table().to_dict(orient="records")}, "show")
        return
    console.print(render_show(d), crop=False)


@command(epilog=_example("graphdbg report dumps -o report.html"))
def report(
    path: Annotated[Path, typer.Argument(help="A dump folder, a folder of dumps or printed graphs, or a minify output.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
    ops: OpsOpt = None,
) -> None:
    """Write one self-contained HTML page (no network) about the failures under PATH."""
    _must_exist(path)
    from graphdbg.ui.report import write_report

    _inputs_setup(ops)
    with _progress(f"report: reading {path}"):
        written = write_report(path, out)
    console.print(f"wrote {written}", highlight=False, soft_wrap=True)


@command(epilog=_example("graphdbg schema replay"))
def schema(name: Annotated[Optional[str], typer.Argument(help="manifest (default), or a command's --json output: "
                                                               "ls, show, replay, compare, minify, bisect-passes, ...")] = None,
           list_names: Annotated[bool, typer.Option("--list", help="Print the schema names, one a line.")] = False) -> None:
    """Print a JSON Schema: manifest.json's, or that of a command's --json output."""
    from graphdbg.ui.schemas import OUTPUT_SCHEMAS, output_schema

    if list_names:
        console.print("\n".join(["manifest", *OUTPUT_SCHEMAS]), highlight=False)
        return
    _print_json(output_schema(name or "manifest"))
