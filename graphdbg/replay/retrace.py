"""Did Dynamo's re-trace hand the backend the whole graph?

Replay re-traces a dumped graph with ``torch.compile`` so that the backend gets it as Dynamo
gave it at capture (symbolic sizes, grad mode, guards). A graph can hold what Dynamo emits but
can't trace again (``autograd_function_apply`` of a custom ``autograd.Function``, some other
higher-order ops): the re-trace then breaks the graph and runs those parts eagerly, and a
failure inside them (a wrong backward of the Function, an op the backend refuses) is never seen.

    >>> with graph_breaks() as broke:
    ...     torch.compile(gm, backend=compiler)(*inputs)
    >>> broke.reason   # None, or the first line of Dynamo's reason

The replay then calls the backend on the whole graph directly and says so (``whole_graph``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch
import torch.fx as fx

from graphdbg.graph.autocast import retraceable
from graphdbg.store.specs import SymSpec, TensorSpec

T = TypeVar("T")


@dataclass
class Broke:
    reason: str | None = None


def _seen() -> dict[str, int]:
    from torch._dynamo.utils import counters  # lazy: a direct replay (eager) never imports Dynamo (~2 s)

    return dict(counters["graph_break"])


@contextlib.contextmanager
def graph_breaks() -> Iterator[Broke]:
    """``reason`` is set, on leaving, when Dynamo broke a graph inside the block."""
    before = _seen()
    broke = Broke()
    try:
        yield broke
    finally:
        new = [k for k, n in _seen().items() if n > before.get(k, 0)]
        if new:
            broke.reason = (str(new[0]).strip().splitlines() or ["a graph break"])[0]


def retrace_note(reason: str) -> str:
    return f"re-trace: Dynamo broke the graph ({reason[:120]}); the backend was called on the whole graph directly"


def whole_graph(attempt: Callable[[bool], T], direct: bool, notes: list[str]) -> tuple[T, bool]:
    """(``attempt(direct)``, direct). When that re-trace broke the graph, Dynamo is reset, ``notes``
    get the line that says so, and it is made again calling the backend on the whole graph:
    (``attempt(True)``, True). ``attempt`` starts from fresh inputs each time."""
    if direct:  # no re-trace, nothing to watch (and no Dynamo to import)
        return attempt(True), True
    with graph_breaks() as broke:
        got = attempt(direct)
    if broke.reason is None:
        return got, direct
    torch._dynamo.reset()
    notes.append(retrace_note(broke.reason))
    return attempt(True), True


def as_captured(gm: fx.GraphModule, inputs: list[Any]) -> tuple[bool, dict[str, Any]]:
    """(``dynamic`` for torch.compile, Dynamo settings) so that the re-trace gives the backend
    the graph it was captured with: a graph whose annotations have symbolic sizes (``Sym(s77)``
    inputs, ``f32[s77, 32]``) is traced with exactly those dims dynamic (the rest marked
    static), and one that calls ``.item()`` in the graph keeps it there instead of breaking
    (Dynamo turns float attributes into 0-d tensors read by ``.item()`` under dynamic shapes)."""

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    specs = [n.meta.get("graphdbg_symbolic_spec", n.meta.get("graphdbg_spec")) for n in placeholders]
    dynamic = any(isinstance(sp, SymSpec) or (isinstance(sp, TensorSpec) and any(isinstance(d, str) for d in sp.shape))
                  for sp in specs)
    if dynamic:
        for value, spec in zip(inputs, specs):
            if isinstance(value, torch.Tensor) and isinstance(spec, TensorSpec) and len(spec.shape) == value.dim():
                for dim, size in enumerate(spec.shape):
                    if isinstance(size, int):
                        torch._dynamo.mark_static(value, dim)
    extra = {}
    if any(n.op == "call_method" and n.target == "item" for n in gm.graph.nodes):
        extra["capture_scalar_outputs"] = True
    return dynamic, extra


def compile_as_captured(gm: fx.GraphModule, inputs: list[Any], backend: Callable[..., Any],
                        settings: Any) -> Callable[..., Any]:
    """``torch.compile(gm, backend)`` re-tracing the graph as it was captured (``as_captured``),
    called under the Dynamo settings that keeps it whole; a setting recorded in ``settings``
    (the captured run's) wins over the one ``as_captured`` would pick."""
    dynamic, extra = as_captured(gm, inputs)
    extra = {k: v for k, v in extra.items() if f"dynamo.{k}" not in settings}
    # autocast regions in the graph as Dynamo can trace them again on every torch (graph/autocast.py)
    compiled = torch.compile(retraceable(gm), backend=backend, dynamic=dynamic)

    def run(*args: Any) -> Any:
        with torch._dynamo.config.patch(**extra):
            return compiled(*args)

    return run


__all__ = ["Broke", "as_captured", "compile_as_captured", "graph_breaks", "retrace_note", "whole_graph"]
