"""``replay`` and ``compare``: a dump run under one backend, or several."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.ui.commands.common import (
    DEFAULT_TOTAL_TIMEOUT,
    AsCapturedOpt,
    AtolOpt,
    DeviceOpt,
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
    _environment,
    _environment_json,
    _example,
    _inputs_setup,
    _ints,
    _load_with_progress,
    _must_exist,
    _note,
    _own_backend,
    _print_json,
    _progress,
    _recorded_config,
    _report,
    _steps_progress,
    _with_code_differences,
    _world_backend,
    command,
    console,
)
from graphdbg.ui.render import safe_console as Console  # gate: no markup read, control characters shown

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command(epilog=_example("graphdbg replay fixtures/block_runtime_error --trust-backend"))
@_recorded_config
def replay(
    dump: Annotated[Path, typer.Argument(help="A dump folder, a folder of rank dumps (--all-ranks), or a graph file.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="eager, aot_eager, inductor, thunder, any registered backend, or package.module:callable (default: the dump's own backend).")] = None,
    passes: PassesOpt = None,
    device: DeviceOpt = None,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    direct: Annotated[bool, typer.Option("--direct", help="Call backend(gm, inputs) on the dumped graph instead of re-tracing it with torch.compile.")] = False,
    accuracy: Annotated[bool, typer.Option("--accuracy/--no-accuracy", help="Compare outputs with eager (float64 where possible).")] = True,
    rtol: RtolOpt = None,
    atol: AtolOpt = None,
    all_ranks: Annotated[bool, typer.Option("--all-ranks", help="Replay every rank's dump under DUMP at once, with real collectives.")] = False,
    nproc: Annotated[Optional[int], typer.Option("--nproc", parser=_ints("--nproc", 1, 4096), help="Rank processes on this node for --all-ranks (default: world size / --nnodes).")] = None,
    graph: Annotated[Optional[str], typer.Option("--graph", help="With --all-ranks: which graph (e.g. g0-compile_error, or 9 for rank*_9.py) when there are several.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", parser=_ints("--gpus", 1, 4096), help="With --all-ranks: GPUs to spread the ranks over (default: all); ranks share them.")] = None,
    pg_backend: Annotated[Optional[str], typer.Option("--pg-backend", help="With --all-ranks: gloo or nccl (default: nccl with one GPU per rank, else gloo).")] = None,
    max_memory_gb: Annotated[Optional[float], typer.Option("--max-memory-gb", help="With --all-ranks: GiB of inputs each device may hold (default: its free memory).")] = None,
    nnodes: Annotated[int, typer.Option("--nnodes", parser=_ints("--nnodes", 1, 4096), help="With --all-ranks: nodes taking part (run the same command on each).")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", parser=_ints("--node-rank", 0, 4095), help="With --nnodes: this node's index.")] = 0,
    master_addr: Annotated[Optional[str], typer.Option("--master-addr", help="With --nnodes: host of node 0.")] = None,
    master_port: Annotated[Optional[int], typer.Option("--master-port", parser=_ints("--master-port", 1, 65535), help="With --nnodes: port on node 0 (default 29500).")] = None,
    ops: OpsOpt = None,
    seed: SeedOpt = None,
    backward: Annotated[Optional[bool], typer.Option("--backward/--no-backward", help="Training: run the forward, then the backward with recorded (else seeded) tangents; compare gradients too (default: when the dump is the forward of a backward failure).", show_default=False)] = None,
    max_input_gb: Annotated[Optional[float], typer.Option("--max-input-gb", help="Refuse (exit 2) inputs bigger than this many GiB (default: the device's free memory).")] = None,
    trust_backend: TrustOpt = False,
    trust_kernels: TrustKernelsOpt = False,
    as_captured: AsCapturedOpt = False,
    repeat: Annotated[int, typer.Option("--repeat", parser=_ints("--repeat", 1, 1_000_000), help="Replay N times; report the failure rate with a 95% interval and each distinct failure (one after another in one child; a child each after a run that kills it; this process with --no-isolate).")] = 1,
    total_timeout: Annotated[float, typer.Option("--total-timeout", min=1.0, help="With --repeat: seconds for all the runs; past it no run starts and the rate so far is reported (each run has its own --timeout too).")] = DEFAULT_TOTAL_TIMEOUT,
    as_json: JsonFlag = False,
) -> None:
    """Replay a dump under a backend; exit 0 on pass, 1 on the captured failure, 4 on another failure, 2 if it can't run."""
    _must_exist(dump)
    from graphdbg.execution.entry import replay_dump_runs

    _inputs_setup(ops, seed)
    opts = ReplayOptions(passes=passes, device=device, isolate=isolate, timeout=timeout, direct=direct, accuracy=accuracy,
                         rtol=rtol, atol=atol, backward=backward, max_input_gb=max_input_gb, trust_kernels=trust_kernels)
    if all_ranks:
        if trust_kernels:  # a rank process talks to its peers: it is not the sandboxed child a dump's kernel runs in
            raise GraphdbgError("--trust-kernels runs a dump's kernel source only in the sandboxed replay child, "
                                "not in the rank processes of --all-ranks; replay one rank's dump with it")
        backend = backend or _world_backend(dump, trust_backend, graph)
        from graphdbg.execution.world import replay_world

        world = replay_world(dump, backend, opts, graph=graph, nproc=nproc,
                             gpus=gpus, pg_backend=pg_backend, nnodes=nnodes, node_rank=node_rank, master_addr=master_addr,
                             master_port=master_port, max_memory=int(max_memory_gb * (1 << 30)) if max_memory_gb is not None else None,
                             announce=lambda line: Console(stderr=True).print(f"graphdbg: {line}", highlight=False, soft_wrap=True, markup=False))
        if as_json:
            _print_json(world.to_dict(), "replay-world")
        else:
            console.print(world)
        raise typer.Exit(world.exit_code)
    d = _load_with_progress(dump, "replay", quiet=as_json)
    if backend is None:
        from graphdbg.backends.resolve import dump_backend

        backend = dump_backend(d, trust_backend, "replay")
    from graphdbg.backends.recipe import backend_label

    found, left = _environment(d, as_captured, as_json)
    with _progress(f"replay: {backend_label(backend)}: compile, run, compare with the reference", quiet=as_json):
        outcomes, how = replay_dump_runs(d, backend, opts, repeat, total=total_timeout)
    raise typer.Exit(_replay_shown(d, outcomes, how, found, left, as_json, repeat > 1))


def _replay_shown(d: object, outcomes: list, how: str, found: list, left: list[str], as_json: bool, repeated_: bool = False) -> int:
    """Print a replay's verdict (of the run that shows the failure, with the rate of several);
    its exit code."""
    from graphdbg.judge.flaky import Repeated

    outcome = Repeated.shown(outcomes, d)
    repeated = Repeated.of(outcomes, d, how) if len(outcomes) > 1 or repeated_ else None  # one run done of --repeat N: its rate too
    found = _with_code_differences(found, d, outcome)
    if as_json:
        _print_json({"dump": str(d.path), "reproduces": outcome.reproduces(d), **outcome.to_dict(),
                     **_environment_json(found, left), **({"repeat": repeated.to_dict()} if repeated else {})}, "replay")
    else:
        from graphdbg.ui.render import outcome_panel

        console.print(outcome_panel(outcome, d, found), crop=False)
        if repeated:
            console.print(repeated.line(), highlight=False, soft_wrap=True)
    return outcome.exit_code_for(d)


@command(epilog=_example("graphdbg compare fixtures/block_accuracy --backends eager,aot_eager"))
@_recorded_config
def compare(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    backends: Annotated[Optional[str], typer.Option("--backends", help="Comma-separated backends; 'dump' is the dump's own (default: eager, aot_eager, inductor and the dump's own).")] = None,
    device: DeviceOpt = None,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    ops: OpsOpt = None,
    seed: SeedOpt = None,
    trust_backend: TrustOpt = False,
    swap: SwapOpt = None,
    within: WithinOpt = None,
    trust_kernels: TrustKernelsOpt = False,
    as_captured: AsCapturedOpt = False,
    as_json: JsonFlag = False,
) -> None:
    """Replay a dump under several backends; one row per backend. Exit 1 if any fails.

    With --swap OP=REFERENCE: run the graph as captured and with every call of OP replaced by
    REFERENCE; one row per output, how far it moves. Exit 1 if any moves beyond tolerance (or
    outside the --within bounds)."""
    _must_exist(dump)
    bounds = _bounds(within, swap)
    if swap:
        raise typer.Exit(_compare_swap(dump, swap, device, ops, seed, as_json, trust_kernels, timeout, isolate, bounds))
    from graphdbg.backends.recipe import backend_label
    from graphdbg.execution.entry import (
        compare_exit_code,
        compare_outcomes,
        compared_backends,
        outcomes_table,
        own_backend_missing,
    )
    from graphdbg.ui.render import compare_table

    _inputs_setup(ops, seed)
    d = _load_with_progress(dump, "compare", quiet=as_json)
    names, left_out = compared_backends(backends, lambda: _own_backend(d, dump, trust_backend, "compare"))
    if left_out is not None:
        _note(f"graphdbg: left out {left_out}")
    found, left = _environment(d, as_captured, as_json)
    labels = [f"compare: {backend_label(name)} ({i}/{len(names)})" for i, name in enumerate(names, 1)]
    with _steps_progress(labels, quiet=as_json) as started:  # each backend its own step, so a slow one shows progress
        outcomes = compare_outcomes(d, names, ReplayOptions(device=device, isolate=isolate, timeout=timeout,
                                                            trust_kernels=trust_kernels), started)
    df = outcomes_table(d, outcomes)
    missing = own_backend_missing(d, names)
    if as_json:
        _print_json({"dump": str(dump), "rows": df.to_dict(orient="records"), "own_backend_missing": missing,
                     **_environment_json(found, left)}, "compare")
    else:
        from graphdbg.ui.render import PlainWhenPiped

        console.print(PlainWhenPiped(compare_table(df)), crop=False)
        if missing:
            console.print(f"note: {missing}", style="yellow", highlight=False, soft_wrap=True)
    raise typer.Exit(compare_exit_code(outcomes))


def _compare_swap(dump: Path, swap: list[str], device: str | None, ops: str | None, seed: int | None, as_json: bool,
                  trust_kernels: bool, timeout: float | None, isolate: bool, bounds: list | None = None) -> int:
    from graphdbg.replay.compare_swap import swap_dump

    _inputs_setup(ops, seed)
    d = _load_with_progress(dump, "compare", quiet=as_json)
    with _progress("compare: the graph as captured, and with the swaps", quiet=as_json):
        report = swap_dump(d, swap, device=device, trust_kernels=trust_kernels, timeout=timeout, isolate=isolate,
                           within=bounds)
    _report(report, as_json, "compare-swap")
    return report.exit_code
