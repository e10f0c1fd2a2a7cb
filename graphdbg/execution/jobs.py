"""The kinds of job a graph runs as, where it runs sandboxed: one table.

Each kind names the ``module:function`` that runs it on the far side (a replay child or a
sandboxed worker), imported there by that name alone: a kind of minify's, above this layer, is
named, not imported here, so the layers contract doesn't see it. What the function takes:

- ``request``: the request and the job's answer folder, a worker's task (``execution.worker_main``);
- ``case``: the Case built from the request's dump, and the job (a replay child's ``job``, in
  ``execution.child.answer``, or a worker's replay request with one); its JSON result.

A job the parent sends is plain JSON (``executor.Job`` names its kind), never code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from graphdbg.errors import GraphdbgError


@dataclass(frozen=True)
class JobKind:
    function: str  # module:function
    takes: str  # "request" or "case" (see the module)


JOB_KINDS = {
    "replay": JobKind("graphdbg.execution.worker_main:replay_task", "request"),  # (a replay child's own: child.main)
    "values": JobKind("graphdbg.execution.worker_main:values_job", "request"),  # every node's value (minify)
    "bisect_nodes": JobKind("graphdbg.minify.bisect_backward:bisect_nodes_job", "request"),  # bisect nodes, sandboxed
    "swap": JobKind("graphdbg.replay.compare_swap:swap_job", "case"),  # compare --swap under --trust-kernels
    "bisect-ops": JobKind("graphdbg.minify.bisect_ops:bisect_ops_job", "case"),  # bisect ops under --trust-kernels
}


def job_function(kind: Any, takes: str) -> Callable[..., Any]:
    """The function that runs a job of ``kind``, which must take ``takes``; a GraphdbgError for
    a kind the table doesn't have (the request is the parent's, but checked all the same)."""
    found = JOB_KINDS.get(str(kind))
    if found is None or found.takes != takes:
        raise GraphdbgError(f"no job of kind {kind!r} runs here")
    module, _, name = found.function.partition(":")
    return getattr(importlib.import_module(module), name)


def case_job(case: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Where the graph runs sandboxed: ``job`` (a kind that takes a case) on ``case``; its JSON
    result, with the kernels the graph called."""
    from graphdbg.replay.compare_swap import case_kernels  # torch: only a job's far side needs it

    return {**job_function(job.get("kind"), "case")(case, job), "kernels": case_kernels(case)}
