"""The Oracle: "does this candidate still fail the way the original did?", asked once per graph.

    >>> oracle = Oracle.for_outcome(first_outcome, "mypkg:backend")
    >>> oracle(candidate_case)        # True: still the same failure
    True
    >>> oracle.queries, oracle.cache_hits

A crash is the same failure when its signature is (``same_signature``); in accuracy mode any
mismatch is, since a cut graph's outputs are numbered differently. Answers are cached by the
candidate's structural graph hash plus its input specs, so two passes proposing the same
graph (which happens all the time after dead-code elimination) cost one backend run.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import torch

from graphdbg.case import Case
from graphdbg.graph.hashing import module_hash
from graphdbg.judge.rate import RateTest
from graphdbg.judge.signature import same_signature
from graphdbg.minify.functorch_layers import balanced_functorch_layers, escaped_vmap
from graphdbg.outcome import Outcome
from graphdbg.replay.options import ReplayOptions
from graphdbg.replay.run import replay_case


def case_key(case: Case) -> str:
    """The cache key: graph structure and what goes in (dtype, shape, stride, scalar values)."""
    parts = [module_hash(case.gm)]
    for v in case.inputs:
        if isinstance(v, torch.Tensor):
            parts.append(f"{v.dtype}{tuple(v.shape)}{tuple(v.stride())}")
        else:
            parts.append(repr(v))
    return "|".join(parts)


def is_same_failure(target: Outcome, outcome: Outcome, accuracy: bool) -> bool:
    if outcome.stage == "reference":  # the graph fails even eagerly: a broken cut, not the bug
        return False
    if accuracy:
        return outcome.status == "mismatch"
    if outcome.status != target.status:
        return False
    if outcome.status == "crash":
        return same_signature(target.signature, outcome.signature)
    return outcome.status != "pass"


class Oracle:
    """A cached predicate over Cases, with the run options minify and bisect share."""

    def __init__(self, target: Outcome, backend: Any, opts: ReplayOptions = ReplayOptions(), *, accuracy: bool = False,
                 jobs: int = 1, on_query: Callable[[Oracle, Outcome], None] | None = None, rate: RateTest = RateTest()):
        """``opts``: how each candidate replays (by default in this process, called directly);
        its outputs are always judged, ``accuracy`` says whether a mismatch is the failure.
        ``rate``: how often the failure shows (``judge.rate``): a candidate runs until its test
        decides, once when the failure showed on every call."""
        self.target = target
        self.backend = backend
        self.accuracy = accuracy
        self.jobs = max(1, int(jobs))
        # Threads can't share an in-process Dynamo, so parallel candidates run in children.
        self.opts = opts.but(accuracy=True, isolate=bool(opts.isolate) or self.jobs > 1,
                             direct=True if opts.direct is None else opts.direct)
        self.on_query = on_query
        self.rate = rate
        self.cache: dict[str, bool] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.queries = 0
        self.cache_hits = 0
        self.tested: list[str] = []  # keys in the order they were run (each at most once)
        self._lock = threading.Lock()

    def run(self, case: Case) -> Outcome:

        error = None
        with balanced_functorch_layers() as layers:  # a candidate that cut a vmap in half
            try:
                outcome = replay_case(case, self.backend, self.opts)
            except RuntimeError as e:
                error = e
        if layers.unbalanced or escaped_vmap(error):
            return Outcome(status="crash", backend=str(self.backend), stage="reference", error_type="CutVmap",
                           signature="CutVmap: the candidate cuts a vmap in half (an open level or an escaped tensor)")
        if error is not None:
            raise error
        return outcome

    def interesting(self, outcome: Outcome) -> bool:
        return is_same_failure(self.target, outcome, self.accuracy)

    def __call__(self, case: Case) -> bool:
        return self.test_many([case])[0]

    def test_many(self, cases: Sequence[Case], *, stop_at_first: bool = False) -> list[bool | None]:
        """Answer each case, ``jobs`` at a time. With ``stop_at_first`` the answers after the
        first True batch are None (not run): a pass that takes the first success needs no more."""
        answers: list[bool | None] = [None] * len(cases)
        pending: list[tuple[int, str, Case]] = []
        for i, case in enumerate(cases):
            key = case_key(case)
            if key in self.cache:
                self.cache_hits += 1
                answers[i] = self.cache[key]
            elif any(key == k for _, k, _ in pending):
                self.cache_hits += 1
                pending.append((i, key, case))  # answered with its twin below, never run twice
            else:
                pending.append((i, key, case))
        if stop_at_first and any(a for a in answers):
            first = next(i for i, a in enumerate(answers) if a)
            pending = [p for p in pending if p[0] < first]
        run_keys: dict[str, int] = {}
        batch: list[tuple[int, str, Case]] = []
        for item in pending:
            if item[1] in run_keys or item[1] in self.cache:
                continue
            run_keys[item[1]] = item[0]
            batch.append(item)
        for start in range(0, len(batch), self.jobs):
            chunk = batch[start:start + self.jobs]
            outcomes = self._run_chunk([c for _, _, c in chunk])
            hit = False
            for (i, key, _), outcome in zip(chunk, outcomes):
                ok = self.interesting(outcome)
                self.cache[key], self.outcomes[key] = ok, outcome
                hit = hit or ok
            if stop_at_first and hit:
                break
        for i, key, _ in pending:
            if key in self.cache:
                answers[i] = self.cache[key]
        return answers

    def _run_chunk(self, cases: list[Case]) -> list[Outcome]:
        def one(case: Case) -> Outcome:
            verdict = self.rate.decide(lambda: self.run(case), self.interesting)  # judge.rate: how many runs decide
            outcome = verdict.outcome
            with self._lock:
                self.queries += verdict.runs
                self.tested.append(case_key(case))
            if self.on_query is not None:
                self.on_query(self, outcome)
            return outcome

        if len(cases) == 1 or self.jobs == 1:
            return [one(c) for c in cases]
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(one, cases))

    def summary(self) -> dict[str, Any]:
        return {"queries": self.queries, "cache_hits": self.cache_hits}
