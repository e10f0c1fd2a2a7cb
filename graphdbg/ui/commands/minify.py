"""``minify``: the smallest graph that fails the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.ui.commands.common import (
    AsCapturedOpt,
    DeviceOpt,
    FailureRateOpt,
    JsonFlag,
    OpsOpt,
    PassesOpt,
    SelfCheckOpt,
    TrustOpt,
    _default_output,
    _environment,
    _environment_json,
    _err_console,
    _example,
    _inputs_setup,
    _ints,
    _line_progress,
    _load_with_progress,
    _must_exist,
    _note,
    _own_backend,
    _print_json,
    _recorded_config,
    _self_checked,
    command,
    console,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command(epilog=_example("graphdbg minify fixtures/block_runtime_error --trust-backend -o min"))
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
    d = _load_with_progress(dump, "minify", quiet=as_json)  # read once: the backend, the environment and the graph come from it
    backend = backend or _own_backend(d, dump, trust_backend, "minify")
    if out is None:
        out = _default_output(Path(f"{dump.name.removesuffix('.py')}-min"))
        _note(f"minify: writing to ./{out}/ (-o to choose)")
    found, left = _environment(d, as_captured, as_json)
    progress = False if as_json else (True if _err_console().is_terminal else _line_progress("minify"))
    result = run_minify(d, backend, passes, options=ReplayOptions(isolate=isolate, timeout=timeout, device=device,
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
