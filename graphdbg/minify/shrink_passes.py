"""The shrink passes: each proposes smaller candidates around the current best one.

A pass is a small function of the Shrinker; it asks ``shrinker.test`` / ``test_many`` about
candidates, and every interesting candidate smaller than the best becomes the new best on the
spot (so a pass never has to say what it found). Passes assume nothing they can't check: a
bisection assumes the failure is monotone in the cut point, and when it isn't, the search
still ends on a candidate the oracle confirmed, just not the smallest; delta debugging after
it cleans up.

    >>> for p in PASSES: p(shrinker)      # the driver repeats this until no pass wins
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from graphdbg.graph.hashing import target_name

if TYPE_CHECKING:  # the shrinker imports these passes; a runtime import would be a circle
    from graphdbg.minify.shrinker import Shrinker

# Passes take the Shrinker (``minify.shrinker``) as their argument; they only call its
# ``test``/``test_many``/``best`` surface, so this module doesn't import it.


@dataclass
class Step:
    """One win of a pass: the best graph before and after it, and what it cost."""

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


class ShrinkPass:
    """A pass as an object that keeps its own statistics across the rounds of one shrink:
    ``runs``, ``queries`` (backend runs it caused), ``accepted`` (candidates that became the new
    best) and ``seconds``. ``last`` is the Step of its latest run if that run won, else None.

        >>> p = ShrinkPass(truncate_suffix)
        >>> step = p.run(shrinker)      # a Step when the best got smaller
        >>> p.stats()
        {'name': 'truncate_suffix', 'runs': 1, 'queries': 6, 'accepted': 2, 'seconds': 3.1}
    """

    def __init__(self, fn: Callable[[Shrinker], None], name: str | None = None):
        self.fn, self.name = fn, name or fn.__name__
        self.runs = self.queries = self.accepted = 0
        self.seconds = 0.0
        self.last: Step | None = None

    def run(self, s: Shrinker) -> Step | None:
        """Run once over ``s``; the Step if the best got smaller. Statistics are kept even when
        the pass is cut short (the budget raises through it)."""
        before, q0, t0 = s.best_key, s.oracle.queries, time.perf_counter()
        s.current, self.last = self, None
        try:
            self.fn(s)
        finally:
            s.current = None
            queries, seconds = s.oracle.queries - q0, time.perf_counter() - t0
            self.runs, self.queries, self.seconds = self.runs + 1, self.queries + queries, self.seconds + seconds
            if s.best_key < before:
                self.last = Step(self.name, before[0], s.best_key[0], queries, seconds, before[2], s.best_key[2])
        return self.last

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, "runs": self.runs, "queries": self.queries, "accepted": self.accepted,
                "seconds": round(self.seconds, 3)}


def _first_true(lo: int, hi: int, probe_many: Callable[[list[int]], list[bool | None]], ways: int) -> int:
    """Smallest i in (lo, hi] with probe(i) True, given probe(lo) False and probe(hi) True
    (assumed, not asked). With ``ways`` > 1 it asks that many points per round: a k-ary search
    whose rounds run in parallel."""
    while hi - lo > 1:
        k = min(ways, hi - lo - 1)
        points = sorted({lo + (hi - lo) * (i + 1) // (k + 1) for i in range(k)} - {lo, hi})
        answers = probe_many(points)
        new_hi = next((p for p, a in zip(points, answers) if a), hi)
        falses = [p for p, a in zip(points, answers) if a is False and p < new_hi]
        lo, hi = (max(falses) if falses else lo), new_hi
    return hi


def focus_failing_node(s: Shrinker) -> None:
    """A crash the replay pinned to a node (or to a target, from its signature): try that node
    alone, its arguments as inputs; for a target, its first few calls in turn."""
    if s.focused:
        return
    s.focused = True
    target = getattr(s.oracle, "target", None)

    if target is None:
        return
    if target.node is not None and target.node in s.original.by_name:
        names = [target.node]
    elif target.node_target:
        names = [n.name for n in s.original.nodes if n.op != "placeholder" and target_name(n) == target.node_target][:3]
    else:
        return
    s.test_many([s.best.with_(keep=frozenset({n}), outputs=None) for n in names], stop_at_first=True)


def truncate_suffix(s: Shrinker) -> None:
    """Bisect for the shortest prefix of the graph that still fails (everything it computes is returned)."""
    nodes = s.live()
    if len(nodes) < 2:
        return

    def probe_many(ks: list[int]) -> list[bool | None]:
        return s.test_many([s.best.with_(keep=frozenset(nodes[:k]), outputs=None) for k in ks])

    _first_true(0, len(nodes), probe_many, s.oracle.jobs)


def cut_prefix(s: Shrinker) -> None:
    """Search for the latest start: the nodes before it become inputs holding their real values.

    After ``truncate_suffix`` the failure sits at the end of the graph and usually needs only a
    few nodes before it, so this gallops from the end (1, 2, 4, ... nodes) and bisects the last
    step: about 2*log2(nodes needed) queries instead of log2(graph size)."""
    nodes = s.live()
    if len(nodes) < 2:
        return
    n = len(nodes)

    def probe_many(ts: list[int]) -> list[bool | None]:
        return s.test_many([s.best.with_(keep=frozenset(nodes[n - t:]), outputs=None) for t in ts])

    lo, t = 0, 1
    while t < n:
        if probe_many([t])[0]:
            _first_true(lo, t, probe_many, s.oracle.jobs)
            return
        lo, t = t, t * 2
    _first_true(lo, n, probe_many, s.oracle.jobs)


def drop_middle(s: Shrinker) -> None:
    """Keep only the first and the last node: after both ends are cut tight, the two ends are
    what a failure of two nodes together needs, and everything between them is often not."""
    nodes = s.live()
    if len(nodes) > 2:
        s.test(s.best.with_(keep=frozenset({nodes[0], nodes[-1]}), outputs=None))


def _ddmin(s: Shrinker, current: Callable[[], list[str]], without: Callable[[list[str], list[str]], Any],
           first: Callable[[list[str]], bool] | None = None) -> None:
    """Delta debugging over ``current()``: try dropping chunks, halving the chunk size when none
    can go. ``without(items, chunk)`` is the candidate with ``chunk`` gone; ``first(items)``, if
    given, is tried on each round before the chunks and ends the search when it succeeds."""
    items = current()
    parts = 2
    while len(items) >= 2:
        if first is not None and first(items):
            return
        size = max(1, -(-len(items) // parts))
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        if any(s.test_many([without(items, c) for c in chunks], stop_at_first=True)):
            smaller = current()
            if len(smaller) < len(items):
                items, parts = smaller, max(parts - 1, 2)
                continue
            # the candidate that failed is the best already (the chunk comes back, such as a
            # subgraph a higher-order op needs): no progress here, so split finer
        if size == 1:
            break
        parts = min(parts * 2, len(items))


def delta_debug(s: Shrinker) -> None:
    """ddmin over the live nodes: drop chunks of consecutive nodes, halving the chunk size."""
    _ddmin(s, s.live, lambda nodes, c: s.best.with_(keep=frozenset(set(nodes) - set(c)), outputs=_outputs_without(s, c)))


def _outputs_without(s: Shrinker, dropped: list[str]) -> tuple[str, ...] | None:
    if s.best.outputs is None:
        return None
    kept = tuple(o for o in s.best.outputs if o not in set(dropped))
    return kept or None


def drop_outputs(s: Shrinker) -> None:
    """ddmin over the outputs: fewer outputs let dead-code elimination drop what fed them."""

    def single(outputs: list[str]) -> bool:  # a single output first: the common answer, and one query
        return any(s.test_many([s.best.with_(outputs=(o,)) for o in reversed(outputs)][: max(1, s.oracle.jobs)],
                               stop_at_first=True))

    _ddmin(s, s.outputs, lambda outputs, c: s.best.with_(outputs=tuple(o for o in outputs if o not in c)), first=single)


def inline_scalars(s: Shrinker) -> None:
    """Write scalar inputs (ints, floats, bools) into the graph as literals."""
    scalars = [n for n in s.inputs() if isinstance(s.original.values.get(n), (bool, int, float)) and n not in s.best.inline]
    if scalars:
        s.test(s.best.with_(inline=s.best.inline | frozenset(scalars)))


def shrink_inputs(s: Shrinker) -> None:
    """Cut every tensor input down (to one element per dimension, else once to half) where the failure allows."""
    names = [n for n in s.inputs() if isinstance(s.original.values.get(n), torch.Tensor) and s.original.values[n].dim() > 0]
    if not names:
        return
    current = dict(s.best.narrow)
    shapes = {n: tuple(current.get(n, tuple(s.original.values[n].shape))) for n in names}
    ones = {n: tuple(1 if d > 0 else 0 for d in shape) for n, shape in shapes.items()}
    if ones != shapes and s.test(s.best.with_(narrow=tuple(sorted({**current, **ones}.items())))):
        return
    # one halving per run: shape-dependent failures rarely survive more, and each try is a backend run
    if s.halved:
        return
    s.halved = True
    halves = {n: tuple(max(1, d // 2) if d > 1 else d for d in shape) for n, shape in shapes.items()}
    if halves != shapes:
        s.test(s.best.with_(narrow=tuple(sorted({**current, **halves}.items()))))


PASSES: list[Callable[[Shrinker], None]] = [
    focus_failing_node, truncate_suffix, cut_prefix, drop_middle, delta_debug, drop_outputs, inline_scalars, shrink_inputs,
]


def default_passes() -> list[ShrinkPass]:
    """Fresh ShrinkPass objects for ``PASSES`` (statistics start at zero)."""
    return [ShrinkPass(fn) for fn in PASSES]
