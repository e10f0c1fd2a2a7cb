"""The graphdbg command line: a thin layer over the Python API.

This module assembles the typer app from the commands of ``graphdbg/ui/commands/`` (one module
per group: capture, show, replay, minify, bisect, export, share) and is its entry point. Every
command prints with rich, or JSON with ``--json``. Exit codes: 0 fine, 1 a failure was
reproduced (replay), 2 the input could not be used (one line on stderr says why); each verdict
comes from the Outcome or the command's result, not from here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated, Callable, NoReturn

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.ui.commands import bisect, capture, export, minify, replay, share, show
from graphdbg.ui.commands.common import _example, _note, _print_json
from graphdbg.ui.render import safe_console as Console  # gate: no markup read, control characters shown

# The commands import the layers they use inside their functions: this module loads without
# torch, so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

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


def _version(value: bool) -> None:
    if value:
        from graphdbg._version import __version__

        typer.echo(f"graphdbg {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    pass


# the commands in the order --help lists them
COMMANDS: tuple[Callable[..., None], ...] = (
    capture.capture, show.ls, show.show, replay.replay, replay.compare, minify.minify, show.report,
    export.export_test, show.schema, share.redact, share.share, capture.extract,
)
BISECT_COMMANDS: tuple[Callable[..., None], ...] = (
    bisect.bisect_passes, bisect.bisect_nodes, bisect.bisect_envs, bisect.bisect_ops, bisect.bisect_ranks,
)


def _add(to: typer.Typer, run: Callable[..., None]) -> None:
    """Add a command to ``to`` with the arguments its ``@command(...)`` gave."""
    args, kwargs = run.typer_command
    to.command(*args, **kwargs)(run)


for _run in COMMANDS:
    _add(app, _run)


bisect_app = typer.Typer(help="Find what broke it: which pass, which node, which rank.", no_args_is_help=True,
                         epilog=_example("graphdbg bisect nodes fixtures/block_accuracy --trust-backend"))

for _run in BISECT_COMMANDS:
    _add(bisect_app, _run)
app.add_typer(bisect_app, name="bisect")


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
