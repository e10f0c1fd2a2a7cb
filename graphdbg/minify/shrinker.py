"""The minifier's driver: run the shrink passes until none of them wins, logging each win.

    >>> result = minify("dumps/rank0/g0-compile_error-1a2b3c4d", "mypkg.backends:mine", out="min")
    >>> result.final_nodes, result.queries, result.cache_hits
    (3, 21, 4)
    >>> print("\\n".join(result.log))     # one line per step: which pass won, nodes after

Hypothesis's shrinker is the model: small named passes over one cached predicate (here the
Oracle, keyed by graph hash), and an order on candidates (fewer nodes, then fewer outputs,
then fewer input elements) so that "smaller" is always well defined and the loop ends.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from graphdbg.backends.recipe import backend_label, is_recipe_spec, recipe_of_spec
from graphdbg.backends.resolve import backend_spec, recorded_backend
from graphdbg.case import Case, save_case
from graphdbg.display import Displayed
from graphdbg.errors import GraphdbgError
from graphdbg.minify.candidates import Candidate, Origin
from graphdbg.minify.oracle import Oracle, case_key
from graphdbg.replay.outcome import Outcome


def size_key(case: Case) -> tuple[int, int, int]:
    outputs = case.gm.graph.output_node().args[0]
    n_out = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    numel = sum(v.numel() for v in case.inputs if isinstance(v, torch.Tensor))
    return (len(case.gm.graph.nodes), n_out, numel)


class MinifyInterrupted(KeyboardInterrupt):
    """Ctrl-C during minify; ``result`` is the best graph found so far (also saved to ``out``)."""

    def __init__(self, result: MinifyResult):
        super().__init__("minify interrupted")
        self.result = result


@dataclass
class Step:
    pass_name: str
    nodes_before: int
    nodes_after: int
    queries: int
    seconds: float
    elements_before: int = 0  # input elements: what shrink_inputs makes smaller
    elements_after: int = 0

    def line(self) -> str:
        what = (f"{self.nodes_before} -> {self.nodes_after} nodes" if self.nodes_before != self.nodes_after
                else f"{self.nodes_after} nodes, input elements {self.elements_before} -> {self.elements_after}")
        return f"{self.pass_name}: {what} ({self.queries} queries, {self.seconds:.1f}s)"


class Shrinker:
    """Holds the best candidate so far; passes ask it to test candidates."""

    def __init__(self, origin: Origin, oracle: Oracle, *, on_improve: Callable[[Shrinker], None] | None = None,
                 log: Callable[[str], None] | None = None):
        self.origin, self.oracle = origin, oracle
        self.best = origin.initial()
        case = origin.build(self.best)
        if case is None:
            raise GraphdbgError("the graph returns nothing a test can check")
        self.best_case = case
        self.best_key = size_key(case)
        self.oracle.cache[case_key(case)] = True  # the original fails: that is why we are here
        self.focused = False
        self.halved = False
        self.steps: list[Step] = []
        self.on_improve, self._log = on_improve, log
        self.started = time.perf_counter()

    # What passes read ------------------------------------------------------------------
    def live(self) -> list[str]:
        resolved = self.origin.resolve(self.best)
        return resolved[1] if resolved else []

    def inputs(self) -> list[str]:
        resolved = self.origin.resolve(self.best)
        return resolved[0] if resolved else []

    def outputs(self) -> list[str]:
        resolved = self.origin.resolve(self.best)
        return resolved[2] if resolved else []

    # What passes ask ------------------------------------------------------------------
    def test(self, cand: Candidate) -> bool:
        return bool(self.test_many([cand])[0])

    def test_many(self, cands: list[Candidate], *, stop_at_first: bool = False) -> list[bool | None]:
        built = [(c, self.origin.build(c)) for c in cands]
        runnable = [(i, c, case) for i, (c, case) in enumerate(built) if case is not None]
        answers: list[bool | None] = [False if case is None else None for _, case in built]
        got = self.oracle.test_many([case for _, _, case in runnable], stop_at_first=stop_at_first)
        for (i, cand, case), ok in zip(runnable, got):
            answers[i] = ok
            if ok and size_key(case) < self.best_key:
                self.best, self.best_case, self.best_key = cand, case, size_key(case)
        return answers

    # The loop ---------------------------------------------------------------------------
    def run(self, passes: list[Callable[[Shrinker], None]]) -> None:
        progress = True
        while progress:
            progress = False
            for p in passes:
                before, q0, t0 = self.best_key, self.oracle.queries, time.perf_counter()
                p(self)
                if self.best_key < before:
                    progress = True
                    step = Step(p.__name__, before[0], self.best_key[0], self.oracle.queries - q0, time.perf_counter() - t0,
                                before[2], self.best_key[2])
                    self.steps.append(step)
                    if self._log:
                        self._log(step.line())
                    if self.on_improve:
                        self.on_improve(self)


@dataclass
class MinifyResult(Displayed):
    """The smallest failing Case found, and how it was found.

        >>> result.case.gm.print_readable()
        >>> result.save("minified/")           # a dump (graph.py, inputs, manifest) + repro.py
        >>> result.to_dict()                   # the --json summary
    """

    case: Case
    outcome: Outcome
    backend: Any
    passes: Any
    accuracy: bool
    direct: bool
    start_nodes: int
    final_nodes: int
    queries: int
    cache_hits: int
    seconds: float
    steps: list[Step] = field(default_factory=list)
    interrupted: bool = False
    saved: Path | None = None

    @property
    def log(self) -> list[str]:
        return [s.line() for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {"start_nodes": self.start_nodes, "final_nodes": self.final_nodes, "oracle_queries": self.queries,
                "cache_hits": self.cache_hits, "seconds": round(self.seconds, 3), "status": self.outcome.status,
                "signature": self.outcome.signature, "accuracy": self.accuracy, "interrupted": self.interrupted,
                "steps": [s.__dict__ for s in self.steps], "out": str(self.saved) if self.saved else None}

    def save(self, out: str | Path) -> Path:
        """Write the minified graph as the only dump under ``out``, with ``repro.py`` beside it;
        returns the dump folder. Written aside first and swapped in, so an interrupt never
        leaves a half-written dump."""
        return save_minified(self.case, self.outcome, out, backend=self.backend, passes=self.passes,
                             direct=self.direct, accuracy=self.accuracy, summary=self.to_dict())


def save_minified(case: Case, outcome: Outcome, out: str | Path, *, backend: Any, passes: Any = None,
                  direct: bool = True, accuracy: bool = False, summary: dict[str, Any] | None = None) -> Path:
    from graphdbg.minify.repro import write_repro
    from graphdbg.store.manifest import read_manifest, write_manifest

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "accuracy" if accuracy else (case.dump.failure_kind if case.dump is not None else None)
    if kind in (None, "captured", "accuracy") and not accuracy:
        kind = "runtime_error" if outcome.stage == "run" else "compile_error"
    staging = Path(tempfile.mkdtemp(prefix=".minify-", dir=out))
    try:
        written = save_case(case, staging, kind=kind)
        manifest = read_manifest(written)
        failure = manifest.setdefault("failure", {})
        failure["kind"] = kind
        if outcome.status == "crash":
            failure["exception"] = {"type": outcome.error_type, "message": outcome.message or ""}
            failure["signature"] = outcome.signature
        else:
            failure["mismatches"] = outcome.mismatches
            failure["signature"] = outcome.signature
            failure["message"] = outcome.message
        manifest["minified"] = {"from": str(case.dump.path) if case.dump is not None else None,
                                "backend": _backend_ref(backend), "passes": _passes_ref(passes), "direct": direct,
                                **(summary or {})}
        ref = _backend_ref(backend)
        if is_recipe_spec(ref):  # aot_autograd(...) / partial: the recipe says how to build it again
            manifest["backend_recipe"] = recipe_of_spec(ref)
        elif not isinstance(backend, str) or ":" in backend:
            manifest["backend"] = ref
        write_manifest(written, manifest)  # checked, then through the gate's writer
        rank_dir = out / written.parent.name
        rank_dir.mkdir(exist_ok=True)
        for old in rank_dir.iterdir():  # exactly one dump under out: the newest best
            shutil.rmtree(old, ignore_errors=True)
        final = rank_dir / written.name
        written.rename(final)
        write_repro(case, backend, out / "repro.py", outcome=outcome, direct=direct, passes=passes)
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _backend_ref(backend: Any) -> str:
    """The backend as a string to record (``recipe:{...}`` for aot_autograd(...)/partial objects)."""
    return backend_spec(backend, strict=False)  # a lambda or a local function: named as well as it can be


def _own_refs(dump: Any) -> set[str]:
    """How a dump's own backend may be spelled: its recorded name, and its recipe if it has one."""
    refs = {dump.backend}
    try:
        refs.add(recorded_backend(dump))
    except GraphdbgError:  # a recipe not in graphdbg's shape is nobody's backend
        pass
    return refs


def _backend_name(backend: Any) -> str:
    """The backend as people read it, for messages."""
    return backend_label(_backend_ref(backend))


def _passes_ref(passes: Any) -> Any:
    if passes is None or isinstance(passes, str):
        return passes
    return [p if isinstance(p, str) else f"{p.__module__}:{p.__qualname__}" for p in passes]


def as_case(case_or_dump: Any, device: Any = None) -> Case:
    """A Case from a Case, a Dump, or a dump folder's path."""
    if isinstance(case_or_dump, Case):
        return case_or_dump
    if isinstance(case_or_dump, (str, Path)):
        from graphdbg.formats import load as load_dump

        case_or_dump = load_dump(case_or_dump)
    return case_or_dump.case(device)


def minify(case_or_dump: Any, backend: Any = None, passes: Any = None, *, accuracy: bool | None = None,
           jobs: int = 1, isolate: bool | None = None, timeout: float | None = None, out: str | Path | None = None,
           progress: Any = None, direct: bool | None = None, rtol: float | None = None, atol: float | None = None,
           device: Any = None, log: Callable[[str], None] | None = None,
           on_query: Callable[[Oracle, Outcome], None] | None = None, any_failure: bool = False) -> MinifyResult:
    """Shrink a failing graph to the smallest one that still fails the same way.

        >>> result = minify("dumps/rank0/g0-compile_error-1a2b3c4d", out="minified")
        >>> result.final_nodes, result.to_dict()["oracle_queries"]
        (3, 19)

    ``backend`` defaults to the dump's own. ``accuracy`` (default: the dump's failure kind, or
    the first replay's outcome) shrinks "still disagrees with the reference" instead of "same
    crash signature". ``isolate`` runs every candidate in a child process (a segfault, abort or
    hang then costs one candidate); by default candidates run in-process unless the failure
    itself killed the replay. ``jobs`` > 1 runs that many isolated candidates at once. ``direct``
    (default: whichever reproduces, trying the fast direct call first) calls ``backend(gm,
    inputs)`` instead of going through ``torch.compile``. With ``out``, the best graph so far is
    saved after every winning step, so Ctrl-C (``MinifyInterrupted``) loses nothing.
    ``progress``: a callable ``(queries, best_nodes, line)``, or True for a rich progress line.

    A dump that recorded a failure keeps it: whatever ``backend`` is, a candidate counts only
    when it fails with the captured signature (for an accuracy dump: still mismatches), so
    another backend can't "minify" a different bug it happens to hit first. ``any_failure``
    lifts that, for shrinking whatever ``backend`` does to the graph.
    """
    from graphdbg.dump import Dump
    from graphdbg.minify.shrink_passes import PASSES
    from graphdbg.replay.run import run_case

    started = time.perf_counter()
    dump = case_or_dump if isinstance(case_or_dump, Dump) else None
    case = as_case(case_or_dump, device)
    dump = dump or case.dump
    # The failure to keep is the one the dump recorded, under any backend; only with
    # ``any_failure`` (or a Case with nothing recorded) is it whatever the backend does first.
    own_backend = dump is not None and (backend is None or _backend_ref(backend) in _own_refs(dump))
    recorded = (dump is not None and not any_failure and not case.modified
                and dump.failure_kind in ("compile_error", "runtime_error", "accuracy", "crash"))
    if backend is None:
        if dump is None:
            raise GraphdbgError("minify needs a backend for a Case that did not come from a dump")
        backend = recorded_backend(dump)
    crashy = bool(dump is not None and str(dump.signature or "").startswith(("Signal ", "Timeout")))
    isolate = crashy if isolate is None else isolate
    isolate = isolate or jobs > 1

    def first_run(use_direct: bool) -> Outcome:
        return run_case(case, backend, passes, isolate=isolate, timeout=timeout, accuracy=True,
                        rtol=rtol, atol=atol, direct=use_direct)

    def fails(o: Outcome) -> bool:
        if recorded:
            return o.reproduces(dump)
        return o.failed and o.stage != "reference"

    # The dump already says how the graph failed. Any smaller candidate that fails the same way
    # proves the failure reproduces here, so the original is only run again when no candidate
    # does (below): one backend run saved on every minify that makes progress.
    lazy = (own_backend and not case.modified and passes is None and direct is not False
            and dump.failure_kind in ("compile_error", "runtime_error", "accuracy", "crash"))
    tries = [] if lazy else ([direct] if direct is not None else [True, False])
    target = _recorded_failure(dump, backend) if lazy else None
    direct = True if lazy else direct
    first_queries = 0
    for d in tries:
        first_queries += 1
        o = first_run(d)
        if fails(o):
            target, direct = o, d
            break
    if target is None:
        if recorded and o.failed:
            raise GraphdbgError(f"{_backend_name(backend)} fails differently from the captured failure "
                                f"({o.summary()}; captured: {dump.signature or dump.failure_kind}); "
                                "pass --any-failure to minify that failure instead")
        raise GraphdbgError(f"the graph does not fail under {_backend_name(backend)} (last outcome: {o.summary()})")
    if recorded and target.status == "crash" and not lazy:
        # the oracle compares candidates with the captured signature, not with this backend's first words
        target = _recorded_failure(dump, backend)
    if accuracy is None:
        accuracy = target.status == "mismatch"

    bar = _progress_reporter(progress)
    oracle = Oracle(target, backend, passes, accuracy=accuracy, isolate=isolate, timeout=timeout, direct=bool(direct),
                    rtol=rtol, atol=atol, jobs=jobs, on_query=on_query)
    oracle.queries = first_queries
    origin = Origin.of(case)
    state: dict[str, Any] = {"saved": None}

    def result(shrinker: Shrinker | None, interrupted: bool = False) -> MinifyResult:
        best = shrinker.best_case if shrinker else origin.build(origin.initial())
        outcome = oracle.outcomes.get(case_key(best), target)
        return MinifyResult(case=best, outcome=outcome, backend=backend, passes=passes, accuracy=bool(accuracy),
                            direct=bool(direct), start_nodes=len(case.gm.graph.nodes), final_nodes=len(best.gm.graph.nodes),
                            queries=oracle.queries, cache_hits=oracle.cache_hits, seconds=time.perf_counter() - started,
                            steps=list(shrinker.steps) if shrinker else [], interrupted=interrupted, saved=state["saved"])

    def on_improve(s: Shrinker) -> None:
        if out is not None:
            state["saved"] = result(s).save(out)

    def say(line: str) -> None:
        if log is not None:
            log(line)
        if bar is not None:
            bar(oracle.queries, shrinker.best_key[0] if shrinker else None, line)

    shrinker: Shrinker | None = None
    if bar is not None:
        user_on_query = oracle.on_query

        def on_query_progress(o: Oracle, outcome: Outcome) -> None:
            bar(o.queries, shrinker.best_key[0] if shrinker else None, None)
            if user_on_query:
                user_on_query(o, outcome)

        oracle.on_query = on_query_progress
    try:
        shrinker = Shrinker(origin, oracle, on_improve=on_improve, log=say)
        shrinker.run(PASSES)
        if lazy and not shrinker.steps:
            # nothing smaller failed: check the original itself, directly, then through Dynamo
            if not fails(oracle.run(case)):
                oracle.queries += 1
                if not fails(first_run(False)):
                    raise GraphdbgError(f"the graph does not fail under {_backend_name(backend)} as the dump recorded")
                retry = minify(case, backend, passes, accuracy=accuracy, jobs=jobs, isolate=isolate, timeout=timeout,
                               out=out, progress=progress, direct=False, rtol=rtol, atol=atol, log=log, on_query=on_query,
                               any_failure=any_failure)
                retry.queries += oracle.queries + 1
                return retry
            oracle.queries += 1
    except KeyboardInterrupt:
        partial = result(shrinker, interrupted=True)
        if out is not None and shrinker is not None:
            # Every winning step was saved when it won; a pass interrupted halfway may have
            # found better since, and that is one quick (atomic) write away.
            if state["saved"] is None or shrinker.best_key[0] < graphdbg_nodes(state["saved"]):
                partial.saved = partial.save(out)
        raise MinifyInterrupted(partial) from None
    finally:
        if bar is not None:
            bar(None, None, None)  # close
    final = result(shrinker)
    if out is not None and final.saved is None:
        final.saved = final.save(out)  # nothing shrank: the original, as a dump with its repro
    return final


def _progress_reporter(progress: Any) -> Callable[[int | None, int | None, str | None], None] | None:
    """A callable (queries, best nodes, log line); None closes it. True: a rich progress line."""
    if progress is None or progress is False:
        return None
    if callable(progress):
        def call(q: int | None, n: int | None, line: str | None) -> None:
            if q is not None:
                progress(q, n, line)

        return call
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True)
    task = bar.add_task("minify", total=None)
    bar.start()

    def update(q: int | None, n: int | None, line: str | None) -> None:
        if q is None:
            bar.stop()
            return
        if line:
            bar.console.print(line)
        bar.update(task, description=f"minify: {q} queries, best {n} nodes")

    return update


def graphdbg_nodes(dump_path: Path) -> int:
    from graphdbg.store.manifest import read_manifest

    return int(read_manifest(dump_path)["graph"].get("nodes", 0))


def _recorded_failure(dump: Any, backend: Any) -> Outcome:
    """The failure a dump recorded, as the Outcome the oracle compares candidates with."""
    name = _backend_name(backend) if backend is not None else dump.backend
    if dump.failure_kind == "accuracy":
        return Outcome(status="mismatch", backend=name, signature=dump.signature)
    sig = dump.signature or ""
    return Outcome(status="crash", backend=name, signature=sig, error_type=dump.error_type, message=dump.message,
                   stage="run" if dump.failure_kind in ("runtime_error", "crash") else "compile",
                   node_target=sig.partition(" @ ")[2] or None)
