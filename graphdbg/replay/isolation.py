"""Replay in a child process, so that what kills a process ends as an Outcome.

The child loads the case from a dump folder: the dump itself when the Case came unchanged
from one, else a temporary dump written from the Case. It writes its Outcome as JSON; the
parent reads it, or, when there is none, turns the exit status into an Outcome:

- killed by a signal (segfault, abort, CUDA illegal memory access ending in SIGABRT): crash,
  signature ``Signal SIGSEGV``;
- past the timeout: the whole process group is killed, and the outcome is ``timeout``;
- a replay that could not start (unknown backend, missing device): GraphdbgError, as in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from graphdbg.errors import GraphdbgError
from graphdbg.capture.write import save_case
from graphdbg.replay.outcome import Outcome

if TYPE_CHECKING:
    from graphdbg.case import Case
    from graphdbg.dump import Dump

STDERR_TAIL = 3000


def _spec_of(obj: Any) -> str:
    """A callable the child can import again, as module:qualname."""
    if isinstance(obj, str):
        return obj
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qual or "<locals>" in qual or module == "__main__":
        raise GraphdbgError(f"{obj!r} can't be sent to an isolated replay; give it as package.module:callable")
    return f"{module}:{qual}"


def run_isolated(case: Case | Dump, backend: str | Callable[..., Any], passes: str | Sequence[Any] | None, *,
                 timeout: float | None, device: Any = None, **options: Any) -> Outcome:
    """Replay a Case, or a Dump on ``device`` (its inputs then load only in the child)."""
    if passes is not None and not isinstance(passes, str):
        passes = ",".join(_spec_of(p) for p in passes)
    if _is_dump(case):
        device = case.resolve_device(device)
    else:
        device = case.device
    request: dict[str, Any] = {"backend": _spec_of(backend), "passes": passes, "device": str(device), "options": options}
    with tempfile.TemporaryDirectory(prefix="graphdbg-child-") as tmp:
        tmpdir = Path(tmp)
        if _is_dump(case):
            request["dump"] = str(case.path)
        elif case.dump is not None and not case.modified:
            request["dump"] = str(case.dump.path)
        else:
            request["dump"] = str(save_case(case, tmpdir / "case"))
        request_path, outcome_path = tmpdir / "request.json", tmpdir / "outcome.json"
        request_path.write_text(json.dumps(request))
        cmd = [sys.executable, "-m", "graphdbg.replay.child", str(request_path), str(outcome_path)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            _, err = proc.communicate()
            return Outcome(status="timeout", backend=str(request["backend"]), signature=f"Timeout after {timeout:g}s",
                           stage="child", device=request["device"], isolated=True, stderr_tail=(err or "")[-STDERR_TAIL:])
        outcome = child_outcome(proc.returncode, outcome_path, err or "", str(request["backend"]), request["device"])
        if outcome.stage == "child" and outcome.error_type == "GraphdbgError":
            raise GraphdbgError(outcome.message)  # the replay could not start: an error, not an outcome
        return outcome


def child_outcome(returncode: int | None, outcome_path: Path, err: str, backend: str, device: str | None) -> Outcome:
    """What a replay child left behind, as an Outcome: its own, else what its exit says
    (a signal: crash ``Signal SIGSEGV``; a plain exit without an outcome: ``ChildExited``)."""
    tail = err[-STDERR_TAIL:]
    if outcome_path.exists():
        data = json.loads(outcome_path.read_text())
        if "error" in data:
            return Outcome(status="crash", backend=backend, stage="child", error_type="GraphdbgError", device=device,
                           signature=f"GraphdbgError: {data['error']}", message=data["error"], isolated=True, stderr_tail=tail)
        outcome = Outcome.from_dict(data)
        outcome.isolated = True
        outcome.stderr_tail = tail or None
        return outcome
    outcome = Outcome(status="crash", backend=backend, stage="child", device=device, isolated=True, stderr_tail=tail)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        outcome.exit_signal = outcome.error_type = name
        outcome.signature = f"Signal {name}"
        outcome.message = f"the replay process was killed by {name}"
    else:
        outcome.exit_code_child = returncode
        outcome.error_type = "ChildExited"
        outcome.signature = f"ChildExited: exit code {returncode}"
        outcome.message = f"the replay process exited with code {returncode} without an outcome"
    return outcome


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _is_dump(obj: Any) -> bool:
    # A Dump has a manifest and no graph module yet; a Case has ``gm``. Told apart by shape so
    # that isolation, which the Case's own ``run`` reaches, needn't import the nouns.
    return hasattr(obj, "manifest") and not hasattr(obj, "gm")
