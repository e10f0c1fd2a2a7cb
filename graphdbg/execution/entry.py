"""Starting a replay of a Dump: the checks made before anything is allocated, and the choice
between this process and a child. This is what the CLI's ``replay`` and ``compare`` import:
it doesn't import Dynamo (about 2 s of CPU), which an isolated replay needs only in its child;
an isolated replay of a dump on the CPU doesn't import torch here at all (the child checks
that the inputs fit before it loads them).

    >>> outcome = replay_dump(graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d"), "inductor")
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from graphdbg.backends.resolve import known_without_dynamo, recorded_backend, resolve_backend
from graphdbg.errors import GraphdbgError
from graphdbg.execution.executor import Job, executor_for
from graphdbg.execution.isolation import run_isolated_many
from graphdbg.rebuild.memory_budget import MAX_INPUT_GB_ENV
from graphdbg.replay.options import ReplayOptions, replay_options

if TYPE_CHECKING:
    from graphdbg.outcome import Outcome


def _check_backend(backend: str | Callable[..., Any], isolate: bool) -> None:
    """Resolve ``backend`` here, so that an unknown one is a one-line error before any child.
    A name known to be registered (``inductor``, ``thunder`` where it is installed) an isolated
    replay leaves to its child, which looks it up anyway: importing Dynamo (or Thunder) here too
    doubled a replay's start-up. Any other name is looked up here (a name a package registers
    imports Dynamo here, an unknown one is the error the child gave, 3 s sooner)."""
    if isolate and known_without_dynamo(backend):
        return
    resolve_backend(backend)


NOT_ISOLATED = ("--trust-kernels runs a dump's kernel source only in the sandboxed replay child: "
                "drop --no-isolate (isolate=False)")


def _start(dump: Any, backends: Sequence[str | Callable[..., Any]], options: ReplayOptions | None,
           **settings: Any) -> ReplayOptions:
    """The options a replay of ``dump`` under each of ``backends`` runs with, once each backend
    is checked: isolated unless told otherwise, a nested compile's piece called directly."""
    opts = replay_options(options, **settings)
    opts = opts.but(isolate=True) if opts.isolate is None else opts
    if opts.trust_kernels and not opts.isolate:
        raise GraphdbgError(NOT_ISOLATED)
    for backend in backends:
        _check_backend(backend, opts.isolate)  # an unknown backend is an error here, not a crash in the child
    if dump.manifest.piece and not opts.direct:
        # A piece of a nested compile reached its compiler as a GraphModule, never through Dynamo:
        # replay it the same way (re-tracing would turn a Stream input into something else).
        opts = opts.but(direct=True)
    return opts


def replay_dump(dump: Any, backend: str | Callable[..., Any] = "eager", options: ReplayOptions | None = None,
                **settings: Any) -> Outcome:
    """Replay a Dump (``settings``: fields of ``ReplayOptions``, over ``options``); isolated
    unless ``isolate=False``, and then its inputs are loaded only in the child process.

    Before anything is allocated, the inputs' bytes are checked against the free memory of
    the device (or ``max_input_gb``): InputsTooLarge (exit 2) instead of a swapped-out machine.
    Isolated, the child checks, before it loads them (``graphdbg.execution.child``).
    """
    opts = _start(dump, [backend], options, **settings)
    with _input_limit(opts.max_input_gb):
        return executor_for(opts).submit(Job("replay", dump, backend, opts))


def replay_dump_runs(dump: Any, backend: str | Callable[..., Any], options: ReplayOptions | None, runs: int,
                     total: float | None = None) -> tuple[list[Outcome], str]:
    """``runs`` replays of a Dump (``replay --repeat``) and how they ran: one after another in this
    process with ``isolate=False``; else in one isolated child, and when a run kills it (a signal,
    its timeout) the runs left in one child each, so a failure that kills the process is counted
    on every run. ``total``: seconds for all of them (``--total-timeout``); once past, with one
    run done, no other starts (the one under way in a child is ended, not counted), and how they
    ran says where it stopped: the rate is then the rate so far."""
    opts = replay_options(options)
    deadline = None if total is None else time.monotonic() + float(total)

    def more(done: list[Outcome]) -> bool:
        return not done or deadline is None or time.monotonic() < deadline

    if opts.isolate is False or runs == 1:
        outcomes: list[Outcome] = []
        while len(outcomes) < runs and more(outcomes):
            outcomes.append(replay_dump(dump, backend, opts))
        how = "in this process" if opts.isolate is False else "in one child"
        return outcomes, how + _stopped(len(outcomes), runs, total)
    opts = _start(dump, [backend], opts.but(isolate=True))
    outcomes = []
    with _input_limit(opts.max_input_gb):
        while len(outcomes) < runs and more(outcomes):  # a child per RUNS_PER_CHILD runs: its request stays small
            asked = min(RUNS_PER_CHILD, runs - len(outcomes))
            batch = run_isolated_many(dump, backend, opts, asked, deadline=deadline)
            outcomes += batch
            if len(batch) < asked or ended_child(batch[-1]):
                break
    where = "in one child" if runs <= RUNS_PER_CHILD else f"in children of {RUNS_PER_CHILD} runs"
    if not ended_child(outcomes[-1]):  # all of them, or the total bound ended the child between runs
        return outcomes, where + _stopped(len(outcomes), runs, total)
    killed = len(outcomes)
    while len(outcomes) < runs and more(outcomes):
        outcomes.append(replay_dump(dump, backend, opts))
    why = outcomes[killed - 1].signature or outcomes[killed - 1].status
    rest = ({0: "no run left", 1: "the last in a child of its own"}.get(len(outcomes) - killed)
            or f"the other {len(outcomes) - killed} in a child each")
    return outcomes, f"runs 1 to {killed} in one child, run {killed} ended it ({why}): {rest}" + _stopped(len(outcomes), runs, total)


RUNS_PER_CHILD = 1000  # replay --repeat's runs one child makes, one after another


def _stopped(done: int, runs: int, total: float | None) -> str:
    """What a repeated replay stopped by its total bound says: how far it got."""
    return "" if done >= runs else f"; stopped after {done} of {runs} runs: --total-timeout {float(total or 0):g}s reached"


def ended_child(outcome: Outcome) -> bool:
    """Whether a run ended its child: killed by a signal, past its timeout, or exited without an Outcome."""
    return bool(outcome.isolated and outcome.stage == "child"
                and (outcome.exit_signal or outcome.status == "timeout" or outcome.exit_code_child is not None))


@contextlib.contextmanager
def _input_limit(max_input_gb: float | None):
    """``max_input_gb`` for this replay, its child processes included (they read the environment)."""
    if max_input_gb is None:
        yield
        return
    old = os.environ.get(MAX_INPUT_GB_ENV)
    os.environ[MAX_INPUT_GB_ENV] = repr(float(max_input_gb))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(MAX_INPUT_GB_ENV, None)
        else:
            os.environ[MAX_INPUT_GB_ENV] = old


COMPARED = ("eager", "aot_eager", "inductor")  # compare's backends, with the dump's own, unless told


def compared_backends(spec: str | None, own: Callable[[], str | None]) -> tuple[list[str], GraphdbgError | None]:
    """The backends ``compare`` replays: ``spec`` (comma-separated; ``dump`` is the dump's own
    backend, ``own()``, however it is spelled: an aot_autograd recipe has commas), by default
    ``COMPARED`` and the dump's own. The second item is why the dump's own was left out of the
    default (it can't be used without trust), else None."""
    names = [b.strip() for b in spec.split(",") if b.strip()] if spec is not None else list(COMPARED)
    if "dump" in names:
        mine = own() or "eager"
        return [mine if n == "dump" else n for n in names], None
    if spec is None:
        try:
            mine = own()
        except GraphdbgError as e:
            return names, e
        names += [mine] if mine and mine not in names else []
    return names, None


def own_backend_missing(dump: Any, names: Sequence[str | Callable[..., Any]]) -> str | None:
    """The line ``compare`` adds when the dump's own backend (the one its failure was captured
    under) is not among the backends it replays: their rows then don't say whether that failure
    is still there, however many of them pass. None when it is among them, or the dump recorded
    no failure (a printed graph: there is no own backend to miss)."""
    from graphdbg.backends.recipe import backend_label  # lazy, as the CLI imports it: only compare needs it here

    if dump.failure_kind not in ("compile_error", "runtime_error", "crash", "accuracy"):
        return None
    try:
        mine = recorded_backend(dump)
    except GraphdbgError:
        mine = str(dump.backend)
    compared = {str(n) for n in names if isinstance(n, str)} | {backend_label(n) for n in names if isinstance(n, str)}
    if {mine, str(dump.backend), backend_label(mine)} & compared:
        return None
    return (f"the dump's own backend, {backend_label(mine)}, under which its {dump.failure_kind} was captured, is not "
            "among these: the rows don't say whether that failure is still there (add 'dump' to --backends, "
            "with --trust-backend, to replay under it)")


def compare_outcomes(dump: Any, backends: Sequence[str | Callable[..., Any]], options: ReplayOptions | None = None,
                     started: Callable[[int], None] | None = None) -> list[Outcome]:
    """``compare``'s replays of a Dump, one per backend, in order, each backend checked before any
    runs. Isolated (the default): in one child as far as each column's outcome being its own
    allows (``run_isolated_each``: a column that kills its child, or whose backend imports user
    code, ends it); ``isolate=False``: one after another in this process. ``started(i)``: the
    replay under ``backends[i]`` began (progress)."""
    opts = _start(dump, backends, options)
    with _input_limit(opts.max_input_gb):
        return executor_for(opts).map([Job("replay", dump, backend, opts) for backend in backends], started)


def outcomes_table(dump: Any, outcomes: Sequence[Outcome]):
    """One row per Outcome: a pandas DataFrame (the Outcomes in ``.attrs``)."""
    import pandas as pd  # slow to import (~0.5 s), and only tables need it

    rows = [{"backend": o.backend, "status": o.status, "signature": o.signature, "stage": o.stage,
             "seconds": o.total_s, "max_abs_error": o.max_abs_error, "max_rel_error": o.max_rel_error, "trusted": o.trusted,
             "reproduces": o.reproduces(dump)} for o in outcomes]
    df = pd.DataFrame(rows)
    df.attrs["outcomes"] = list(outcomes)
    return df


def compare_exit_code(outcomes: Sequence[Outcome]) -> int:
    """``compare``'s exit code: 1 when any backend fails, else 0."""
    return 1 if any(o.failed for o in outcomes) else 0


def compare_backends(dump: Any, backends: Sequence[str | Callable[..., Any]], options: ReplayOptions | None = None):
    """One replay per backend (``compare_outcomes``); a pandas DataFrame with one row each (and
    the Outcomes in ``.attrs``)."""
    return outcomes_table(dump, compare_outcomes(dump, backends, options))
