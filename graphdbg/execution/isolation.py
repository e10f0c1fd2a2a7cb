"""Replay in a child process, so that what kills a process ends as an Outcome.

The child loads the case from a dump folder: the dump itself when the Case came unchanged
from one, else a temporary dump written from the Case. It writes its Outcome as JSON; the
parent reads it, or, when there is none, turns the exit status into an Outcome:

- killed by a signal (segfault, abort, CUDA illegal memory access ending in SIGABRT): crash,
  signature ``Signal SIGSEGV``;
- past the timeout (600 s unless told): the whole process group is killed, and the outcome
  is ``timeout``; the group is also killed when the child ends, and on SIGTERM or SIGINT to
  the parent (see ``ChildGroup``);
- a replay that could not start (unknown backend, missing device): GraphdbgError, as in-process.

The child is an isolated interpreter (``python -I``: nothing of the folder it runs in is
imported) and runs sandboxed (``graphdbg.execution.sandbox``): no new privileges, writes only
under its own folder, which holds its compiler caches too (Landlock), no sockets and no way
around the filter (seccomp); the Outcome's ``sandbox`` says what was applied, or ``none (why)``.
What it leaves behind is read through the gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import psutil

from graphdbg.backends.resolve import backend_label, backend_spec, names_code
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.execution.sandbox import (
    CHILD_PATH_ENV,
    SANDBOX_NOTE,
    child_env,
    child_path,
    python_command,
    trust_level,
    with_module,
)
from graphdbg.judge.fatal_signal import died_of
from graphdbg.outcome import Outcome
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.store.safe_files import read_child_file, read_json

if TYPE_CHECKING:
    from graphdbg.case import Case
    from graphdbg.dump import Dump

STDERR_TAIL = 3000


def spec_of(obj: Any) -> str:
    """A callable the child can import again, as module:qualname."""
    if isinstance(obj, str):
        return obj
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qual or "<locals>" in qual or module == "__main__":
        raise GraphdbgError(f"{obj!r} can't be sent to an isolated replay; give it as package.module:callable")
    return f"{module}:{qual}"


def run_isolated_many(case: Case | Dump, backend: str | Callable[..., Any], opts: ReplayOptions, runs: int,
                      deadline: float | None = None) -> list[Outcome]:
    """``runs`` replays one after another in one fresh child (``replay --repeat``), each with
    its own ``opts.timeout``. A run that kills the child (a signal, its timeout) ends the list:
    its Outcome is the last one, and fewer than ``runs`` come back. ``deadline`` (``time.monotonic``):
    after it, once a run is done, the child is ended and the runs done come back (the one under
    way is not counted). ``opts.python``: the child runs that interpreter (``bisect envs``), and
    says what its environment is."""
    return _in_one_child(case, [backend] * runs, opts, deadline=deadline)


def run_isolated_each(case: Case | Dump, backends: Sequence[str | Callable[..., Any]], opts: ReplayOptions,
                      started: Callable[[int], None] | None = None) -> list[Outcome]:
    """One isolated replay per backend (``compare``'s columns), in order, in as few children as
    each column's outcome being its own allows: one child runs the columns one after another,
    each with its own ``opts.timeout`` and its own stderr. A column that ends its child (a
    signal, its timeout, an exit without an Outcome) has that as its Outcome, and the columns
    after it go to a fresh child. The child also ends after a column that could not start, one
    that crashed on an accelerator (a CUDA error stays with its process) and one whose backend
    imports user code (whatever its import leaves in the process would reach the next columns).
    ``started(i)``: column ``i`` began, as far as this process can tell (when the previous
    column's Outcome appears)."""
    told = [-1]

    def tell(i: int) -> None:  # once per column: a column the last child told of may start in the next
        if started is not None and i > told[0]:
            told[0] = i
            started(i)

    outcomes: list[Outcome] = []
    while len(outcomes) < len(backends):
        first = len(outcomes)
        last = next((i for i in range(first, len(backends)) if names_code(backends[i])), len(backends) - 1)
        outcomes += _in_one_child(case, list(backends[first:last + 1]), opts, columns=True,
                                  started=lambda i, first=first: tell(first + i))
    return outcomes


def _in_one_child(case: Case | Dump, backends: list[str | Callable[..., Any]], opts: ReplayOptions, columns: bool = False,
                  started: Callable[[int], None] | None = None, deadline: float | None = None) -> list[Outcome]:
    """A replay per item of ``backends`` in one fresh child (the same backend each time for
    ``replay --repeat``; ``columns``: compare's, each its own stderr and the child's rules for
    ending early, ``graphdbg.execution.child``); fewer come back when a run ended the child."""
    request = replay_request(case, backends[0], opts)
    timeout = DEFAULT_TIMEOUT if opts.timeout is None else float(opts.timeout)
    if opts.python:
        request["environment"] = True
    with tempfile.TemporaryDirectory(prefix="graphdbg-child-", ignore_cleanup_errors=True) as tmp:
        tmpdir = Path(tmp)
        on_disk = put_case(case, request, tmpdir)
        request_path, outcome_path, err_path = tmpdir / "request.json", tmpdir / "outcome.json", tmpdir / "stderr.txt"
        runs = len(backends)
        paths = [outcome_path] if runs == 1 else [tmpdir / f"outcome-{i}.json" for i in range(runs)]
        errs = [err_path] * runs
        if runs > 1:
            request["outcomes"] = [str(p) for p in paths]
        if columns:
            request["backends"] = [child_specs(b, opts)[0] for b in backends]
            errs = [err_path, *(tmpdir / f"stderr-{i}.txt" for i in range(1, runs))]
            request["stderr"] = [str(p) for p in errs]
        request_path.write_text(json.dumps(request))
        cmd = python_command("graphdbg.execution.child", str(request_path), str(outcome_path), python=opts.python)
        own = tmpdir / "work"  # the child's own folder: the only place the sandbox lets it write (with the caches)
        own.mkdir()
        specs = [*request.get("backends", [request["backend"]]), request["passes"]]
        env = {**child_env(own, request["device"], on_disk, trust_level(specs, opts.trust_kernels)), **child_path(specs)}
        if opts.python:  # another environment: this graphdbg, found after all of its own packages
            env[CHILD_PATH_ENV] = with_module(env[CHILD_PATH_ENV], "graphdbg", Path(__file__).resolve().parents[2])
        with ChildGroup(cmd, err_path, env=env) as child:
            stopped: list[bool] = []
            returncode = _wait_runs(child, paths, timeout, started, deadline, stopped)
            tails = [tail_of(p) for p in dict.fromkeys(errs)]
        err = dict(zip(dict.fromkeys(errs), tails))
        note = own.parent / SANDBOX_NOTE
        written = [p for p in paths if os.path.lexists(p)]
        outcomes = [replay_outcome(_run(request, i), 0 if returncode is None else returncode, p, err[errs[i]], timeout, note)
                    for i, p in enumerate(written)]
        if len(written) < len(paths) and (returncode != 0 or not written) and not stopped:  # the run after the last written one ended the child
            i = len(written)
            outcomes.append(replay_outcome(_run(request, i), returncode, tmpdir / "none", err[errs[i]], timeout, note))
        return outcomes


def _run(request: dict[str, Any], i: int) -> dict[str, Any]:
    """The request of a child's run ``i``: its own backend among compare's columns."""
    return {**request, "backend": request["backends"][i]} if "backends" in request else request


def _wait_runs(child: ChildGroup, paths: list[Path], timeout: float, started: Callable[[int], None] | None = None,
               deadline: float | None = None, stopped: list[bool] | None = None) -> int | None:
    """The child's exit status, or None when one run took longer than ``timeout``: each
    Outcome file written (``paths``, in order) starts the next run's clock (and ``started``).
    Past ``deadline``, with a run done, None too, and ``stopped`` gets True (the total bound)."""
    told = 0

    def seen(written: int) -> None:  # runs 1 to ``written`` began (each written Outcome starts the next)
        nonlocal told
        for i in range(told, min(written + 1, len(paths))):
            started(i)  # type: ignore[misc]
        told = max(told, min(written + 1, len(paths)))

    if started is not None:
        seen(0)
    if len(paths) == 1:
        return child.wait(timeout)
    done, began = 0, time.monotonic()
    try:
        while True:
            try:
                code = child.proc.wait(timeout=min(1.0, timeout))
            except subprocess.TimeoutExpired:
                code = None
            written = done  # written in order: count on from the last seen (a million runs are a million paths)
            while written < len(paths) and os.path.lexists(paths[written]):
                written += 1
            if started is not None:  # an exit without this run's Outcome: it began (and ended the child) unless all went well
                seen(written if code is None or code != 0 else written - 1)
            if code is not None:
                return code
            if written > done:
                done, began = written, time.monotonic()
            elif time.monotonic() - began > timeout:
                return None
            if deadline is not None and written and time.monotonic() > deadline:
                if stopped is not None:
                    stopped.append(True)
                return None
    finally:
        child.kill()


def replay_request(case: Case | Dump, backend: str | Callable[..., Any], opts: ReplayOptions) -> dict[str, Any]:
    """What a replay child is asked (all but the dump, which ``put_case`` adds)."""
    backend, passes = child_specs(backend, opts)
    if _is_dump(case):  # a CPU replay is known without torch: its parent needn't import it
        device = "cpu" if case.cpu_replay(opts.device) else case.resolve_device(opts.device)
    else:
        device = case.device
    return {"backend": backend, "passes": passes, "device": str(device), "options": opts.for_child()}


def child_specs(backend: str | Callable[..., Any], opts: ReplayOptions) -> list[str | None]:
    """The backend and passes as a child names them (``module:callable``: ``child_path``);
    GraphdbgError for one no other process can import."""
    passes = opts.passes
    if passes is not None and not isinstance(passes, str):
        passes = ",".join(spec_of(p) for p in passes)
    return [backend_spec(backend), passes]


def put_case(case: Case | Dump, request: dict[str, Any], folder: Path) -> str | None:
    """Name in ``request`` the dump the child loads: the dump itself when the Case came
    unchanged from one, else the Case saved as a dump under ``folder``. Returns the dump's
    path when it is one on disk (its replays share a compile cache), else None."""
    if _is_dump(case) or (case.dump is not None and not case.modified):
        dump = case if _is_dump(case) else case.dump
        request["dump"] = str(dump.path)
        if dump.format == "dump":  # checked by this process's load: the child needn't check it again
            request["manifest"] = dump.manifest_data
        return str(dump.path)
    from graphdbg.case import save_case  # a Case: torch is here already

    request["dump"] = str(save_case(case, folder / "case"))
    return None


def replay_outcome(request: dict[str, Any], returncode: int | None, outcome_path: Path, err: str, timeout: float,
                   note: Path) -> Outcome:
    """The Outcome of one replay in a child: ``timeout`` when ``returncode`` is None (it ran
    past ``timeout``), else what it wrote or what its exit says; GraphdbgError for a replay that
    could not start. ``note``: the sandbox note the child left, for an outcome it never wrote."""
    label = backend_label(request["backend"])
    if returncode is None:
        return Outcome(status="timeout", backend=label, signature=f"Timeout after {timeout:g}s",
                       stage="child", device=request["device"], isolated=True, stderr_tail=err)
    outcome = child_outcome(returncode, outcome_path, err, label, request["device"])
    if outcome.sandbox is None:  # killed before it wrote an outcome: what the child said it applied
        outcome.sandbox = _read_small(note)
    if outcome.stage == "child" and outcome.error_type == "GraphdbgError":
        raise GraphdbgError(outcome.message)  # the replay could not start: an error, not an outcome
    return outcome


def run_job_isolated(dump: Dump, job: dict[str, Any], opts: ReplayOptions, specs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``job`` (``{"kind": "swap" | "bisect-ops", ...}``: ``execution.jobs.case_job``)
    on ``dump`` in a sandboxed replay child, as ``run_isolated`` runs a replay; its JSON result.
    ``specs``: the user's ``module:function`` references, importable there as a backend is.
    A child that fails, dies or runs past the timeout is a GraphdbgError (one line)."""
    device = "cpu" if dump.cpu_replay(opts.device) else dump.resolve_device(opts.device)
    timeout = DEFAULT_TIMEOUT if opts.timeout is None else float(opts.timeout)
    request: dict[str, Any] = {"backend": "eager", "passes": None, "device": str(device), "options": opts.for_child(),
                               "job": job, "dump": str(dump.path)}
    if dump.format == "dump":
        request["manifest"] = dump.manifest_data
    with tempfile.TemporaryDirectory(prefix="graphdbg-child-", ignore_cleanup_errors=True) as tmp:
        tmpdir = Path(tmp)
        request_path, result_path, err_path = tmpdir / "request.json", tmpdir / "outcome.json", tmpdir / "stderr.txt"
        request_path.write_text(json.dumps(request))
        own = tmpdir / "work"
        own.mkdir()
        env = {**child_env(own, request["device"], str(dump.path), trust_level(specs, opts.trust_kernels)),
               **child_path(list(specs))}
        with ChildGroup(python_command("graphdbg.execution.child", str(request_path), str(result_path)), err_path, env=env) as child:
            returncode = child.wait(timeout)
            err = tail_of(err_path)
        what = f"{job.get('kind')} in the replay child"
        if returncode is None:
            raise GraphdbgError(f"{what}: no result after {timeout:g}s (--timeout)")
        if not os.path.lexists(result_path):
            last = (err.strip().splitlines() or [f"exit code {returncode}"])[-1][:300]
            raise GraphdbgError(f"{what} ended without a result: {last}")
        data = read_json(tmpdir, result_path.name, what="the child's result")  # through the gate, as an outcome
    if not isinstance(data, dict) or "error" in data or not isinstance(data.get("result"), dict):
        error = data.get("error") if isinstance(data, dict) else None
        if error is None and isinstance(data, dict) and data.get("status") == "crash":
            error = data.get("message")
        raise GraphdbgError(f"{what}: {str(error)[:500] if error is not None else 'garbage result'}")
    return data["result"]


class _Expired(BaseException):
    pass


@contextlib.contextmanager
def deadline(seconds: float | None, what: str) -> Iterator[None]:
    """End an in-process run (``bisect nodes``) after ``seconds`` with a GraphdbgError (exit 2)
    naming ``what``: SIGALRM, so Python code (a backend stuck in a loop or a sleep) is stopped;
    a C call that never returns to Python is not. Main thread on POSIX only; else nothing."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise _Expired  # a BaseException: code that catches Exception around a backend can't swallow it

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    except _Expired:
        raise GraphdbgError(f"{what}: no result after {seconds:g}s (--timeout)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _read_small(path: Path) -> str | None:
    try:  # through the gate: the child could have swapped its note for a FIFO or a link
        return read_child_file(path, max_bytes=2000, tail=True).decode("utf-8", errors="replace").strip() or None
    except DumpError:
        return None


def tail_of(path: Path, limit: int = STDERR_TAIL) -> str:
    """The last ``limit`` characters of a child's output file (however much it wrote), read
    through the gate: the child may have replaced it by a FIFO or a link before it died."""
    try:
        data = read_child_file(path, max_bytes=4 * limit, tail=True)
    except DumpError:
        return ""
    return data.decode("utf-8", errors="replace")[-limit:]


class ChildGroup:
    """A child process in its own session and process group, with everything it starts.

    - Its output goes to a file (stdout is dropped), so nothing waits on a pipe that a
      grandchild still holds, and a child that prints gigabytes costs disk, not memory here.
    - ``wait`` waits on the child's pid only; then, finished or timed out, the child is
      killed with every process it started (psutil: its descendants, by parentage), its process
      group, and every process that carries this replay's token in its environment
      (``$GRAPHDBG_REPLAY_TOKEN``): a grandchild that left the group with ``setsid`` is found
      by its parent while that lives, by its token after.
    - SIGTERM, SIGHUP (the terminal closed) and SIGINT to this process (the main thread's
      handlers) end every live group first, then act as before (KeyboardInterrupt;
      SystemExit(128 + signal) for SIGTERM and SIGHUP), so the temporary folder is removed on
      the way out.
    - The child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``,
      ``graphdbg.execution.child``), which covers a parent killed with SIGKILL. What remains: the
      child's own children outlive a SIGKILLed parent, and a grandchild that left the group,
      cleared its environment and outlived its parent is never found.

        >>> with ChildGroup(python_command("this.module"), Path("err.txt")) as child:
        ...     child.wait(10)
        0
    """

    def __init__(self, cmd: list[str], err_path: Path, env: dict[str, str] | None = None, pipes: bool = False,
                 inherit: bool = True):
        """``pipes``: the child's stdin and stdout are pipes (``proc.stdin``, ``proc.stdout``),
        for a worker that is sent jobs and answers each with a line (``graphdbg.execution.worker``).
        ``env`` is added to this process's environment, or with ``inherit=False`` is the whole of it
        (a self-check: the user's environment, not the one graphdbg runs in)."""
        self.token = uuid.uuid4().hex
        env = {**(os.environ if inherit else {}), **(env or {}), "PYTHONFAULTHANDLER": "1", TOKEN_ENV: self.token,
               PARENT_ENV: str(os.getpid())}
        _install_signal_handlers()
        channel = subprocess.PIPE if pipes else subprocess.DEVNULL
        with open(err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=channel, stdout=channel, stderr=err,
                                         start_new_session=True, env=env)
        _LIVE[self.proc.pid] = self

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def wait(self, timeout: float | None) -> int | None:
        """The child's exit status, or None when it ran past ``timeout`` (then all is killed)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.kill()

    def kill(self) -> None:
        """End the child and every process it started; idempotent."""
        if _LIVE.pop(self.proc.pid, None) is None:
            return
        try:  # before the child dies: then its children are the init process's, no longer found by parentage
            started = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            started = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group at once: nothing in it forks past this
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                self.proc.kill()
        # by token after the kills above: what the dying tree started meanwhile carries it too
        victims = [*started, *_with_token(self.token)]
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.kill()  # psutil's kill checks that the pid is not one reused since by another process
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # SIGKILL lands asynchronously: until they are gone, a grandchild may still write in the
        # child's folder, and removing that folder would fail (Ctrl-C then ended in an OSError)
        psutil.wait_procs(victims, timeout=5)


TOKEN_ENV = "GRAPHDBG_REPLAY_TOKEN"
PARENT_ENV = "GRAPHDBG_REPLAY_PARENT"
_LIVE: dict[int, ChildGroup] = {}
_PREVIOUS: dict[int, Any] = {}


def _with_token(token: str) -> list[psutil.Process]:
    """The processes whose environment carries ``token``; ones we may not read are left out."""
    return [p for p in psutil.process_iter(["environ"]) if (p.info["environ"] or {}).get(TOKEN_ENV) == token]


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # handlers can only be set from the main thread; it sets them for the workers too
    for sig in (signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
        current = signal.getsignal(sig)
        if current is _on_signal:
            continue
        _PREVIOUS[sig] = current
        signal.signal(sig, _on_signal)


def _on_signal(signum: int, frame: Any) -> None:
    for child in list(_LIVE.values()):
        child.kill()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        previous(signum, frame)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    if previous == signal.SIG_IGN:
        return
    raise SystemExit(128 + signum)


def _checked_outcome(data: object, path: Path) -> Outcome | str:
    """outcome.json as the child wrote it: its Outcome, or the error text of a replay that could
    not start; a GraphdbgError (exit 2) naming the first bad field of anything else."""

    where = f"{path}: garbage outcome.json from the replay child"
    if isinstance(data, dict) and "error" in data:
        if not isinstance(data["error"], str):
            raise GraphdbgError(f"{where} (error is not text)")
        return data["error"]
    try:
        return Outcome.checked(data)
    except ValueError as e:
        raise GraphdbgError(f"{where} ({e})") from None


def child_outcome(returncode: int | None, outcome_path: Path, err: str, backend: str, device: str | None) -> Outcome:
    """What a replay child left behind, as an Outcome: its own, else what its exit says
    (a signal: crash ``Signal SIGSEGV``; a plain exit without an outcome: ``ChildExited``)."""
    tail = err[-STDERR_TAIL:]
    if os.path.lexists(outcome_path):
        # through the gate: the child ran a backend, which may have left anything there
        outcome = _checked_outcome(read_json(outcome_path.parent, outcome_path.name, what="outcome.json"), outcome_path)
        if isinstance(outcome, str):
            return Outcome(status="crash", backend=backend, stage="child", error_type="GraphdbgError", device=device,
                           signature=f"GraphdbgError: {outcome}", message=outcome, isolated=True, stderr_tail=tail)
        outcome.isolated = True
        outcome.stderr_tail = tail or None
        return outcome
    outcome = Outcome(status="crash", backend=backend, stage="child", device=device, isolated=True, stderr_tail=tail)
    name = died_of(returncode, tail)  # killed by it, or exited after a handler reported it (as some torch versions do)
    if name:
        outcome.exit_signal = outcome.error_type = name
        outcome.signature = f"Signal {name}"
        outcome.message = f"the replay process was killed by {name}"
    else:
        outcome.exit_code_child = returncode
        outcome.error_type = "ChildExited"
        outcome.signature = f"ChildExited: exit code {returncode}"
        outcome.message = f"the replay process exited with code {returncode} without an outcome"
    return outcome


def _is_dump(obj: Any) -> bool:
    # A Dump has a manifest and no graph module yet; a Case has ``gm``. Told apart by shape so
    # that isolation, which the Case's own ``run`` reaches, needn't import the nouns.
    return hasattr(obj, "manifest_data") and not hasattr(obj, "gm")
