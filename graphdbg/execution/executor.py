"""Where a graph runs: one door, chosen once and passed down (``ReplayOptions.executor``).

    >>> with SandboxedWorkers(dump_path, size=2, timeout=60) as workers:
    ...     outcome = workers.submit(Job("replay", case, "inductor", opts.but(isolate=True)))
    ...     values = workers.submit(Job("values", case, payload={"grad": False}))
    >>> replay_case(case, "inductor", opts.but(isolate=True, executor=workers))   # the same door

An ``Executor`` runs ``Job``s (``submit`` one, ``map`` several) and says nothing of how a graph
replays (``replay.run``); the three here differ in where:

- ``InProcess``: this process (``--no-isolate``, a graph you trust; the self-check's sandboxed
  launcher, which is a replay child's sandbox already);
- ``FreshChild``: one sandboxed child per job (``execution.isolation``), whose death or timeout
  is the job's Outcome: ``replay`` and ``compare`` by default;
- ``SandboxedWorkers``: a pool of warm sandboxed workers (``execution.worker``), each running
  job after job: minify's candidates, bisect's recording of every node's value, ``share``.

The CLI and the API choose one; ``executor_for`` gives the one the options name, or the default
for ``isolate``. A job's kind is one of ``execution.jobs.JOB_KINDS``. The executor is this
process's: ``ReplayOptions.for_child`` never sends it.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from graphdbg.errors import GraphdbgError
from graphdbg.execution.isolation import _is_dump, replay_request, run_isolated_each, run_isolated_many, run_job_isolated
from graphdbg.execution.sandbox import FOLDER_ENV, HERE_ENV
from graphdbg.execution.worker import WORKER_MODULE, WorkerPool
from graphdbg.rebuild.memory_budget import check_fits, descriptor_bytes
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions


@dataclass
class Job:
    """One run of a graph: ``kind`` (``replay``, ``values``, or a replay child's job: ``swap``,
    ``bisect-ops``), on ``case`` (a Case, or a Dump whose inputs load where it runs), under
    ``backend`` with ``opts``; ``payload``: what the kind needs besides."""

    kind: str
    case: Any
    backend: Any = "eager"
    opts: ReplayOptions = field(default_factory=ReplayOptions)
    payload: dict[str, Any] = field(default_factory=dict)  # sent to where it runs, as JSON
    references: tuple[str, ...] = ()  # the user's module:function references the job imports there (a swap's)

    @property
    def timeout(self) -> float:
        return DEFAULT_TIMEOUT if self.opts.timeout is None else float(self.opts.timeout)


class Executor(ABC):
    """Where jobs run. ``submit``: one job's answer (an Outcome for ``replay``); ``map``: each
    job's, in order (``started(i)``: job ``i`` began, as far as this process can tell)."""

    @abstractmethod
    def submit(self, job: Job) -> Any: ...

    def map(self, jobs: Sequence[Job], started: Callable[[int], None] | None = None) -> list[Any]:
        answers = []
        for i, job in enumerate(jobs):
            if started is not None:
                started(i)
            answers.append(self.submit(job))
        return answers

    def close(self) -> None:
        """End what this executor started (workers); nothing for the others."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class InProcess(Executor):
    """This process: nothing stands between the graph and graphdbg (a graph you trust)."""

    def submit(self, job: Job) -> Any:
        # lazy: Dynamo (~2 s) only for a run in this process; the child's own modules, as its
        from graphdbg.replay.run import replay_case  # (entry.py's replay of a dump on the CPU imports no torch here)
        from graphdbg.replay.values import record_values  # as the line above

        case = job.case
        if _is_dump(case):
            check_dump_fits(case, job.opts.device)
            case = case.case(job.opts.device)
        if job.kind == "replay":
            return replay_case(case, job.backend, job.opts.but(isolate=False))
        if job.kind == "values":
            return record_values(case.gm, list(case.inputs), grad=bool(job.payload.get("grad")))
        raise GraphdbgError(f"{job.kind} runs in the sandboxed replay child only")


class FreshChild(Executor):
    """A fresh sandboxed child per job (``map`` of one case's replays: as few children as each
    Outcome being its own allows, ``run_isolated_each``)."""

    def submit(self, job: Job) -> Any:
        if job.kind == "replay":
            return run_isolated_many(job.case, job.backend, job.opts, 1)[0]
        if job.kind == "values":
            with SandboxedWorkers(None, timeout=job.timeout) as workers:  # a pool of one, for one job
                return workers.submit(job)
        return run_job_isolated(job.case, {"kind": job.kind, **job.payload}, job.opts, job.references)

    def map(self, jobs: Sequence[Job], started: Callable[[int], None] | None = None) -> list[Any]:
        if jobs and all(j.kind == "replay" and j.case is jobs[0].case and j.opts == jobs[0].opts for j in jobs):
            return run_isolated_each(jobs[0].case, [j.backend for j in jobs], jobs[0].opts, started)
        return super().map(jobs, started)


class SandboxedWorkers(Executor):
    """A pool of ``size`` warm sandboxed workers over one dump (``execution.worker.WorkerPool``),
    each running job after job; a replay that asks for another interpreter (``opts.python``)
    gets a fresh child of it."""

    def __init__(self, dump: str | Path | None, *, size: int = 1, timeout: float = DEFAULT_TIMEOUT,
                 specs: Iterable[str | None] = ()):
        """``specs``: the backend and passes the jobs' replays name (their modules are found in the workers)."""
        self.pool = WorkerPool(WORKER_MODULE, dump=str(dump) if dump is not None else None, size=size, specs=list(specs))
        self.timeout = timeout

    def submit(self, job: Job) -> Any:
        if job.kind == "replay" and not job.opts.python:
            return self.pool.replay(job.case, replay_request(job.case, job.backend, job.opts), job.timeout)
        if job.kind == "values":
            from graphdbg.execution.worker_tasks import recorded_values  # torch: only a recording needs it here

            return recorded_values(self.pool, job.case, bool(job.payload.get("grad")), job.timeout)
        return FreshChild().submit(job)

    def close(self) -> None:
        self.pool.close()


def executor_for(opts: ReplayOptions) -> Executor:
    """Where ``opts``' runs go: this process unless ``isolate``; isolated, the executor ``opts``
    names, else a fresh sandboxed child (this process in the self-check's sandboxed launcher,
    ``HERE_ENV``, which is a replay child's sandbox already)."""
    if not opts.isolate:
        return InProcess()
    if opts.executor is not None:
        return opts.executor
    return InProcess() if os.environ.get(HERE_ENV) == "1" and os.environ.get(FOLDER_ENV) else FreshChild()


def check_dump_fits(dump: Any, device: Any = None) -> None:
    """Raise InputsTooLarge when ``dump``'s inputs can't fit on ``device`` (see memory_budget):
    where the graph runs, before any input is loaded (this process, or the child)."""
    from graphdbg.rebuild.inputs import symbol_env  # torch: not for an isolated replay's parent

    descs = dump.manifest_data.get("inputs", [])
    check_fits(descriptor_bytes(descs, symbol_env(descs)), dump.resolve_device(device))
