"""What the commands share: the console, the option aliases (one ``Annotated`` alias per option
several commands take), progress on stderr, the dump's own backend, the recorded settings and
the environment printed before a verdict."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.strict_json import json_text
from graphdbg.ui.render import safe_console as Console  # gate: no markup read, control characters shown

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

def _example(command: str) -> str:
    """A command's example, shown at the end of its --help."""
    return f"[bold]Example:[/] [cyan]{command}[/]"


def command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a function as a command, with the arguments of typer's ``app.command``; ``ui/cli.py``
    adds it to the app (or to the ``bisect`` group)."""

    def mark(run: Callable[..., None]) -> Callable[..., None]:
        run.typer_command = (args, kwargs)
        return run

    return mark


class _Stdout:
    """stdout's Console, made at each use: rich reads COLUMNS and the terminal when a Console is
    made, and one made at import would keep the width of whoever imported the CLI first."""

    def __getattr__(self, name: str):
        return getattr(Console(), name)


console = _Stdout()


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
    from graphdbg.judge.environment_diff import recorded

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


def _with_code_differences(found: list, dump: object, outcome: object) -> list:
    """``found`` and where the replay's generated code differs from the capture's, ranked (a
    variable the backend read first, then the generated code)."""
    from graphdbg.judge.environment_diff import code_differences, ranked

    return ranked(code_differences(getattr(dump, "manifest_data", None), getattr(outcome, "generated_code", None)) + found)


def _environment_json(found: list, left: list[str]) -> dict:
    return {"environment_differences": [d.to_dict() for d in found], "not_restored": left}


def _own_backend(d: object, path: Path, trust: bool, command: str) -> str | None:
    """The loaded dump ``d``'s own backend (``path``: as the user named it); code it names is
    imported only with --trust-backend."""
    from graphdbg.backends.resolve import dump_backend
    from graphdbg.store.manifest import find_dumps

    if path.is_dir() and not find_dumps(path):
        return None  # a folder of printed graphs: they record no backend, and replay them as printed (eager)
    return dump_backend(d, trust, command, shown_path=path)


def _world_backend(path: Path, trust: bool, world_graph: str | None) -> str | None:
    """The backend of the graph a world (--all-ranks, ``world_graph``: its --graph) replays."""
    from graphdbg.backends.resolve import dump_backend
    from graphdbg.execution.world import world_dumps
    from graphdbg.formats import load as load_dump
    from graphdbg.store.manifest import find_dumps

    if not find_dumps(path):
        return None  # a folder of printed graphs: they record no backend, and replay them as printed (eager)
    paths = world_dumps(path, world_graph)[1]
    return dump_backend(load_dump(paths[min(paths)]), trust, "replay --all-ranks", shown_path=path)


def _bounds(within: list[str] | None, swap: list[str] | None, needs_swap: bool = True) -> list:
    """--within's bounds (judge/measures.py), read before anything loads: a bad one is one line."""
    if not within:
        return []
    if needs_swap and not swap:
        raise GraphdbgError("--within judges a swap's outputs: give --swap OP=REFERENCE too")
    from graphdbg.judge.measures import parse_within

    return parse_within(within)


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
