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

import contextlib
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from graphdbg.backends.recipe import backend_label, is_recipe_spec, recipe_of_spec
from graphdbg.backends.resolve import backend_spec, recorded_backend
from graphdbg.case import Case, save_case
from graphdbg.display import Displayed
from graphdbg.dump import Dump
from graphdbg.errors import GraphdbgError
from graphdbg.execution.executor import Job, SandboxedWorkers, executor_for
from graphdbg.execution.isolation import child_specs
from graphdbg.formats import load as load_dump
from graphdbg.judge.rate import RateTest
from graphdbg.minify.candidates import Candidate, OriginalGraph, has_symbolic_sizes
from graphdbg.minify.oracle import Oracle, case_key
from graphdbg.minify.repro import write_repro
from graphdbg.minify.shrink_passes import ShrinkPass, Step, default_passes
from graphdbg.outcome import Outcome
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions, replay_options
from graphdbg.replay.run import replay_case
from graphdbg.store.manifest import read_manifest, write_manifest
from graphdbg.store.safe_files import Folder

# Budget defaults: on a 2-core machine a candidate costs 0.1 s (eager) to 10 s (Inductor's C++),
# so either ends a minify within a few minutes.
DEFAULT_MAX_QUERIES = 300
DEFAULT_TIME_BUDGET_S = 240.0


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


class BudgetSpent(Exception):
    """Raised inside a pass when the budget is spent; the Shrinker stops on it."""


@dataclass
class Budget:
    """How much shrinking may cost: backend runs (``max_queries``) and wall time (``seconds``).
    None is no limit. Checked before each batch of candidates, so one candidate (bounded by the
    replay timeout) may run past ``seconds``."""

    max_queries: int | None = DEFAULT_MAX_QUERIES
    seconds: float | None = DEFAULT_TIME_BUDGET_S

    def spent(self, queries: int, elapsed: float) -> str | None:
        """Why the budget is spent, or None while it isn't."""
        if self.max_queries is not None and queries >= self.max_queries:
            return f"{queries} queries of a budget of {self.max_queries}"
        if self.seconds is not None and elapsed >= self.seconds:
            return f"{elapsed:.0f}s of a time budget of {self.seconds:g}s"
        return None


class Predicate:
    """A plain ``Case -> bool`` failure predicate with the surface the passes ask of an Oracle:
    ``test_many``, a cache keyed by graph and inputs, ``queries``, and no pinned target.

        >>> shrink(case, Predicate(lambda c: "gelu" in c.gm.code))
    """

    def __init__(self, fn: Callable[[Case], bool]):
        self.fn = fn
        self.cache: dict[str, bool] = {}
        self.queries = self.cache_hits = 0
        self.jobs = 1
        self.target = None  # nothing pins the failure to a node: focus_failing_node has nothing to try

    def test_many(self, cases: list[Case], *, stop_at_first: bool = False) -> list[bool | None]:
        answers: list[bool | None] = [None] * len(cases)
        for i, case in enumerate(cases):
            key = case_key(case)
            if key in self.cache:
                self.cache_hits += 1
            else:
                self.queries += 1
                self.cache[key] = bool(self.fn(case))
            answers[i] = self.cache[key]
            if stop_at_first and answers[i]:
                break
        return answers


class Shrinker:
    """Holds the best candidate so far; passes ask it to test candidates with its predicate
    (an Oracle, or any object with ``test_many`` and ``queries``, such as ``Predicate``)."""

    def __init__(self, original: OriginalGraph, oracle: Any, *, on_improve: Callable[[Shrinker], None] | None = None,
                 log: Callable[[str], None] | None = None, budget: Budget | None = None):
        self.original, self.oracle = original, oracle
        self.best = original.initial()
        case = original.build(self.best)
        if case is None:
            raise GraphdbgError("the graph returns nothing a test can check")
        self.best_case = case
        self.best_key = size_key(case)
        self.oracle.cache[case_key(case)] = True  # the original fails: that is why we are here
        self.focused = False
        self.halved = False
        self.steps: list[Step] = []
        self.passes: list[ShrinkPass] = []
        self.current: ShrinkPass | None = None  # the pass running now (it counts the candidates it wins with)
        self.on_improve, self._log = on_improve, log
        self.budget = budget or Budget(None, None)
        self.stopped: str | None = None  # why the budget ended the search, if it did
        self.started = time.perf_counter()

    # What passes read ------------------------------------------------------------------
    def live(self) -> list[str]:
        resolved = self.original.resolve(self.best)
        return resolved[1] if resolved else []

    def inputs(self) -> list[str]:
        resolved = self.original.resolve(self.best)
        return resolved[0] if resolved else []

    def outputs(self) -> list[str]:
        resolved = self.original.resolve(self.best)
        return resolved[2] if resolved else []

    # What passes ask ------------------------------------------------------------------
    def test(self, cand: Candidate) -> bool:
        return bool(self.test_many([cand])[0])

    def test_many(self, cands: list[Candidate], *, stop_at_first: bool = False) -> list[bool | None]:
        built = [(c, self.original.build(c)) for c in cands]
        runnable = [(i, c, case) for i, (c, case) in enumerate(built) if case is not None]
        answers: list[bool | None] = [False if case is None else None for _, case in built]
        cases = [case for _, _, case in runnable]
        # a backend run ahead: is there budget for it? Time runs out even on answers from the
        # cache (building candidates costs too): a pass that only meets known graphs still ends
        runs = any(case_key(c) not in self.oracle.cache for c in cases)
        self.stopped = self.budget.spent(self.oracle.queries if runs else -1, time.perf_counter() - self.started)
        if self.stopped:
            raise BudgetSpent(self.stopped)
        got = self.oracle.test_many(cases, stop_at_first=stop_at_first)
        for (i, cand, case), ok in zip(runnable, got):
            answers[i] = ok
            if ok and size_key(case) < self.best_key:
                self.best, self.best_case, self.best_key = cand, case, size_key(case)
                if self.current is not None:
                    self.current.accepted += 1
        return answers

    # The loop ---------------------------------------------------------------------------
    def run(self, passes: list[Any]) -> None:
        """Run ``passes`` (ShrinkPass objects, or plain functions of the Shrinker) in turn until
        none makes the best smaller, or the budget is spent (``stopped`` then says why)."""
        self.passes = [p if isinstance(p, ShrinkPass) else ShrinkPass(p) for p in passes]
        progress = True
        current: ShrinkPass | None = None
        try:
            while progress:
                progress = False
                for current in self.passes:
                    step = current.run(self)
                    if step is not None:
                        progress = True
                        self._won(step)
        except BudgetSpent:
            if current is not None and current.last is not None:  # the pass the budget cut short had won
                self._won(current.last)

    def _won(self, step: Step) -> None:
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
    stopped: str | None = None  # why the budget ended the search (the graph is the best so far), or None
    pass_stats: list[dict[str, Any]] = field(default_factory=list)  # ShrinkPass.stats() of each pass
    failure_rate: float = 1.0  # the share of runs the failure was taken to show on (judge.rate)
    trust_kernels: bool = False  # --trust-kernels: repro_kernels.py defines the graph's Triton kernels from the dump's source

    @property
    def log(self) -> list[str]:
        return [s.line() for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {"start_nodes": self.start_nodes, "final_nodes": self.final_nodes, "oracle_queries": self.queries,
                "cache_hits": self.cache_hits, "seconds": round(self.seconds, 3), "status": self.outcome.status,
                "signature": self.outcome.signature, "accuracy": self.accuracy, "interrupted": self.interrupted,
                "steps": [s.__dict__ for s in self.steps], "out": str(self.saved) if self.saved else None,
                "budget_ended": self.stopped is not None, "stopped": self.stopped, "pass_stats": self.pass_stats,
                "failure_rate": self.failure_rate}

    def save(self, out: str | Path) -> Path:
        """Write the minified graph as the only dump under ``out``, with ``repro.py`` beside it;
        returns the dump folder. Written aside first and swapped in, so an interrupt never
        leaves a half-written dump."""
        return save_minified(self.case, self.outcome, out, backend=self.backend, passes=self.passes,
                             direct=self.direct, accuracy=self.accuracy, summary=self.to_dict(), trust_kernels=self.trust_kernels)


def save_minified(case: Case, outcome: Outcome, out: str | Path, *, backend: Any, passes: Any = None,
                  direct: bool = True, accuracy: bool = False, summary: dict[str, Any] | None = None,
                  trust_kernels: bool = False) -> Path:

    out = Path(out)
    kind = "accuracy" if accuracy else (case.dump.failure_kind if case.dump is not None else None)
    if kind in (None, "captured", "accuracy") and not accuracy:
        kind = "runtime_error" if outcome.stage == "run" else "compile_error"
    with Folder.open(out, create=True) as top:  # below ``out`` no link is followed (a planted rank0/ -> elsewhere)
        staged = f".minify-{uuid.uuid4().hex[:12]}"
        top.sub(staged, create=True).close()
        try:
            return _save_staged(case, outcome, out, top, out / staged, kind=kind, backend=backend, passes=passes,
                                direct=direct, summary=summary, trust_kernels=trust_kernels)
        finally:
            shutil.rmtree(staged, dir_fd=top.fd, ignore_errors=True)


def _save_staged(case: Case, outcome: Outcome, out: Path, top: Folder, staging: Path, *, kind: str | None, backend: Any,
                 passes: Any, direct: bool, summary: dict[str, Any] | None, trust_kernels: bool = False) -> Path:
    """The minified dump written in ``staging`` (a fresh hidden folder of ``out``), then moved to
    be the only dump in ``out``'s rank folder, and ``repro.py`` beside them."""
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
    with top.sub(written.parent.name, create=True) as rank:
        for old in os.listdir(rank.fd):  # exactly one dump under out: the newest best
            if stat.S_ISDIR(os.lstat(old, dir_fd=rank.fd).st_mode):
                shutil.rmtree(old, dir_fd=rank.fd, ignore_errors=True)
            else:  # a link or a file: removed, never followed
                rank.remove(old)
        os.rename(written, written.name, dst_dir_fd=rank.fd)
    write_repro(case, backend, out / "repro.py", outcome=outcome, direct=direct, passes=passes, trust_kernels=trust_kernels)
    return out / written.parent.name / written.name


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

        case_or_dump = load_dump(case_or_dump)
    return case_or_dump.case(device)


def shrink(case: Case, predicate: Any, *, passes: list[Any] | None = None, budget: Budget | None = None,
           on_improve: Callable[[Shrinker], None] | None = None, log: Callable[[str], None] | None = None) -> Shrinker:
    """Shrink ``case`` (which fails) to the smallest candidate ``predicate`` still accepts.

    ``predicate`` is an ``Oracle``, or any ``Case -> bool`` (wrapped in ``Predicate``): the
    failure to keep is the caller's to define, as with torch's fx_minifier and Hypothesis.
    Returns the Shrinker: ``best_case``, ``steps``, ``passes`` (with their statistics) and
    ``stopped`` (why the budget ended it, or None).

        >>> s = shrink(case, lambda c: any("gelu" in str(n.target) for n in c.gm.graph.nodes))
        >>> len(s.best_case.gm.graph.nodes), [p.stats() for p in s.passes]
    """
    if not hasattr(predicate, "test_many"):
        predicate = Predicate(predicate)
    shrinker = Shrinker(OriginalGraph.of(case), predicate, on_improve=on_improve, log=log, budget=budget)
    shrinker.run(passes if passes is not None else default_passes())
    return shrinker


@dataclass(frozen=True)
class RunOptions:
    """How every replay of one minify runs (the first ones, and the oracle's), ``jobs`` at once."""

    replay: ReplayOptions
    jobs: int = 1
    rate: RateTest = RateTest()  # how often the failure shows: how many runs decide each candidate (judge.rate)

    @property
    def passes(self) -> Any:
        return self.replay.passes

    def run(self, case: Case, backend: Any, direct: bool) -> Outcome:
        return replay_case(case, backend, self.replay.but(accuracy=True, direct=direct))

    def oracle(self, target: Target, accuracy: bool, on_query: Any) -> Oracle:
        return Oracle(target.outcome, target.backend, self.replay.but(direct=target.direct), accuracy=accuracy,
                      jobs=self.jobs, on_query=on_query, rate=self.rate)


@dataclass
class Target:
    """The failure a minify keeps, found before any shrinking (``find_target``)."""

    case: Case
    dump: Any
    backend: Any
    outcome: Outcome | None
    direct: bool
    recorded: bool  # a candidate counts only if it shows the failure the dump recorded
    lazy: bool  # taken from the dump unrun: the original is run only if nothing smaller fails
    queries: int = 0  # backend runs spent finding it

    def fails(self, o: Outcome) -> bool:
        if self.recorded:
            return o.reproduces(self.dump, same_size=False)  # a smaller graph's outputs differ in number and size
        return o.failed and o.stage != "reference"


def find_target(case: Case, dump: Any, backend: Any, opts: RunOptions, *, direct: bool | None = None,
                any_failure: bool = False) -> Target:
    """The failure to keep. A dump that recorded a failure keeps it under any backend (only
    ``any_failure``, or a Case with nothing recorded, takes whatever the backend does first).
    Under the dump's own backend the recorded failure is taken without a run (``lazy``): any
    smaller candidate failing the same way proves it. Else the original is run, directly then
    through torch.compile (or as ``direct`` says), until it fails."""
    failed_kind = dump is not None and dump.failure_kind in ("compile_error", "runtime_error", "accuracy", "crash")
    recorded = failed_kind and not any_failure and not case.modified
    own_backend = dump is not None and _backend_ref(backend) in _own_refs(dump)
    if own_backend and failed_kind and not case.modified and opts.passes is None and direct is not False:
        # a dynamic-shape graph is shrunk through torch.compile, which traces its sizes symbolic
        # as captured: called directly, a backend sees only concrete sizes
        # (a piece of a nested compile reached its compiler directly, never through Dynamo: it stays direct)
        piece = dump.manifest.piece
        lazy_direct = bool(direct) or piece or not has_symbolic_sizes(case.gm)
        return Target(case, dump, backend, _recorded_failure(dump, backend), lazy_direct, recorded, lazy=True)
    target = Target(case, dump, backend, None, bool(direct), recorded, lazy=False)
    for d in [direct] if direct is not None else [True, False]:
        verdict = opts.rate.decide(lambda: opts.run(case, backend, d), target.fails)  # a flaky failure: until it shows
        target.queries += verdict.runs
        o = verdict.outcome
        if verdict.keep:
            target.outcome, target.direct = o, d
            break
    if target.outcome is None:
        if recorded and o.failed:
            raise GraphdbgError(f"{_backend_name(backend)} fails differently from the captured failure "
                                f"({o.summary()}; captured: {dump.signature or dump.failure_kind}); "
                                "pass --any-failure to minify that failure instead")
        raise GraphdbgError(f"the graph does not fail under {_backend_name(backend)} (last outcome: {o.summary()})")
    if recorded and target.outcome.status == "crash":
        # the oracle compares candidates with the captured signature, not with this backend's first words
        target.outcome = _recorded_failure(dump, backend)
    return target


def confirm_lazy_target(target: Target, oracle: Oracle, opts: RunOptions) -> Target | None:
    """Nothing smaller failed under a ``lazy`` target: run the original directly (None: it fails,
    the target stands), else through torch.compile (a target to shrink again with, not direct)."""
    verdict = opts.rate.decide(lambda: oracle.run(target.case), target.fails)
    oracle.queries += verdict.runs
    if verdict.keep:
        return None
    try:
        return find_target(target.case, target.dump, target.backend, opts, direct=False, any_failure=not target.recorded)
    except GraphdbgError:
        raise GraphdbgError(f"the graph does not fail under {_backend_name(target.backend)} as the dump recorded") from None


class Minifier:
    """One minify run over a Target: the Oracle, the Shrinker, saving each win under ``out``,
    the progress line, and Ctrl-C (``MinifyInterrupted``) or a spent budget ending it with the
    best graph so far saved."""

    def __init__(self, target: Target, opts: RunOptions, *, accuracy: bool | None, budget: Budget,
                 out: str | Path | None = None, progress: Any = None, log: Callable[[str], None] | None = None,
                 on_query: Callable[[Oracle, Outcome], None] | None = None, started: float | None = None,
                 trust_kernels: bool = False):
        self.target, self.opts, self.budget, self.out, self.log = target, opts, budget, out, log
        self.trust_kernels = trust_kernels
        self.accuracy = target.outcome.status == "mismatch" if accuracy is None else accuracy
        self.started = time.perf_counter() if started is None else started
        self.bar = _progress_reporter(progress)
        self.oracle = opts.oracle(target, self.accuracy, self._on_query(on_query) if self.bar else on_query)
        self.oracle.queries = target.queries
        self.shrinker: Shrinker | None = None
        self.saved: Path | None = None

    def _on_query(self, user: Callable[[Oracle, Outcome], None] | None) -> Callable[[Oracle, Outcome], None]:
        def on_query(o: Oracle, outcome: Outcome) -> None:
            self.bar(o.queries, self.shrinker.best_key[0] if self.shrinker else None, None)
            if user:
                user(o, outcome)

        return on_query

    def say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
        if self.bar is not None:
            self.bar(self.oracle.queries, self.shrinker.best_key[0] if self.shrinker else None, line)

    def on_improve(self, s: Shrinker) -> None:
        if self.out is not None:
            self.saved = self.result().save(self.out)

    def result(self, interrupted: bool = False) -> MinifyResult:
        t, s = self.target, self.shrinker
        best = s.best_case if s else self.original.build(self.original.initial())
        return MinifyResult(case=best, outcome=self.oracle.outcomes.get(case_key(best), t.outcome), backend=t.backend,
                            passes=self.opts.passes, accuracy=bool(self.accuracy), direct=bool(t.direct),
                            start_nodes=len(t.case.gm.graph.nodes), final_nodes=len(best.gm.graph.nodes),
                            queries=self.oracle.queries, cache_hits=self.oracle.cache_hits,
                            seconds=time.perf_counter() - self.started, steps=list(s.steps) if s else [],
                            interrupted=interrupted, saved=self.saved, stopped=s.stopped if s else None,
                            pass_stats=[p.stats() for p in s.passes] if s else [], failure_rate=self.opts.rate.rate,
                            trust_kernels=self.trust_kernels)

    def save_best(self, result: MinifyResult) -> MinifyResult:
        """Save ``result`` unless the best is already on disk (each win was saved when it won)."""
        if self.out is not None and (self.saved is None or result.final_nodes < graphdbg_nodes(self.saved)
                                     or result.stopped):
            result.saved = self.saved = result.save(self.out)
        return result

    def run(self) -> MinifyResult | None:
        """The smallest failing graph, saved under ``out``; None when the target was ``lazy``,
        nothing smaller failed and the original does not fail directly (``self.retry`` is the
        target to try again with)."""
        self.retry: Target | None = None
        case = self.target.case
        grad = bool(case.dump.manifest.grad_enabled) if case.dump is not None else False
        # where minify's runs go (a sandboxed worker when it runs isolated): recording runs the whole graph
        values = executor_for(self.opts.replay).submit(Job("values", case, opts=self.opts.replay, payload={"grad": grad}))
        self.original = OriginalGraph.of(case, values=values)
        try:
            self.shrinker = Shrinker(self.original, self.oracle, on_improve=self.on_improve, log=self.say,
                                     budget=self.budget)
            self.shrinker.run(default_passes())
            if self.target.lazy and not self.shrinker.steps and not self.shrinker.stopped:
                self.retry = confirm_lazy_target(self.target, self.oracle, self.opts)
                if self.retry is not None:
                    self.retry.queries += self.oracle.queries
                    return None
        except KeyboardInterrupt:
            partial = self.result(interrupted=True)
            if self.shrinker is not None:
                self.save_best(partial)
            raise MinifyInterrupted(partial) from None
        finally:
            if self.bar is not None:
                self.bar(None, None, None)  # close
        return self.save_best(self.result())


def minify(case_or_dump: Any, backend: Any = None, passes: Any = None, *, options: ReplayOptions | None = None,
           accuracy: bool | None = None, jobs: int = 1, out: str | Path | None = None, progress: Any = None,
           log: Callable[[str], None] | None = None, on_query: Callable[[Oracle, Outcome], None] | None = None,
           any_failure: bool = False, max_queries: int | None = DEFAULT_MAX_QUERIES,
           time_budget: float | None = DEFAULT_TIME_BUDGET_S, failure_rate: float | None = None,
           **settings: Any) -> MinifyResult:
    """Shrink a failing graph to the smallest one that still fails the same way.

        >>> result = minify("dumps/rank0/g0-compile_error-1a2b3c4d", out="minified")
        >>> result.final_nodes, result.to_dict()["oracle_queries"]
        (3, 19)

    ``backend`` defaults to the dump's own. ``accuracy`` (default: the dump's failure kind, or
    the first replay's outcome) shrinks "still disagrees with the reference" instead of "same
    crash signature". ``settings`` are fields of ``ReplayOptions`` (over ``options``):
    ``isolate`` (the default for a dump) runs the graph, each candidate and the recording of
    every node's value, in a sandboxed worker (a segfault, abort, hang or memory blow-up then
    costs one candidate; ``timeout`` bounds each run); ``isolate=False``, or a backend or pass
    no other process can import, runs it in this process: for a graph you trust. ``jobs`` > 1
    runs that many workers at once. ``direct``
    (default: whichever reproduces, trying the fast direct call first) calls ``backend(gm,
    inputs)`` instead of going through ``torch.compile``. With ``out``, the best graph so far is
    saved after every winning step, so Ctrl-C (``MinifyInterrupted``) loses nothing.
    ``progress``: a callable ``(queries, best_nodes, line)``, or True for a rich progress line.
    ``max_queries`` and ``time_budget`` (seconds; None: no limit) end the search with the best
    graph so far, saved, and ``result.stopped`` saying which budget ended it. ``failure_rate``
    (default: the share of calls that failed at capture, ``failure.calls``, else 1): a failure
    that shows on some runs only is asked of each candidate until a sequential test decides
    (``judge.rate``), so it is neither lost on an unlucky run nor swapped for another.

    A dump that recorded a failure keeps it: whatever ``backend`` is, a candidate counts only
    when it fails with the captured signature (for an accuracy dump: still mismatches), so
    another backend can't "minify" a different bug it happens to hit first. ``any_failure``
    lifts that, for shrinking whatever ``backend`` does to the graph.

    The steps: ``find_target`` (the failure to keep), then a ``Minifier`` runs ``Shrinker``
    (the passes over the Oracle, the failure predicate) and saves; see ``shrink`` for shrinking
    with a predicate of your own.
    """
    started = time.perf_counter()
    opts = replay_options(options, **settings)
    opts = opts.but(passes=passes) if passes is not None else opts
    case, dump = _case_and_dump(case_or_dump, opts.device)
    if backend is None:
        if dump is None:
            raise GraphdbgError("minify needs a backend for a Case that did not come from a dump")
        backend = recorded_backend(dump)
    isolate = _isolated(opts, dump, backend, jobs)
    # isolated: every run of the graph (the first ones, the values, each candidate) in sandboxed workers
    workers = SandboxedWorkers(dump.path if dump is not None else None, size=jobs, specs=child_specs(backend, opts),
                               timeout=DEFAULT_TIMEOUT if opts.timeout is None else float(opts.timeout)) \
        if isolate else None
    # the candidates' kernels stay stand-ins; --trust-kernels is the repro's (repro_kernels.py)
    run_opts = RunOptions(opts.but(isolate=isolate, trust_kernels=False, executor=workers), jobs=jobs,
                          rate=RateTest.of(dump.manifest if dump is not None else None, failure_rate))
    budget = Budget(max_queries, time_budget)
    with workers or contextlib.nullcontext():
        target = find_target(case, dump, backend, run_opts, direct=opts.direct, any_failure=any_failure)
        while True:
            minifier = Minifier(target, run_opts, accuracy=accuracy, budget=budget, out=out, progress=progress, log=log,
                                on_query=on_query, started=started, trust_kernels=opts.trust_kernels)
            result = minifier.run()
            if result is not None:
                return result
            target = minifier.retry  # the original fails only through torch.compile: shrink again that way


def _isolated(opts: ReplayOptions, dump: Any, backend: Any, jobs: int) -> bool:
    """Whether minify runs the graph in sandboxed workers: a graph from a dump always, unless
    the caller said ``isolate=False`` (``--no-isolate``: a graph they trust) or hands over a
    backend or pass no other process can import (Python code of theirs, run in this process);
    a Case of the caller's own only when asked, or for ``jobs`` > 1."""
    if opts.isolate is not None:
        return bool(opts.isolate) or jobs > 1
    if dump is None:
        return jobs > 1
    try:
        child_specs(backend, opts)
    except GraphdbgError:
        return jobs > 1
    return True


def _case_and_dump(case_or_dump: Any, device: Any) -> tuple[Case, Any]:

    case = as_case(case_or_dump, device)
    return case, (case_or_dump if isinstance(case_or_dump, Dump) else None) or case.dump


def _progress_reporter(progress: Any) -> Callable[[int | None, int | None, str | None], None] | None:
    """A callable (queries, best nodes, log line); None closes it. True: a rich progress line."""
    if progress is None or progress is False:
        return None
    if callable(progress):
        def call(q: int | None, n: int | None, line: str | None) -> None:
            if q is not None:
                progress(q, n, line)

        return call

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
