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
OpsOpt = Annotated[Optional[str], typer.Option("--ops", help="Comma-separated modules defining real implementations of custom ops (instead of stand-ins).")]
LogOpt = Annotated[Optional[Path], typer.Option("--log", help="The run's log, for graph files that record no failure (default: log.txt or *.log beside them).")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Seed for inputs synthesised from annotations (printed graphs).")]


def _inputs_setup(ops: str | None, seed: int | None = None) -> None:
    """--ops and --seed reach isolated children through the environment."""
    import os

    if ops:
        from graphdbg.rebuild.stand_ins import register_ops

        register_ops([m.strip() for m in ops.split(",") if m.strip()])
    if seed is not None:
        os.environ["GRAPHDBG_SEED"] = str(seed)


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
def ls(path: Annotated[Path, typer.Argument(help="A dump, or a folder of dumps or printed graphs.")], as_json: JsonFlag = False,
       ops: OpsOpt = None, log: LogOpt = None) -> None:
    """List dumps under PATH; identical failures on several ranks are one row."""
    from graphdbg.listing import list_dumps

    from graphdbg.render import listing_table

    _inputs_setup(ops)

    listing = list_dumps(path, log=log)
    if as_json:
        _print_json(listing.to_json())
    else:
        console.print(listing_table(listing.groups, str(listing.root)))
        if listing.logs:
            from graphdbg.render import log_notes

            console.print(log_notes(listing.logs, str(listing.root)))
    for p in listing.problems:
        Console(stderr=True).print(f"graphdbg: skipped {p['error']}", highlight=False, soft_wrap=True)
    if listing.problems:
        raise typer.Exit(2)


@app.command()
def show(dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")], as_json: JsonFlag = False,
         ops: OpsOpt = None, log: LogOpt = None) -> None:
    """Show a dump: what failed, the graph with its source lines, and its inputs."""
    from graphdbg.listing import load_with_log, summary_row
    from graphdbg.render import show as render_show

    _inputs_setup(ops)
    d = load_with_log(dump, log)
    if as_json:
        _print_json({**summary_row(d), "nodes_table": d.nodes().to_dict(orient="records"),
                     "inputs_table": d.inputs_table().to_dict(orient="records")})
        return
    console.print(render_show(d))


PassesOpt = Annotated[Optional[str], typer.Option("--passes", "-p", help="Comma-separated package.module:callable FX passes; suffix @post_grad to run one inside Inductor.")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", "-d", help="cpu, cuda, cuda:N (default: the capture device if present, else cpu).")]
IsolateOpt = Annotated[bool, typer.Option("--isolate/--no-isolate", help="Run in a child process, so a segfault or hang becomes an outcome.")]
TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", help="Seconds before an isolated replay counts as a timeout.")]


@app.command()
def replay(
    dump: Annotated[Path, typer.Argument(help="A dump folder, a folder of rank dumps (--all-ranks), or a graph file.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="eager, aot_eager, inductor, thunder, any registered backend, or package.module:callable (default: the dump's own backend).")] = None,
    passes: PassesOpt = None,
    device: DeviceOpt = None,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = None,
    direct: Annotated[bool, typer.Option("--direct", help="Call backend(gm, inputs) on the dumped graph instead of re-tracing it with torch.compile.")] = False,
    accuracy: Annotated[bool, typer.Option("--accuracy/--no-accuracy", help="Compare outputs with eager (float64 where possible).")] = True,
    rtol: Annotated[Optional[float], typer.Option(help="Relative tolerance (default: by dtype).")] = None,
    atol: Annotated[Optional[float], typer.Option(help="Absolute tolerance (default: by dtype).")] = None,
    all_ranks: Annotated[bool, typer.Option("--all-ranks", help="Replay every rank's dump under DUMP at once, with real collectives.")] = False,
    nproc: Annotated[Optional[int], typer.Option("--nproc", help="Rank processes on this node for --all-ranks (default: world size / --nnodes).")] = None,
    graph: Annotated[Optional[str], typer.Option("--graph", help="With --all-ranks: which graph (e.g. g0-compile_error, or 9 for rank*_9.py) when there are several.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="With --all-ranks: GPUs to spread the ranks over (default: all); ranks share them.")] = None,
    pg_backend: Annotated[Optional[str], typer.Option("--pg-backend", help="With --all-ranks: gloo or nccl (default: nccl with one GPU per rank, else gloo).")] = None,
    max_memory_gb: Annotated[Optional[float], typer.Option("--max-memory-gb", help="With --all-ranks: GiB of inputs each device may hold (default: its free memory).")] = None,
    nnodes: Annotated[int, typer.Option("--nnodes", help="With --all-ranks: nodes taking part (run the same command on each).")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", help="With --nnodes: this node's index.")] = 0,
    master_addr: Annotated[Optional[str], typer.Option("--master-addr", help="With --nnodes: host of node 0.")] = None,
    master_port: Annotated[Optional[int], typer.Option("--master-port", help="With --nnodes: port on node 0 (default 29500).")] = None,
    ops: OpsOpt = None,
    seed: SeedOpt = None,
    backward: Annotated[bool, typer.Option("--backward", help="Training: run the forward, then the backward with recorded (else seeded) tangents; compare gradients too.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Replay a dump under a backend; exit 0 on pass, 1 on a reproduced failure, 2 if it can't run."""
    import graphdbg
    from graphdbg.replay.run import replay_dump

    _inputs_setup(ops, seed)
    if all_ranks:
        from graphdbg.replay.world import replay_world

        world = replay_world(dump, backend, passes, graph=graph, nproc=nproc, device=device, timeout=timeout or 300.0,
                             gpus=gpus, pg_backend=pg_backend, nnodes=nnodes, node_rank=node_rank, master_addr=master_addr,
                             master_port=master_port, max_memory=int(max_memory_gb * (1 << 30)) if max_memory_gb is not None else None,
                             announce=lambda line: Console(stderr=True).print(f"graphdbg: {line}", highlight=False, soft_wrap=True, markup=False),
                             direct=direct, accuracy=accuracy, rtol=rtol, atol=atol)
        if as_json:
            _print_json(world.to_dict())
        else:
            console.print(world)
        raise typer.Exit(world.exit_code)
    d = graphdbg.load(dump)
    outcome = replay_dump(d, backend or d.backend, passes, device=device, isolate=isolate, timeout=timeout, direct=direct,
                          accuracy=accuracy, rtol=rtol, atol=atol, **({"backward": True} if backward else {}))
    if as_json:
        _print_json({"dump": str(d.path), "reproduces": outcome.reproduces(d), **outcome.to_dict()})
    else:
        console.print(outcome)
        if outcome.failed:
            same = "the same failure as captured" if outcome.reproduces(d) else f"captured was: {d.signature or d.failure_kind}"
            console.print(f"[dim]{same}[/]")
    raise typer.Exit(replay_exit_code(d, outcome))


DIFFERENT_FAILURE = 4  # it failed, but not the way the dump recorded: not "the bug is still there"


def replay_exit_code(dump: object, outcome: object) -> int:
    """0 pass, 1 the captured failure again (any failure, for a dump that recorded none), 4 a
    different failure, 2/timeout as the Outcome says."""
    code = outcome.exit_code
    recorded = dump.failure_kind in ("compile_error", "runtime_error", "accuracy", "crash")
    if code == 1 and recorded and not outcome.reproduces(dump):
        return DIFFERENT_FAILURE
    return code


@app.command()
def compare(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    backends: Annotated[str, typer.Option("--backends", help="Comma-separated backends.")] = "eager,aot_eager,inductor",
    device: DeviceOpt = None,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = None,
    ops: OpsOpt = None,
    seed: SeedOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay a dump under several backends; one row per backend. Exit 1 if any fails."""
    import graphdbg
    from graphdbg.render import compare_table

    _inputs_setup(ops, seed)
    df = graphdbg.compare(graphdbg.load(dump), [b.strip() for b in backends.split(",") if b.strip()],
                          device=device, isolate=isolate, timeout=timeout)
    if as_json:
        _print_json({"dump": str(dump), "rows": df.to_dict(orient="records")})
    else:
        console.print(compare_table(df))
    raise typer.Exit(0 if (df.status == "pass").all() else 1)


@app.command()
def minify(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="The backend that fails (default: the dump's own).")] = None,
    passes: PassesOpt = None,
    accuracy: Annotated[Optional[bool], typer.Option("--accuracy/--no-accuracy", help="Keep a numeric mismatch (default: what the dump recorded).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Candidates tried at once (isolated).")] = 1,
    isolate: Annotated[Optional[bool], typer.Option("--isolate/--no-isolate", help="Try candidates in child processes (for backends that may crash).")] = None,
    timeout: TimeoutOpt = None,
    device: DeviceOpt = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Where the smallest dump and repro.py go.")] = None,
    any_failure: Annotated[bool, typer.Option("--any-failure", help="Shrink whatever failure the backend shows, not only the captured one.")] = False,
    ops: OpsOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Shrink a failing graph to the smallest one that fails the same way; writes a dump and repro.py."""
    from graphdbg.minify import minify as run_minify

    _inputs_setup(ops)
    out = out or Path(f"{dump.name.removesuffix('.py')}-min")
    result = run_minify(dump, backend, passes, accuracy=accuracy, jobs=jobs, isolate=isolate, timeout=timeout,
                        device=device, out=out, progress=not as_json, any_failure=any_failure)
    if as_json:
        _print_json(result.to_dict())
    else:
        console.print(result)


bisect_app = typer.Typer(help="Find what broke it: which pass, which node, which rank.", no_args_is_help=True)
app.add_typer(bisect_app, name="bisect")


@bisect_app.command("passes")
def bisect_passes(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    passes: Annotated[str, typer.Option("--passes", "-p", help="The pipeline, in order: package.module:callable[@stage],...")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend the passes feed.")] = "eager",
    device: DeviceOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """The first pass after which the outcome goes bad (and, for a pattern pass, which replacement)."""
    import graphdbg
    from graphdbg.minify import bisect_passes as run

    result = run(graphdbg.load(dump).case(device), backend, passes)
    _report(result, as_json)
    raise typer.Exit(0 if result.culprit is None else 1)


@bisect_app.command("nodes")
def bisect_nodes(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend whose values are compared with the reference.")] = "eager",
    passes: PassesOpt = None,
    device: DeviceOpt = None,
    rtol: Annotated[Optional[float], typer.Option(help="Relative tolerance (default: by dtype).")] = None,
    atol: Annotated[Optional[float], typer.Option(help="Absolute tolerance (default: by dtype).")] = None,
    backward: Annotated[bool, typer.Option("--backward", help="Training: if no forward node diverges, bisect the backward graph.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The first node whose value diverges from the reference, with its source line and module."""
    import graphdbg
    from graphdbg.minify import bisect_nodes as run

    if backward:
        from graphdbg.minify.backward import bisect_training_nodes as run  # noqa: F811
    result = run(graphdbg.load(dump).case(device), backend, passes, rtol=rtol, atol=atol)
    _report(result, as_json)
    raise typer.Exit(0 if result.node is None else 1)


@bisect_app.command("ranks")
def bisect_ranks(path: Annotated[Path, typer.Argument(help="A folder of rank dumps, or of printed graphs (rank<R>_<G>.py).")],
                 graph: Annotated[Optional[str], typer.Option("--graph", help="Printed graphs: only this graph (e.g. 9).")] = None,
                 as_json: JsonFlag = False) -> None:
    """Which ranks' graphs, inputs or errors differ from the others, and how."""
    from graphdbg.minify import bisect_ranks as run

    result = run(path, graph=graph)
    _report(result, as_json)
    raise typer.Exit(1 if result.odd else 0)


@app.command("export-test")
def export_test(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The test file to write, e.g. tests/test_gelu_lowering.py.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend under test (default: the dump's own).")] = None,
    passes: PassesOpt = None,
) -> None:
    """Write a pytest regression test from a dump, with its data next to it; it fails while the bug is there."""
    import graphdbg
    from graphdbg.minify import export_test as run

    path = run(graphdbg.load(dump), out, backend=backend, passes=passes)
    console.print(f"wrote {path}")


def _report(result: object, as_json: bool) -> None:
    if as_json:
        _print_json(result.to_dict())
    elif hasattr(result, "__rich__"):
        console.print(result)
    elif hasattr(result, "summary"):
        console.print(result.summary(), highlight=False)
    else:
        _print_json(result.to_dict())


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
