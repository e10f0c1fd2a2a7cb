"""A long-lived sandboxed child that runs one dump's graphs job after job: minify's candidates
and its recording of every node's value, without a fresh interpreter and torch import each.

    >>> with WorkerPool("graphdbg.execution.worker_main", dump="dumps/g0", size=1) as pool:
    ...     outcome = pool.replay(candidate, replay_request(candidate, "inductor", opts), timeout=60)
    >>> folder, reply = pool.ask({"task": "values", ...}, timeout=60)    # any job the worker knows

The worker is started as a replay child is (``python -I``, the sandbox, the memory cap of a CPU
replay: ``execution.sandbox``), but may write only under its own ``work/`` folder. It is sent jobs
as data, never code: the parent writes a job's request (and the candidate, saved as a dump
folder: a printed graph the worker parses and safetensors) into ``jobs/N``, which the worker
can read and not write, then writes the job's number on the worker's stdin. The worker answers
in ``work/N`` (``answer.json``, its output in ``stderr.txt``) and writes the number back on
its stdout. The parent waits for that line at most the job's timeout (a select
on the pipe, a bounded read: ``gate.read_pipe``) and reads the answer through the gate, as it
reads a replay child's. A job past its timeout, or a worker that died (a segfault, the memory
cap), ends that worker with everything it started (``ChildGroup``); the next job starts a new
one. A worker is also replaced after ``MAX_JOBS`` jobs (what leaks in it is bounded) and after a
device error (a CUDA context that failed stays failed).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphdbg.execution.isolation import ChildGroup, put_case, replay_outcome, tail_of
from graphdbg.execution.sandbox import SANDBOX_NOTE, child_env, child_path, python_command, trust_level
from graphdbg.store.safe_files import read_pipe, write_file

if TYPE_CHECKING:
    from graphdbg.case import Case
    from graphdbg.outcome import Outcome

WORKER_MODULE = "graphdbg.execution.worker_main"  # the worker's side: the tasks it answers
MAX_JOBS = 200  # jobs one worker runs before a fresh one takes over
ANSWER, REQUEST, STDERR = "answer.json", "request.json", "stderr.txt"
_DEVICE_ERRORS = ("CUDA error", "device-side assert", "AcceleratorError", "illegal memory access")


@dataclass
class Reply:
    """How a job ended: ``answered`` (its answer is in its folder), or not, with the worker's
    exit status (None: it ran past its timeout and was killed), and its output's tail."""

    answered: bool
    returncode: int | None
    err: str


class Worker:
    """One sandboxed worker process and its folder (its own ``work/``, one ``jobs/N/`` per job)."""

    def __init__(self, module: str, device: str, dump: str | None, specs: list[str | None]):
        self.key = (device, dump, tuple(specs))
        self.folder = Path(tempfile.mkdtemp(prefix="graphdbg-worker-"))
        own = self.folder / "work"  # the worker's own folder: where the sandbox lets it write (with the caches)
        own.mkdir()
        env = {**child_env(own, device, dump, trust_level(specs)), **child_path(specs)}
        self.group = ChildGroup(python_command(module, str(self.folder)), self.folder / STDERR, env=env, pipes=True)
        self.jobs = 0
        self.alive = True
        self._heard = b""

    def job_folder(self) -> Path:
        """A new job's folder, ``jobs/N``: written by this process alone (the worker may read it,
        never write there: nothing it plants can lead this process's writes elsewhere)."""
        self.jobs += 1
        folder = self.folder / "jobs" / str(self.jobs)
        folder.mkdir(parents=True)
        return folder

    def answers(self, folder: Path) -> Path:
        """Where the worker answers the job of ``folder``: ``work/N``, in its own folder."""
        return self.folder / "work" / folder.name

    def ask(self, folder: Path, request: dict[str, Any], timeout: float) -> Reply:
        """Run the job whose folder is ``folder``; at most ``timeout`` seconds."""
        write_file(folder / REQUEST, _dumps(request), create_parent=False)
        token = f"{folder.name}\n".encode()
        folder = self.answers(folder)
        try:
            os.write(self.group.proc.stdin.fileno(), token)  # a line: the pipe always has room for it
        except OSError:  # it died between jobs
            return self._ended(folder, dead=True)
        deadline = time.monotonic() + timeout
        while True:
            got = read_pipe(self.group.proc.stdout.fileno(), max_bytes=4096, timeout=deadline - time.monotonic())
            if got is None and time.monotonic() >= deadline:
                return self._ended(folder, dead=False)
            if got == b"":
                return self._ended(folder, dead=True)
            self._heard = (self._heard + (got or b""))[-4096:]
            if token in self._heard:
                self._heard = b""
                return Reply(True, 0, tail_of(folder / STDERR))

    def _ended(self, folder: Path, dead: bool) -> Reply:
        """The job ended without an answer: the worker ``dead`` (its exit status), or past its
        timeout (None); either way it is ended with all it started, its output read first."""
        code: int | None = None
        if dead:
            try:
                code = self.group.proc.wait(timeout=10)
            except Exception:
                code = -9
        self.group.kill()
        reply = Reply(False, code, tail_of(folder / STDERR) or tail_of(self.folder / STDERR))
        self.close()
        return reply

    @property
    def sandbox_note(self) -> Path:
        return self.folder / "work" / SANDBOX_NOTE

    def close(self) -> None:
        self.alive = False
        self.group.kill()
        for pipe in (self.group.proc.stdin, self.group.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


class WorkerPool:
    """Up to ``size`` workers (one per candidate run at once), started when first asked,
    each replaced when it dies, runs past a timeout or has run ``MAX_JOBS`` jobs."""

    def __init__(self, module: str, *, dump: str | None = None, size: int = 1, specs: list[str | None] = ()):
        """``specs``: the backend and passes (``module:callable``) the jobs import, by default."""
        self.module, self.dump, self.size, self.specs = module, dump, max(1, size), list(specs)
        self.idle: list[Worker] = []
        self.busy: set[Worker] = set()
        self._lock = threading.Lock()
        self.started = 0  # workers started, for the tests and the log

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def take(self, device: str, specs: list[str | None]) -> Worker:
        with self._lock:
            key = (device, self.dump, tuple(specs))
            worker = next((w for w in self.idle if w.key == key), None)
            if worker is not None:
                self.idle.remove(worker)
            else:
                worker = _spare(key)
            if worker is None and len(self.idle) + len(self.busy) >= self.size and self.idle:
                self.idle.pop(0).close()  # one for other settings: make room
        if worker is None:
            worker = Worker(self.module, device, self.dump, specs)
            self.started += 1
        with self._lock:
            self.busy.add(worker)
        return worker

    def give(self, worker: Worker, keep: bool) -> None:
        with self._lock:
            self.busy.discard(worker)
            if keep and worker.alive and worker.jobs < MAX_JOBS:
                self.idle.append(worker)
                return
        worker.close()

    def ask(self, request: dict[str, Any], timeout: float, *, case: Case | None = None,
            specs: list[str | None] | None = None) -> tuple[Path, Reply, Worker]:
        """Run one job: ``request`` (with the dump ``case`` saved into the job's folder, when
        given) on a worker; (the job's folder, how it ended, the worker). The caller reads the
        answer, then calls ``done``."""
        worker = self.take(request["device"], self.specs if specs is None else list(specs))
        folder = worker.job_folder()
        if case is not None:
            put_case(case, request, folder)
        return worker.answers(folder), worker.ask(folder, request, timeout), worker

    def done(self, answers: Path, worker: Worker, keep: bool = True) -> None:
        """The job whose answers are in ``answers`` is read: remove its folders (each a path the
        worker can't redirect: ``work`` and ``jobs`` lie in a folder it can't write; a link it
        put as ``work/N`` is removed, never followed)."""
        shutil.rmtree(worker.folder / "jobs" / answers.name, ignore_errors=True)
        if answers.is_symlink():
            answers.unlink()
        else:
            shutil.rmtree(answers, ignore_errors=True)
        self.give(worker, keep)

    def replay(self, case: Case, request: dict[str, Any], timeout: float) -> Outcome:
        """A replay job (``executor.SandboxedWorkers``), on a worker."""
        folder, reply, worker = self.ask({**request, "task": "replay"}, timeout, case=case,
                                         specs=[request["backend"], request["passes"]])
        keep = False
        try:
            outcome = replay_outcome(request, reply.returncode if not reply.answered else 0, folder / ANSWER, reply.err,
                                     timeout, worker.sandbox_note)
            keep = reply.answered and not any(e in str(outcome.signature or "") for e in _DEVICE_ERRORS)
            return outcome
        finally:
            self.done(folder, worker, keep)

    def close(self) -> None:
        """End the busy workers; the idle ones are kept as spares for this process's next pool
        over the same dump, device and backend (a notebook's or a test suite's next minify)."""
        with self._lock:
            idle, busy, self.idle, self.busy = self.idle, self.busy, [], set()
        for w in busy:
            w.close()
        for w in idle:
            _keep_spare(w)


# Idle workers a closed pool left, newest last, at most ``SPARES``; ended when this process
# exits (and, by PR_SET_PDEATHSIG, when it is killed).
SPARES = 2
_SPARES: list[Worker] = []
_SPARES_LOCK = threading.Lock()


def _spare(key: tuple[Any, ...]) -> Worker | None:
    with _SPARES_LOCK:
        for w in reversed(_SPARES):
            if w.key == key:
                _SPARES.remove(w)
                if w.alive and w.group.proc.poll() is None:
                    return w
                w.close()
    return None


def _keep_spare(worker: Worker) -> None:
    if not worker.alive or worker.jobs >= MAX_JOBS or worker.group.proc.poll() is not None:
        worker.close()
        return
    with _SPARES_LOCK:
        _SPARES.append(worker)
        old = _SPARES[:-SPARES] if len(_SPARES) > SPARES else []
        del _SPARES[:len(old)]
    for w in old:
        w.close()


@atexit.register
def close_spares() -> None:
    with _SPARES_LOCK:
        spares = list(_SPARES)
        _SPARES.clear()
    for w in spares:
        w.close()


def _dumps(request: dict[str, Any]) -> str:
    return json.dumps(request, default=str)  # plain JSON: what the worker is sent is data, never code
