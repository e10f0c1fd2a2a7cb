"""The graphdbg command line: a thin layer over the Python API.

Every command prints with rich, or JSON with ``--json``. Exit codes: 0 fine, 1 a failure
was reproduced (replay), 2 the input could not be used (one line on stderr says why).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, NoReturn, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.strict_json import json_text
from graphdbg.ui.render import safe_console as Console  # gate: no markup read, control characters shown

# Each command imports the layers it uses inside its function: this module loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

def _example(command: str) -> str:
    """A command's example, shown at the end of its --help."""
    return f"[bold]Example:[/] [cyan]{command}[/]"


app = typer.Typer(
    name="graphdbg",
    help="Capture the FX graphs a torch.compile backend fails on, and replay them offline.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_example("graphdbg capture -- python train.py"),
)


class _Stdout:
    """stdout's Console, made at each use: rich reads COLUMNS and the terminal when a Console is
    made, and one made at import would keep the width of whoever imported the CLI first."""

    def __getattr__(self, name: str):
        return getattr(Console(), name)


console = _Stdout()


def _version(value: bool) -> None:
    if value:
        from graphdbg._version import __version__

        typer.echo(f"graphdbg {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    pass


class _Range:
    """An integer option's parser with its range: a value outside it, or no whole number, is one
    line and exit 2 (a GraphdbgError, through ``exit_for``), never a usage panel or an
    OverflowError later. Its ``__name__`` is what ``--help`` shows for the value."""

    def __init__(self, name: str, low: int, high: int):
        self.option, self.low, self.high = name, low, high
        self.__name__ = f"{low}..{high}"

    def __call__(self, value: Any) -> int:
        try:
            number = value if isinstance(value, int) else int(str(value).strip(), 10)
        except ValueError:
            number = None
        if number is None or not self.low <= number <= self.high:
            raise GraphdbgError(f"{self.option} {str(value)[:40]}: expected a whole number from {self.low} to {self.high}")
        return number


DEFAULT_TOTAL_TIMEOUT = 3600.0  # seconds all of replay --repeat's runs may take


def _ints(name: str, low: int, high: int) -> _Range:
    """The range of the integer option ``name`` (every one has one: tests/test_security_bounds.py walks them)."""
    return _Range(name, low, high)


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (stable; `graphdbg schema NAME`) instead of tables.", rich_help_panel="Output")]
OpsOpt = Annotated[Optional[str], typer.Option("--ops", help="Comma-separated modules defining real implementations of custom ops (instead of stand-ins).", rich_help_panel="Inputs")]
LogOpt = Annotated[Optional[Path], typer.Option("--log", help="The run's log, for graph files that record no failure (default: log.txt or *.log beside them).", rich_help_panel="Inputs")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", parser=_ints("--seed", -(2**63), 2**64 - 1), help="Seed for inputs synthesised from annotations (printed graphs).", rich_help_panel="Inputs")]


def _inputs_setup(ops: str | None, seed: int | None = None) -> None:
    """--ops and --seed reach isolated children through the environment."""
    import os

    if ops:
        from graphdbg.graph.allow_list import register_ops

        register_ops([m.strip() for m in ops.split(",") if m.strip()])
    if seed is not None:
        os.environ["GRAPHDBG_SEED"] = str(seed)


def _err_console() -> Console:
    return Console(stderr=True)


def _note(message: str) -> None:
    """A line on stderr for people (stdout stays the result, JSON or table)."""
    _err_console().print(message, highlight=False, soft_wrap=True, markup=False)


@contextlib.contextmanager
def _progress(label: str, quiet: bool = False) -> Iterator[None]:
    """A spinner on a terminal; off a terminal (CI logs), a line when each step is done (none
    on an error, which stays the one line on stderr)."""
    err = _err_console()
    if quiet:
        yield
    elif err.is_terminal:
        with err.status(label):
            yield
    else:
        started = time.monotonic()
        yield
        _note(f"{label}: done in {time.monotonic() - started:.1f}s")


@contextlib.contextmanager
def _steps_progress(labels: list[str], quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """``_progress`` of steps that another process runs one after another: the function it gives
    is told when step ``i`` starts (it ends the step before)."""
    steps = contextlib.ExitStack()

    def started(i: int) -> None:
        steps.close()
        steps.enter_context(_progress(labels[i], quiet))

    with steps:  # the last step ends with the steps, as an error or not
        yield started


LARGE_GRAPH_BYTES = 1 << 20  # a graph file this big takes seconds to parse: loading it shows progress


def _load_with_progress(path: Path, command: str, quiet: bool = False) -> object:
    """Load a dump; a large printed graph shows progress while it is parsed."""
    from graphdbg.formats import load as load_dump

    large = path.is_file() and path.stat().st_size >= LARGE_GRAPH_BYTES
    with _progress(f"{command}: loading {path.name} ({path.stat().st_size / (1 << 20):.0f} MiB)" if large else "",
                   quiet=quiet or not large):
        return load_dump(path)


def _line_progress(name: str, every_s: float = 5.0) -> Callable[[int, Optional[int], Optional[str]], None]:
    """minify's progress as plain lines, for pipes and CI: every log line, and the count at most
    every ``every_s`` seconds."""
    last = [0.0]

    def report(queries: int, best: Optional[int], line: Optional[str]) -> None:
        now = time.monotonic()
        if line:
            _note(f"{name}: {line}")
        elif now - last[0] >= every_s:
            _note(f"{name}: {queries} queries, best {best if best is not None else '?'} nodes")
        else:
            return
        last[0] = now

    return report


def _print_json(data: object, schema: str | None = None) -> None:
    """The one JSON writer of every ``--json`` (``graphdbg.strict_json``)."""
    sys.stdout.write(json_text(data, schema))


def _must_exist(path: Path) -> None:
    """A missing path is answered at once, before torch is imported."""
    if not os.path.lexists(path):
        raise GraphdbgError(f"{path}: no such file or folder")


def _flag_type(original: Callable[..., object]) -> Callable[..., object]:
    """--help shows no ``<bool>`` type for flags (they take no value)."""

    def display_type_rich(self: object, ctx: object) -> object:
        return None if getattr(self, "is_flag", False) else original(self, ctx)

    return display_type_rich


with contextlib.suppress(ImportError, AttributeError):
    from typer.core import TyperOption

    TyperOption.display_type_rich = _flag_type(TyperOption.display_type_rich)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, epilog=_example("graphdbg capture --dump-dir dumps -- python train.py"))
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


@app.command("ls", epilog=_example("graphdbg ls dumps"))
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


@app.command(epilog=_example("graphdbg show dumps/rank0/g0-runtime_error-3b0e0256"))
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


PassesOpt = Annotated[Optional[str], typer.Option("--passes", "-p", help="Comma-separated package.module:callable FX passes; suffix @post_grad to run one inside Inductor.")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", "-d", help="cpu, cuda, cuda:N (default: the capture device if present, else cpu).")]
IsolateOpt = Annotated[bool, typer.Option("--isolate/--no-isolate", help="Run in a child process, so a segfault or hang becomes an outcome.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds before an isolated replay counts as a timeout.")]
RtolOpt = Annotated[Optional[float], typer.Option("--rtol", help="Relative tolerance (default: by dtype).")]
AtolOpt = Annotated[Optional[float], typer.Option("--atol", help="Absolute tolerance (default: by dtype).")]
TrustOpt = Annotated[bool, typer.Option("--trust-backend", help="Import the module:qualname backend the dump names (code from the dump's author).", rich_help_panel="Backend")]
ConfigOpt = Annotated[Optional[list[str]], typer.Option("--config", help="Override one recorded compiler setting: inductor.KEY=VALUE (dynamo.*, functorch.*); repeatable.", rich_help_panel="Backend")]
NoConfigOpt = Annotated[bool, typer.Option("--no-config", help="Drop the compiler settings recorded in the dump (run with torch's defaults).", rich_help_panel="Backend")]
FailureRateOpt = Annotated[Optional[float], typer.Option("--failure-rate", min=0.001, max=1.0, help="The share of runs the failure shows on (e.g. from replay --repeat; default: the share of calls that failed at capture, else 1): each candidate runs until a sequential test decides whether it keeps the failure.")]
SwapOpt = Annotated[Optional[list[str]], typer.Option("--swap", help="OP=REFERENCE: replace every call of custom op OP (ns::name) by a built-in reference (attention, rms_norm, ...) or your module:function (imported like --ops); repeatable.", rich_help_panel="Inputs")]
WithinOpt = Annotated[Optional[list[str]], typer.Option("--within", help="MEASURE>=X or MEASURE<=X: judge each output against the graph with the swaps by this bound instead of the dtype's tolerance (cosine>=0.9999, rel_l1<=0.01; also rel_l2, max_abs, ulps); repeatable, all must hold.", rich_help_panel="Inputs")]
SelfCheckOpt = Annotated[bool, typer.Option("--self-check/--no-self-check", help="Run what was written once, in a fresh sandboxed interpreter, to check that it shows the captured failure (exit 4 if not); --no-self-check skips that run.")]
AsCapturedOpt = Annotated[bool, typer.Option("--as-captured", help="Restore the captured torch.backends flags, matmul precision, environment variables and thread counts (not versions or the device).", rich_help_panel="Backend")]
TrustKernelsOpt = Annotated[bool, typer.Option("--trust-kernels", help="Run user Triton kernels from the source the dump recorded (code from the dump's author), in the sandboxed replay child.", rich_help_panel="Backend")]
TrustConfigOpt = Annotated[bool, typer.Option("--trust-config", help="Restore every recorded compiler setting, strings included (they can reach a compiler's command line).", rich_help_panel="Backend")]


def _recorded_config(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with --config, --no-config and --trust-config (the recorded compiler settings
    a replay restores), defined here once and listed before --json; they reach isolated children
    through the environment."""

    @functools.wraps(command)
    def run(*args: Any, config: list[str] | None = None, no_config: bool = False, trust_config: bool = False,
            **kwargs: Any) -> None:
        from graphdbg.backends.compiler_config import set_replay_overrides

        set_replay_overrides(config, no_config, trust_config)
        return command(*args, **kwargs)

    params = list(inspect.signature(command, eval_str=True).parameters.values())
    at = next((i for i, p in enumerate(params) if p.name == "as_json"), len(params))
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params[at:at] = [inspect.Parameter("config", kind, default=None, annotation=ConfigOpt),
                     inspect.Parameter("no_config", kind, default=False, annotation=NoConfigOpt),
                     inspect.Parameter("trust_config", kind, default=False, annotation=TrustConfigOpt)]
    run.__signature__ = inspect.signature(command).replace(parameters=params)  # what typer reads
    return run


def _environment(dump: object, as_captured: bool, as_json: bool) -> tuple[list, list[str]]:
    """What differs from the capture (after --as-captured restored what it can), printed before
    the verdict unless --json, where the caller adds it as ``environment_differences``."""
    from graphdbg.judge.environment import recorded

    manifest = getattr(dump, "manifest_data", None)
    if not recorded(manifest) and not as_captured:
        return [], []
    from graphdbg.replay.as_captured import prepare  # torch: only for a dump that recorded an environment

    found, left = prepare(manifest, as_captured)
    if not as_json:
        from graphdbg.ui.render import environment_panel

        panel = environment_panel(found, left)
        if panel is not None:
            console.print(panel, crop=False)
    return found, left


class _manifest_only:
    """A dump's manifest alone (minify loads the rest itself); a graph file has none."""

    def __init__(self, path: Path) -> None:
        from graphdbg.store.manifest import MANIFEST, read_manifest

        self.manifest = read_manifest(path) if (path / MANIFEST).is_file() else None


def _with_code_differences(found: list, dump: object, outcome: object) -> list:
    """``found`` and where the replay's generated code differs from the capture's, ranked (a
    variable the backend read first, then the generated code)."""
    from graphdbg.judge.environment import code_differences, ranked

    return ranked(code_differences(getattr(dump, "manifest_data", None), getattr(outcome, "generated_code", None)) + found)


def _environment_json(found: list, left: list[str]) -> dict:
    return {"environment_differences": [d.to_dict() for d in found], "not_restored": left}


def _own_backend(path: Path, trust: bool, command: str, world_graph: str | None = None) -> str | None:
    """The dump's own backend; code it names is imported only with --trust-backend. For a world
    (``world_graph``: the --graph of --all-ranks), the backend of the graph the world replays."""
    from graphdbg.backends.resolve import dump_backend
    from graphdbg.formats import load as load_dump
    from graphdbg.replay.world import world_dumps
    from graphdbg.store.manifest import find_dumps

    folders = find_dumps(path) if path.is_dir() else []
    if path.is_dir() and not folders:
        return None  # a folder of printed graphs: they record no backend, and replay them as printed (eager)
    if folders and command.endswith("--all-ranks"):
        paths = world_dumps(path, world_graph)[1]
        folders = [paths[min(paths)]]
    return dump_backend(load_dump(folders[0] if folders else path), trust, command, shown_path=path)


@app.command(epilog=_example("graphdbg replay fixtures/block_runtime_error --trust-backend"))
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
    from graphdbg.replay.entry import replay_dump_runs

    _inputs_setup(ops, seed)
    opts = ReplayOptions(passes=passes, device=device, isolate=isolate, timeout=timeout, direct=direct, accuracy=accuracy,
                         rtol=rtol, atol=atol, backward=backward, max_input_gb=max_input_gb, trust_kernels=trust_kernels)
    if all_ranks:
        if trust_kernels:  # a rank process talks to its peers: it is not the sandboxed child a dump's kernel runs in
            raise GraphdbgError("--trust-kernels runs a dump's kernel source only in the sandboxed replay child, "
                                "not in the rank processes of --all-ranks; replay one rank's dump with it")
        backend = backend or _own_backend(dump, trust_backend, "replay --all-ranks", graph)
        from graphdbg.replay.world import replay_world

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
    return replay_exit_code(d, outcome)


DIFFERENT_FAILURE = 4  # it failed, but not the way the dump recorded: not "the bug is still there"


def replay_exit_code(dump: object, outcome: object) -> int:
    """0 pass, 1 the captured failure again (any failure, for a dump that recorded none), 4 a
    different failure, 2/timeout as the Outcome says."""
    code = outcome.exit_code
    recorded = dump.failure_kind in ("compile_error", "runtime_error", "accuracy", "crash")
    if code == 1 and recorded and not outcome.reproduces(dump):
        return DIFFERENT_FAILURE
    return code


@app.command(epilog=_example("graphdbg compare fixtures/block_accuracy --backends eager,aot_eager"))
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
    from graphdbg.replay.entry import compare_outcomes, compared_backends, outcomes_table, own_backend_missing
    from graphdbg.ui.render import compare_table

    _inputs_setup(ops, seed)
    d = _load_with_progress(dump, "compare", quiet=as_json)
    names, left_out = compared_backends(backends, lambda: _own_backend(dump, trust_backend, "compare"))
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
    raise typer.Exit(0 if (df.status == "pass").all() else 1)


def _compare_swap(dump: Path, swap: list[str], device: str | None, ops: str | None, seed: int | None, as_json: bool,
                  trust_kernels: bool, timeout: float | None, isolate: bool, bounds: list | None = None) -> int:
    from graphdbg.replay.swap import swap_dump

    _inputs_setup(ops, seed)
    d = _load_with_progress(dump, "compare", quiet=as_json)
    with _progress("compare: the graph as captured, and with the swaps", quiet=as_json):
        report = swap_dump(d, swap, device=device, trust_kernels=trust_kernels, timeout=timeout, isolate=isolate,
                           within=bounds)
    _report(report, as_json, "compare-swap")
    return 1 if report.moved else 0


def _bounds(within: list[str] | None, swap: list[str] | None, needs_swap: bool = True) -> list:
    """--within's bounds (judge/measures.py), read before anything loads: a bad one is one line."""
    if not within:
        return []
    if needs_swap and not swap:
        raise GraphdbgError("--within judges a swap's outputs: give --swap OP=REFERENCE too")
    from graphdbg.judge.measures import parse_within

    return parse_within(within)


@app.command(epilog=_example("graphdbg minify fixtures/block_runtime_error --trust-backend -o min"))
@_recorded_config
def minify(
    dump: Annotated[Path, typer.Argument(help="A dump folder or a graph file.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="The backend that fails (default: the dump's own).")] = None,
    passes: PassesOpt = None,
    accuracy: Annotated[Optional[bool], typer.Option("--accuracy/--no-accuracy", help="Keep a numeric mismatch (default: what the dump recorded).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", parser=_ints("--jobs", 1, 1024), help="Candidates tried at once (isolated).")] = 1,
    isolate: Annotated[Optional[bool], typer.Option("--isolate/--no-isolate", help="Run the graph (each candidate, the recording of its values) in sandboxed child processes (the default); --no-isolate: in this process, for a graph you trust.")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Seconds before a candidate counts as a timeout (default 600; enforced on the sandboxed children).")] = None,
    device: DeviceOpt = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Where the smallest dump and repro.py go (default ./DUMP-min, "
                                                "never through a link; a link named here is followed).")] = None,
    any_failure: Annotated[bool, typer.Option("--any-failure", help="Shrink whatever failure the backend shows, not only the captured one.")] = False,
    max_queries: Annotated[int, typer.Option("--max-queries", parser=_ints("--max-queries", 0, 100_000_000), help="Stop after this many backend runs (0: no limit); the best graph so far is saved.")] = 300,
    time_budget: Annotated[float, typer.Option("--time-budget", help="Stop after this many seconds (0: no limit); the best graph so far is saved.", min=0)] = 240.0,
    ops: OpsOpt = None,
    trust_backend: TrustOpt = False,
    trust_kernels: Annotated[bool, typer.Option("--trust-kernels", help="Write the graph's user Triton kernels, from the source the dump recorded (code from the dump's author), to repro_kernels.py beside repro.py.", rich_help_panel="Backend")] = False,
    as_captured: AsCapturedOpt = False,
    failure_rate: FailureRateOpt = None,
    self_check: SelfCheckOpt = True,
    as_json: JsonFlag = False,
) -> None:
    """Shrink a failing graph to the smallest one that fails the same way; writes a dump and repro.py."""
    _must_exist(dump)
    from graphdbg.minify import minify as run_minify

    if isolate is False and timeout is not None:  # issue 51: a C loop in this process can't be stopped, so the bound would be a lie
        raise GraphdbgError("minify: --timeout bounds the sandboxed workers; with --no-isolate the graph runs in this process, "
                            "where a call stuck in C can't be stopped: drop one of the two")
    _inputs_setup(ops)
    backend = backend or _own_backend(dump, trust_backend, "minify")
    if out is None:
        out = _default_output(Path(f"{dump.name.removesuffix('.py')}-min"))
        _note(f"minify: writing to ./{out}/ (-o to choose)")
    found, left = _environment(_manifest_only(dump), as_captured, as_json)
    progress = False if as_json else (True if _err_console().is_terminal else _line_progress("minify"))
    result = run_minify(dump, backend, passes, options=ReplayOptions(isolate=isolate, timeout=timeout, device=device,
                                                                     trust_kernels=trust_kernels),
                        accuracy=accuracy, jobs=jobs, out=out, progress=progress, any_failure=any_failure,
                        max_queries=max_queries or None, time_budget=time_budget or None, failure_rate=failure_rate)
    if self_check and result.saved and not result.interrupted:  # repro.py run in a fresh interpreter (a flaky failure: until it shows): exit 4 if it fails otherwise
        from graphdbg.judge.rate import RateTest

        def check(c: object) -> object:
            return RateTest(result.failure_rate).decide(
                lambda: c.check_repro(Path(out) / "repro.py", timeout=timeout or DEFAULT_TIMEOUT, captured=result.outcome.signature,
                                      device=result.outcome.device, dump=getattr(result.case.dump, "path", None)),
                lambda ch: ch.same).outcome

        _self_checked(check, Path(out) / "repro.py", result.outcome.signature)
    if as_json:
        _print_json({**result.to_dict(), **_environment_json(found, left)}, "minify")
    else:
        console.print(result, crop=False)
        if result.saved:
            console.print(f"wrote {result.saved} and {Path(out) / 'repro.py'}", highlight=False, soft_wrap=True)


@app.command(epilog=_example("graphdbg report dumps -o report.html"))
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


bisect_app = typer.Typer(help="Find what broke it: which pass, which node, which rank.", no_args_is_help=True,
                         epilog=_example("graphdbg bisect nodes fixtures/block_accuracy --trust-backend"))
app.add_typer(bisect_app, name="bisect")


@bisect_app.command("passes", epilog=_example("graphdbg bisect passes DUMP --passes mypasses:fuse,mypasses:fold"))
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

    backend = backend or _own_backend(dump, trust_backend, "bisect passes")
    case = _load_with_progress(dump, "bisect", quiet=as_json).case(device)
    with _progress(f"bisect passes: {len(passes.split(','))} passes", quiet=as_json):
        result = run(case, backend, passes, failure_rate=failure_rate)
    _report(result, as_json, "bisect-passes")
    raise typer.Exit(0 if result.culprit is None else 4 if result.fails_differently else 1)


@bisect_app.command("nodes", epilog=_example("graphdbg bisect nodes fixtures/block_accuracy --trust-backend"))
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

    backend = backend or _own_backend(dump, trust_backend, "bisect nodes")
    if backward:
        from graphdbg.minify.backward import bisect_training_nodes as run  # noqa: F811
    from graphdbg.replay.isolation import deadline

    d = _load_with_progress(dump, "bisect", quiet=as_json)
    opts = ReplayOptions(rtol=rtol, atol=atol, device=device)
    if isolate:  # the graph runs in a sandboxed child, ended (exit 2) past the timeout
        from graphdbg.minify.sandboxed import sandboxed_bisect_nodes

        with _progress(f"bisect nodes: {d.node_count} nodes", quiet=as_json):
            result = sandboxed_bisect_nodes(d, backend, passes, opts, timeout=timeout, backward=backward, trust=trust_backend)
        _report(result, as_json, "bisect-nodes")
        raise typer.Exit(_bisect_nodes_exit(result))
    case = d.case(device)
    with deadline(timeout, "bisect nodes"), _progress(f"bisect nodes: {len(case.gm.graph.nodes)} nodes", quiet=as_json):
        result = run(case, backend, passes, opts, **({"trust": trust_backend} if backward else {}))
    _report(result, as_json, "bisect-nodes")
    raise typer.Exit(_bisect_nodes_exit(result))


def _bisect_nodes_exit(result: Any) -> int:
    """5: nothing was compared (no verdict); 4: what was found fails, not as captured; 1: a node, or a
    pass that fails before any node runs; 0: none."""
    if result.node is None and result.failure is None:
        return 5 if result.compared == 0 else 0
    return 4 if result.fails_differently else 1


@bisect_app.command("envs", epilog=_example("graphdbg bisect envs DUMP --python /venvs/torch-2.11/bin/python --python /venvs/torch-2.13/bin/python"))
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
    backend = backend or _own_backend(dump, trust_backend, "bisect envs")
    what = f"{len(python)} interpreters" if python else "the settings that differ from the capture"
    with _progress(f"bisect envs: {what}", quiet=as_json):
        result = run(d, backend, python, ReplayOptions(device=device, timeout=timeout), failure_rate=failure_rate)
    _report(result, as_json, "bisect-envs")
    raise typer.Exit(0 if result.culprit is None else 1)


@bisect_app.command("ops", epilog=_example("graphdbg bisect ops DUMP --ops mymodel.kernels"))
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
    raise typer.Exit(1 if result.culprits else 0)


@bisect_app.command("ranks", epilog=_example("graphdbg bisect ranks dumps"))
def bisect_ranks(path: Annotated[Path, typer.Argument(help="A folder of rank dumps, or of printed graphs (rank<R>_<G>.py).")],
                 graph: Annotated[Optional[str], typer.Option("--graph", help="Printed graphs: only this graph (e.g. 9).")] = None,
                 as_json: JsonFlag = False) -> None:
    """Which ranks' graphs, inputs or errors differ from the others, and how."""
    from graphdbg.minify import bisect_ranks as run

    with _progress("bisect ranks", quiet=as_json):
        result = run(path, graph=graph)
    _report(result, as_json, "bisect-ranks")
    raise typer.Exit(1 if result.odd else 0)


@app.command("export-test", epilog=_example("graphdbg export-test fixtures/block_runtime_error --trust-backend -o tests/test_block.py"))
def export_test(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The test file to write, e.g. tests/test_gelu_lowering.py.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend under test (default: the dump's own).")] = None,
    passes: PassesOpt = None,
    trust_backend: TrustOpt = False,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite an existing test file and its data folder.")] = False,
    swap: SwapOpt = None,
    within: WithinOpt = None,
    ops: OpsOpt = None,
    trust_kernels: TrustKernelsOpt = False,
    self_check: SelfCheckOpt = True,
) -> None:
    """Write a pytest regression test from a dump, with its data next to it; it fails while the bug is there.

    With --swap OP=REFERENCE: a test that the graph with OP agrees with the graph with REFERENCE
    (within the --within bounds, which the test records)."""
    _must_exist(dump)
    bounds = _bounds(within, swap)
    from graphdbg.minify import export_test as run

    data = out.with_name(out.stem + "_data")
    there = [p for p in (out, data) if p.exists()]
    if there and not force:
        raise GraphdbgError(f"{there[0]} exists; pass --force to overwrite it")
    d = _load_with_progress(dump, "export-test")
    if swap:
        _export_swap_test(d, out, swap, ops, trust_kernels, bounds)
        return
    with _progress(f"export-test: writing {out}"):
        path = run(d, out, backend=backend, passes=passes, trust=trust_backend)  # code the dump names: only with --trust-backend
    if self_check and d.failure_kind in ("compile_error", "runtime_error", "crash", "accuracy"):  # run once on its own: exit 4 if it fails otherwise
        device = "cpu" if d.cpu_replay(None) else d.captured_device_name
        _self_checked(lambda c: c.check_exported_test(path, kind=d.failure_kind, captured=d.signature, device=device), path,
                      d.signature)
    console.print(f"wrote {path}")


def _export_swap_test(d: object, out: Path, swap: list[str], ops: str | None, trust_kernels: bool,
                      bounds: list | None = None) -> None:
    from graphdbg.minify.export_test import export_swap_test
    from graphdbg.replay.swap import swap_dump

    modules = [m.strip() for m in (ops or "").split(",") if m.strip()]
    swap_dump(d, swap, ops=modules, trust_kernels=trust_kernels, within=bounds)  # a bad --swap is an error now, not in the test
    path = export_swap_test(d, out, swap, ops=modules, trust_kernels=trust_kernels, within=[str(b) for b in bounds or []])
    console.print(f"wrote {path}")


@app.command(epilog=_example("graphdbg schema replay"))
def schema(name: Annotated[Optional[str], typer.Argument(help="manifest (default), or a command's --json output: "
                                                               "ls, show, replay, compare, minify, bisect-passes, ...")] = None,
           list_names: Annotated[bool, typer.Option("--list", help="Print the schema names, one a line.")] = False) -> None:
    """Print a JSON Schema: manifest.json's, or that of a command's --json output."""
    from graphdbg.ui.schemas import OUTPUT_SCHEMAS, output_schema

    if list_names:
        console.print("\n".join(["manifest", *OUTPUT_SCHEMAS]), highlight=False)
        return
    _print_json(output_schema(name or "manifest"))


@app.command(epilog=_example("graphdbg redact dumps -o dumps-shared"))
def redact(
    dump: Annotated[Path, typer.Argument(help="A dump folder, or a folder of dumps.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the redacted copy here (default: redact in place).")] = None,
    root: Annotated[Optional[Path], typer.Option("--root", help="Project root that source paths become relative to (default: found from the paths).")] = None,
    as_json: JsonFlag = False,
    drop_weights: Annotated[bool, typer.Option("--drop-weights", help="As `graphdbg share`: parameters and large inputs generated from statistics (needs --out).")] = False,
) -> None:
    """Make a dump safe to share: relative source paths, no host name, user names or environment."""
    from graphdbg.store.redact import redact_dumps

    if drop_weights:
        if out is None:
            raise GraphdbgError("redact --drop-weights writes a copy: give it --out")
        return share(dump, out, root=root, as_json=as_json)
    report = redact_dumps(dump, out=out, root=root)
    if as_json:
        _print_json(report)
    else:
        for row in report:
            console.print(f"{row['path']}: {row['paths']} paths made relative, removed {', '.join(row['removed']) or 'nothing'}", highlight=False)


@app.command(epilog=_example("graphdbg share dumps/rank0/g0-compile_error-3b0e0256 -o shared --trust-backend"))
def share(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the copy goes (a new dump folder).")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="The backend that fails (default: the dump's own).")] = None,
    trust_backend: TrustOpt = False,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    root: Annotated[Optional[Path], typer.Option("--root", help="Project root that source paths become relative to.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A redacted copy without the weights (generated from statistics) that still fails the same way; says which values stay."""
    from graphdbg.minify.share import share_dump

    result = share_dump(dump, out, ReplayOptions(isolate=isolate, timeout=timeout), backend=backend, trust_backend=trust_backend, root=root,
                        announce=_note)
    if as_json:
        _print_json(result.to_dict())
    else:
        console.print(result.line(), highlight=False, soft_wrap=True)


@app.command(epilog=_example("graphdbg extract run.log -o graphs"))
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


def _default_output(path: Path) -> Path:
    """``path``, an output graphdbg names for the user (minify's ``DUMP-min``, extract's
    ``graphs``), after checking that no part of it is a symbolic link: one planted there (a
    shared folder, an unpacked bug report) is refused, never written through. ``-o`` names one
    the user chose, which may be a link."""
    from graphdbg.store.safe_files import refuse_link

    here = Path()
    for part in path.parts:
        here = here / part
        refuse_link(here)
    return path


def _self_checked(run: Callable[..., object], path: Path, captured: str | None) -> None:
    """Run what was written once, in a fresh sandboxed interpreter (graphdbg.minify.self_check); a
    note on stderr with its verdict (and what its sandbox could not hold on this kernel), or
    SelfCheckFailed (exit 4) when it is not the captured failure."""
    from graphdbg.minify import self_check

    with _progress(f"checking {path} in a fresh interpreter"):
        check = run(self_check)
    check.raise_unless_same(path, captured)
    weaker = f" (its sandbox on this machine: {check.weaker})" if check.weaker else ""  # a kernel without Landlock, as a replay says
    _note(f"not checked: {path}: {check.line}" if check.missing else f"checked: {path} run on its own: {check.line}{weaker}")


def _report(result: object, as_json: bool, schema: str | None = None) -> None:
    if as_json:
        _print_json(result.to_dict(), schema)
    else:
        from graphdbg.ui.render import renderable

        console.print(result if hasattr(result, "__rich__") else renderable(result))


def main() -> None:
    """Entry point: user errors become one line and exit code 2, never a traceback.

    An unexpected exception is a graphdbg bug: one line and exit code 3, with the traceback
    only when GRAPHDBG_DEBUG=1.
    """
    _cwd_importable(sys.argv[1:])
    try:
        app(prog_name="graphdbg")  # standalone: typer/click print usage errors themselves and exit 2
    except SystemExit as e:
        interrupt = _interrupt_of(e)  # typer turns Ctrl-C into a silent exit 130
        if interrupt is None:
            raise
        exit_for(interrupt)
    except Exception as e:
        exit_for(e)


def exit_for(e: BaseException) -> NoReturn:
    """The one line and exit code of a command that raised ``e`` (``graphdbg.__main__`` answers
    ``ls`` without typer, and its errors here)."""
    if isinstance(e, KeyboardInterrupt):
        _end_children()
        _note(_interrupted_line(e))
        sys.exit(130)
    if isinstance(e, GraphdbgError):
        _fail(str(e), e.exit_code)
    if os.environ.get("GRAPHDBG_DEBUG") or not isinstance(e, Exception):
        raise e
    if isinstance(e, (RecursionError, MemoryError)):  # gate: a hostile input too deep or too large is bad input
        _fail(f"the input is {'nested too deep' if isinstance(e, RecursionError) else 'too large'} to process "
              f"({type(e).__name__})", 2)
    first = (str(e).strip().splitlines() or [""])[0]
    _fail(f"internal error: {type(e).__name__}: {first} (set GRAPHDBG_DEBUG=1 for the traceback)", 3)


# --trust-backend: the module the dump names is imported as the user would import it, from here too
MODULE_OPTIONS = ("--passes", "-p", "--backend", "-b", "--backends", "--ops", "--trust-backend")


def _cwd_importable(args: list[str]) -> None:
    """Modules named by ``--passes``/``--backend``/``--ops`` may live in the current folder, as
    ``python script.py`` would find them: put it on ``sys.path``, and on ``PYTHONPATH`` for
    isolated children. Only when the command line names such modules."""
    if not any(a.split("=", 1)[0] in MODULE_OPTIONS for a in args):
        return
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, cwd])


def _interrupt_of(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt behind an exit, if any (typer raises Exit(130) from it)."""
    seen = exc
    for _ in range(6):
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            return None
        if isinstance(seen, KeyboardInterrupt):
            return seen
    return None


def _interrupted_line(interrupt: KeyboardInterrupt) -> str:
    result = getattr(interrupt, "result", None)  # minify's MinifyInterrupted: the best graph so far
    if result is None:
        return "interrupted"
    if result.saved is None:
        return f"interrupted after {result.queries} queries: nothing smaller than {result.start_nodes} nodes found yet, nothing saved"
    return f"interrupted: best {result.final_nodes}-node graph saved to {Path(result.saved).parent.parent / 'repro.py'}"


def _end_children() -> None:
    """Kill what this process started and left running: isolated replays run in their own
    session (so the terminal's Ctrl-C does not reach them), and would outlive us otherwise."""
    import signal

    proc = Path("/proc")
    if not proc.is_dir():
        return
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "(comm)": state, ppid, pgrp, ...
        pid, ppid, pgrp = int(entry.name), int(fields[1]), int(fields[2])
        if ppid != me:
            continue
        with contextlib.suppress(OSError):
            if pgrp == pid:  # a group of its own: take its children with it
                os.killpg(pgrp, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


def _fail(message: str, code: int) -> NoReturn:
    Console(stderr=True).print(f"graphdbg: error: {message}", highlight=False, soft_wrap=True, markup=False)
    if "--json" in sys.argv[1:]:  # a program reading stdout gets JSON for an error too
        _print_json({"error": message, "exit_code": code}, "error")
    sys.exit(code)


if __name__ == "__main__":
    main()
