"""The worker side of ``graphdbg.execution.worker``: ``python -m graphdbg.execution.worker_main FOLDER``.

Sandboxed once (``execution.sandbox``: it may write under ``FOLDER/work`` alone), before any job
is read; then it answers jobs one at a time, each named by its number on stdin
(``FOLDER/jobs/N/request.json``, plain JSON, the parent's), with ``FOLDER/work/N/answer.json``
and the number back on stdout. Its stdin and stdout are kept for that alone: what the graph
or a backend prints goes to the job's ``stderr.txt``. The tasks (a request's ``task``, a kind of
``execution.jobs.JOB_KINDS`` that takes a request):

- ``replay``: one replay of a dump folder, as a replay child runs it (``execution.child.answer``);
- ``values``: every node's value in one eager run of a dump's graph (``replay.values``), for
  minify's candidates: tensors in ``values.safetensors``, numbers and the kind of anything
  else in the answer (``recorded_values`` reads them back);
- ``bisect_nodes``: ``graphdbg bisect nodes`` over a dump, its ``NodeDivergence`` as a dict.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from graphdbg.errors import GraphdbgError
from graphdbg.execution.child import answer, die_with_parent
from graphdbg.execution.jobs import job_function
from graphdbg.execution.sandbox import sandbox_child
from graphdbg.execution.worker_tasks import VALUES_FILE
from graphdbg.formats import load as load_dump
from graphdbg.judge.signature import exception_text
from graphdbg.replay.values import record_values
from graphdbg.store.tensor_file import storable, write_tensors


def main(folder: str) -> int:
    die_with_parent()
    if __spec__ is not None:  # run as ``-m``: the tasks JOB_KINDS names here are this module's, not a second copy's
        sys.modules.setdefault(__spec__.name, sys.modules[__name__])
    SANDBOX[0] = sandbox_child(own_parent=False)  # before any job is read; it writes under work/ alone
    jobs_in, answers_out = os.dup(0), os.dup(1)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)  # nothing a job runs reads the job numbers
    with os.fdopen(jobs_in, "rb", buffering=0) as jobs:
        for line in iter(jobs.readline, b""):
            name = line.strip().decode("ascii", errors="replace")
            if name.isdigit():
                run_job(Path(folder) / "jobs" / name, Path(folder) / "work" / name)
                os.write(answers_out, f"{name}\n".encode())
    return 0


def run_job(job: Path, answers: Path) -> None:
    """The job in ``job`` (the parent's, read-only here), answered in ``answers``."""
    sys.stdout.flush()
    sys.stderr.flush()
    answers.mkdir(exist_ok=True)
    out = os.open(answers / "stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    try:
        request = json.loads((job / "request.json").read_text())
        data = job_function(request.get("task", "replay"), "request")(request, answers)
    except GraphdbgError as e:
        data = {"error": exception_text(e)}
    except Exception as e:  # anything else: the job's answer says what, the worker lives on
        data = {"error": f"{type(e).__name__}: {exception_text(e)}"}
    (answers / "answer.json").write_text(json.dumps(data, default=str))
    sys.stdout.flush()
    sys.stderr.flush()


def values_job(request: dict[str, Any], job: Path) -> dict[str, Any]:
    case = load_dump(request["dump"]).case(device=request["device"])
    values = record_values(case.gm, list(case.inputs), grad=bool(request.get("grad")))
    inputs = {n.name for n in case.gm.graph.nodes if n.op == "placeholder"}
    kinds: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for name, v in values.items():
        if name in inputs:
            kinds[name] = {"kind": "input"}
        elif isinstance(v, torch.Tensor) and (readable := _read_out(v)) is not None:
            tensors[name] = readable
            kinds[name] = {"kind": "tensor", "stride": list(v.stride())}
        elif isinstance(v, (bool, int, float)):
            kinds[name] = {"kind": type(v).__name__, "value": v}
        else:
            kinds[name] = {"kind": "other", "type": type(v).__name__}
    write_tensors(job / VALUES_FILE, tensors)
    return {"values": kinds}


def _read_out(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as a plain tensor to send back, or None: a type safetensors can't hold, or a value
    that can't be read outside the region that made it (a vmap's batched tensor once its level
    is closed: "Either your tensor may have escaped..."); its producer then stays in candidates."""
    try:
        plain = t.detach()
        return plain.contiguous() if storable(plain) else None
    except RuntimeError:
        return None


def replay_task(request: dict[str, Any], answers: Path) -> dict[str, Any]:
    """One replay, as a replay child runs it (``execution.child.answer``), in this worker's sandbox."""
    return answer(request, sandboxed=SANDBOX[0] is not None)


SANDBOX: list[str | None] = [None]  # what sandbox_child applied in this worker


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
