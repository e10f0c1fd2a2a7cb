"""The child side of an isolated replay: python -m graphdbg.execution.child REQUEST OUTCOME."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from graphdbg.errors import GraphdbgError
from graphdbg.execution.sandbox import sandbox_child
from graphdbg.judge.signature import exception_text


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the graphdbg process that started it dies, even
    by SIGKILL (``PR_SET_PDEATHSIG``); exit now if it is already gone. Elsewhere: nothing."""
    parent = os.environ.get("GRAPHDBG_REPLAY_PARENT")
    if not sys.platform.startswith("linux") or not parent:
        return
    try:
        import ctypes  # inside the try: a failed import is reported as the child's outcome

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # the parent died before the request above took effect
        os._exit(1)


def main(request_path: str, outcome_path: str) -> int:
    die_with_parent()
    sandbox = sandbox_child()  # before anything from the dump is read

    request = json.loads(Path(request_path).read_text())
    # replay --repeat, compare's columns: the runs one after another here, each Outcome written
    # to its own file when done
    for i, path in enumerate(request.get("outcomes") or [outcome_path]):
        run = column(request, i)
        data = answer(run, sandboxed=sandbox is not None)
        if sandbox is not None:
            data["sandbox"] = sandbox
        Path(path + ".part").write_text(json.dumps(data, default=str))
        os.replace(path + ".part", path)  # whole or absent: the parent may read it while this child still runs
        if "error" in data or data.get("stage") == "child":
            break  # the replay could not start: no run will
        if "backends" in request and data.get("status") == "crash" and not str(run["device"]).startswith("cpu"):
            break  # an accelerator's error can stay with the process: the next column gets a fresh one
    return 0


def column(request: dict, i: int) -> dict:
    """Run ``i`` of the request: for compare's columns (``backends``), its own backend, and from
    here on its own stderr, so that what a column prints (a crash's traceback) is its Outcome's."""
    if "backends" not in request:
        return request
    if i:
        sys.stderr.flush()
        fd = os.open(request["stderr"][i], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    return {**request, "backend": request["backends"][i]}


def answer(request: dict, sandboxed: bool = False) -> dict:
    """One replay of the request's dump (or its ``job``: ``execution.jobs.case_job``), as the JSON
    the parent reads: the Outcome's dict, or ``{"error": ...}`` for a replay that could not
    start. ``sandboxed``: this process runs in the sandbox (a dump's kernels compile only then).
    Shared with the long-lived worker (``graphdbg.execution.worker_main``), which answers many such
    requests in one sandbox."""
    try:
        from graphdbg.execution.executor import check_dump_fits  # inside the try, as the line below
        from graphdbg.formats import load as load_dump  # inside the try: a failed import is reported as the child's outcome
        from graphdbg.formats.dump_folder import checked_dump  # inside the try, as the line above
        from graphdbg.replay.run import run_case  # inside the try: a failed import is reported as the child's outcome

        if "manifest" in request:  # a dump folder whose manifest the parent read and checked
            dump = checked_dump(Path(request["dump"]), request["manifest"])
        else:
            dump = load_dump(request["dump"])
        check_dump_fits(dump, request["device"])  # before any input is loaded (the parent left it to us)
        from graphdbg.replay.as_captured import restore_if_asked  # inside the try, as the lines above

        restore_if_asked()  # --as-captured: before anything compiles; the parent reported what it left
        # --trust-kernels: the dump's kernel source is compiled here, in the sandboxed child, and only here
        case = dump.case(device=request["device"], trust_kernels=bool(request["options"].get("trust_kernels")) and sandboxed)
        if "job" in request:  # compare --swap / bisect ops under --trust-kernels: their runs of the graph, here
            from graphdbg.execution.jobs import case_job  # inside the try, as the lines above

            return {"result": case_job(case, request["job"])}
        outcome = run_case(case, request["backend"], request["passes"], isolate=False, **request["options"])
        data = outcome.to_dict()
        if request.get("environment"):  # bisect envs: what this interpreter is, to compare with another's
            from graphdbg.store.capture_environment import environment  # inside the try, as the lines above

            data["environment"] = environment(request["backend"] if isinstance(request["backend"], str) else None)
        return data
    except GraphdbgError as e:
        return {"error": exception_text(e)}
    except Exception as e:  # the replay could not even start here (an import, a device): say what
        import traceback  # inside the try: a failed import is reported as the child's outcome

        from graphdbg.backends.resolve import backend_label  # inside the try: a failed import is reported as the child's outcome
        from graphdbg.judge.signature import signature  # inside the try: a failed import is reported as the child's outcome
        from graphdbg.outcome import Outcome  # inside the try: a failed import is reported as the child's outcome

        text = exception_text(e)
        return Outcome(status="crash", backend=backend_label(request["backend"]), stage="child", error_type=type(e).__name__,
                       message=text, signature=signature(type(e).__name__, text), device=request["device"],
                       traceback="".join(traceback.format_exception(type(e), e, e.__traceback__))[-8000:]).to_dict()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
