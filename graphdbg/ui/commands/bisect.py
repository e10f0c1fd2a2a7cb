"""``bisect passes|nodes|envs|ops|ranks``: what broke it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.ui.commands.common import (
    AtolOpt,
    DeviceOpt,
    FailureRateOpt,
    IsolateOpt,
    JsonFlag,
    OpsOpt,
    PassesOpt,
    RtolOpt,
    SeedOpt,
    SwapOpt,
    TimeoutOpt,
    TrustKernelsOpt,
    TrustOpt,
    WithinOpt,
    _bounds,
    _example,
    _inputs_setup,
    _load_with_progress,
    _must_exist,
    _own_backend,
    _progress,
    _recorded_config,
    _report,
    command,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command("passes", epilog=_example("graphdbg bisect passes DUMP --passes mypasses:fuse,mypasses:fold"))
@_recorded_config
def bisect_passes(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    passes: Annotated[str, typer.Option("--passes", "-p", help="The pipeline, in order: package.module:callable[@stage],...")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend the passes feed (default: the dump's own).")] = None,
    device: DeviceOpt = None,
    trust_backend: TrustOpt = False,
    failure_rate: FailureRateOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """The first pass after which the outcome goes bad (and, for a pattern pass, which replacement)."""
    from graphdbg.minify import bisect_passes as run

    d = _load_with_progress(dump, "bisect", quiet=as_json)
    backend = backend or _own_backend(d, dump, trust_backend, "bisect passes")
    case = d.case(device)
    with _progress(f"bisect passes: {len(passes.split(','))} passes", quiet=as_json):
        result = run(case, backend, passes, failure_rate=failure_rate)
    _report(result, as_json, "bisect-passes")
    raise typer.Exit(result.exit_code)


@command("nodes", epilog=_example("graphdbg bisect nodes fixtures/block_accuracy --trust-backend"))
@_recorded_config
def bisect_nodes(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend whose values are compared with the reference (default: the dump's own).")] = None,
    passes: PassesOpt = None,
    device: DeviceOpt = None,
    rtol: RtolOpt = None,
    atol: AtolOpt = None,
    backward: Annotated[bool, typer.Option("--backward", help="Training: if no forward node diverges, bisect the backward graph.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds before bisect gives up (exit 2).")] = 3 * DEFAULT_TIMEOUT,
    isolate: Annotated[bool, typer.Option("--isolate/--no-isolate", help="Run the graph in a sandboxed child (--no-isolate: in this process, for a graph you trust).")] = True,
    trust_backend: TrustOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """The first node whose value diverges from the reference, with its source line and module."""
    from graphdbg.minify import bisect_nodes as run

    d = _load_with_progress(dump, "bisect", quiet=as_json)
    backend = backend or _own_backend(d, dump, trust_backend, "bisect nodes")
    if backward:
        from graphdbg.minify.bisect_backward import bisect_training_nodes as run  # noqa: F811
    from graphdbg.execution.isolation import deadline

    opts = ReplayOptions(rtol=rtol, atol=atol, device=device)
    if isolate:  # the graph runs in a sandboxed child, ended (exit 2) past the timeout
        from graphdbg.execution.worker_tasks import sandboxed_bisect_nodes

        with _progress(f"bisect nodes: {d.node_count} nodes", quiet=as_json):
            result = sandboxed_bisect_nodes(d, backend, passes, opts, timeout=timeout, backward=backward, trust=trust_backend)
        _report(result, as_json, "bisect-nodes")
        raise typer.Exit(result.exit_code)
    case = d.case(device)
    with deadline(timeout, "bisect nodes"), _progress(f"bisect nodes: {len(case.gm.graph.nodes)} nodes", quiet=as_json):
        result = run(case, backend, passes, opts, **({"trust": trust_backend} if backward else {}))
    _report(result, as_json, "bisect-nodes")
    raise typer.Exit(result.exit_code)


@command("envs", epilog=_example("graphdbg bisect envs DUMP --python /venvs/torch-2.11/bin/python --python /venvs/torch-2.13/bin/python"))
@_recorded_config
def bisect_envs(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    python: Annotated[Optional[list[str]], typer.Option("--python", help="An interpreter of another environment (another torch, another backend version); repeatable, in order (one: this interpreter first). Without: bisect the recorded settings, flags and environment variables that differ from now.")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="The backend (default: the dump's own).")] = None,
    device: DeviceOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    trust_backend: TrustOpt = False,
    failure_rate: FailureRateOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """The environment whose outcome first differs from the first's, and what differs (exit 1 when one is named)."""
    _must_exist(dump)
    from graphdbg.minify.bisect_envs import bisect_envs as run

    d = _load_with_progress(dump, "bisect", quiet=as_json)
    backend = backend or _own_backend(d, dump, trust_backend, "bisect envs")
    what = f"{len(python)} interpreters" if python else "the settings that differ from the capture"
    with _progress(f"bisect envs: {what}", quiet=as_json):
        result = run(d, backend, python, ReplayOptions(device=device, timeout=timeout), failure_rate=failure_rate)
    _report(result, as_json, "bisect-envs")
    raise typer.Exit(result.exit_code)


@command("ops", epilog=_example("graphdbg bisect ops DUMP --ops mymodel.kernels"))
def bisect_ops(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    swap: SwapOpt = None,
    within: WithinOpt = None,
    device: DeviceOpt = None,
    ops: OpsOpt = None,
    seed: SeedOpt = None,
    trust_kernels: TrustKernelsOpt = False,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    as_json: JsonFlag = False,
) -> None:
    """The custom op whose swap for its reference (built-in, or --swap) moves the outputs most
    toward the all-reference graph. Exit 1 when one is named (none while the captured graph is
    within the --within bounds of the all-reference graph)."""
    _must_exist(dump)
    from graphdbg.minify.bisect_ops import bisect_ops_dump

    bounds = _bounds(within, swap, needs_swap=False)  # bisect ops swaps the built-ins it finds too
    _inputs_setup(ops, seed)
    d = _load_with_progress(dump, "bisect", quiet=as_json)
    with _progress("bisect ops: each op with a reference, swapped alone", quiet=as_json):
        result = bisect_ops_dump(d, swap or [], device=device, trust_kernels=trust_kernels, timeout=timeout, isolate=isolate,
                                 within=bounds)
    _report(result, as_json, "bisect-ops")
    raise typer.Exit(result.exit_code)


@command("ranks", epilog=_example("graphdbg bisect ranks dumps"))
def bisect_ranks(path: Annotated[Path, typer.Argument(help="A folder of rank dumps, or of printed graphs (rank<R>_<G>.py).")],
                 graph: Annotated[Optional[str], typer.Option("--graph", help="Printed graphs: only this graph (e.g. 9).")] = None,
                 as_json: JsonFlag = False) -> None:
    """Which ranks' graphs, inputs or errors differ from the others, and how."""
    from graphdbg.minify import bisect_ranks as run

    with _progress("bisect ranks", quiet=as_json):
        result = run(path, graph=graph)
    _report(result, as_json, "bisect-ranks")
    raise typer.Exit(result.exit_code)
