"""What Inductor generated for a graph, as a hash, and the choices its autotuning made: recorded
at capture (the manifest's ``generated_code``), computed again by a replay, so a replay that
passes where the capture failed can say whether the compiler produced other code.

    >>> with watch_generated_code(active=True) as code:
    ...     compiled = compile_fx(gm, inputs)
    >>> code.to_dict()
    {'compiler': 'inductor', 'hash': '3f2a...', 'graphs': ['3f2a...'], 'autotune': {}}

The hook is ``GraphLowering.save_output_code``, the class attribute torch's own tests patch to
read the output code (``torch._inductor.utils.run_and_get_code``); Inductor calls it with the
wrapper code when it generates it and when it loads a graph from its FX graph cache, in torch
2.1 to 2.13. The autotune choices come from ``select_algorithm.add_feedback_saver``, which is
called when a template is benchmarked (max-autotune), not when the choice came from a cache.

The hash leaves out what differs between a capture and its replay while the code is the same:
comment lines and Inductor's cache folder (``# kernel path: /tmp/torchinductor_user/...``: an
isolated replay has caches of its own), the names of the graph's inputs (``primals_1``: a
retraced graph may list its inputs in another order, and with them the order of their checks
and the line that frees each) and the benchmark harness at the end of the file (random inputs in
that order).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

_LOCAL = threading.local()
_SAVER_ADDED = False


# The graph's inputs as the wrapper names them (AOTAutograd's primals and tangents, Inductor's
# argN_M): a retraced graph may list the same inputs in another order, and only the names move.
_INPUT_NAMES = re.compile(r"\b(?:primals|tangents|arg\d+)_\d+\b")
# The wrapper's bookkeeping of its inputs, which follows their order: each input's check (kept,
# as a set: which shapes and strides) and the line that frees it (left out: where it goes moves
# with the order, the computation doesn't).
_INPUT_CHECK = re.compile(r"^\s*assert_(?:size_stride|alignment)\(<input>,")
_FREED_INPUT = re.compile(r"^\s*del <input>\s*$")
# Where the wrapper's benchmark harness starts (random inputs, in the graph's input order).
_HARNESS = re.compile(r"^def (?:get_args|benchmark_compiled_module)\(")


def code_hash(code: str) -> str:
    """The hash of Inductor's output code, its kernels and the calls between them: comments,
    cache paths, the inputs' names and the benchmark harness at its end left out."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # torch >= 2.5; older torch: the comment filter alone

        folder = cache_dir()
    except Exception:
        folder = None
    lines, checks = [], []
    for line in code.splitlines():
        if _HARNESS.match(line):
            break
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        line = _INPUT_NAMES.sub("<input>", line)
        if _FREED_INPUT.match(line):
            continue
        if _INPUT_CHECK.match(line):
            checks.append(line.strip())
            continue
        lines.append(line.replace(folder, "<cache>") if folder else line)
    return hashlib.sha256("\n".join([*lines, *sorted(checks)]).encode()).hexdigest()[:16]


@dataclass
class GeneratedCode:
    graphs: list[str] = field(default_factory=list)  # one hash per graph Inductor generated (forward, backward), in order
    autotune: dict[str, str] = field(default_factory=dict)  # the autotuned op's name -> the choice that won

    @property
    def hash(self) -> str | None:
        if not self.graphs:
            return None
        return self.graphs[0] if len(self.graphs) == 1 else hashlib.sha256("|".join(self.graphs).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any] | None:
        """The manifest's ``generated_code``; None when nothing was generated (another backend,
        or a compile that failed before code generation)."""
        if not self.graphs and not self.autotune:
            return None
        return {"compiler": "inductor", "hash": self.hash, "graphs": list(self.graphs), "autotune": dict(self.autotune)}


def _active() -> list[GeneratedCode]:
    return getattr(_LOCAL, "watches", None) or []


def _saw_code(code: str) -> None:
    for watch in _active():
        watch.graphs.append(code_hash(code))


def _saw_autotune(timings: Any, name: Any, *rest: Any) -> None:
    """A feedback saver (its arguments vary between torch versions: the timings and the op's name come first)."""
    if not _active() or not isinstance(timings, dict) or not timings:
        return
    best = min(timings, key=lambda c: timings[c])
    choice = str(getattr(best, "name", None) or getattr(best, "description", None) or best)
    for watch in _active():
        watch.autotune[str(name)] = choice[:200]


def _add_autotune_saver() -> None:
    global _SAVER_ADDED
    if _SAVER_ADDED:
        return
    try:
        from torch._inductor.select_algorithm import add_feedback_saver  # Inductor is loaded already (see watch_generated_code)

        add_feedback_saver(_saw_autotune)  # once per process: torch can only clear all savers, not one
        _SAVER_ADDED = True
    except Exception:
        pass


@contextlib.contextmanager
def watch_generated_code(active: bool | None = None) -> Iterator[GeneratedCode]:
    """Record what Inductor generates inside the block. ``active``: whether the block compiles
    with Inductor (a backend named ``inductor``); None: whenever Inductor is loaded already, so
    a replay under another backend never imports it."""
    watch = GeneratedCode()
    graph = sys.modules.get("torch._inductor.graph")
    if graph is None and active:
        try:
            import torch._inductor.graph as graph  # the backend is Inductor: it imports this module anyway
        except Exception:
            graph = None
    lowering = getattr(graph, "GraphLowering", None)
    if lowering is None or not hasattr(lowering, "save_output_code"):
        yield watch
        return
    _add_autotune_saver()
    watches = _active()
    _LOCAL.watches = [*watches, watch]
    previous = lowering.__dict__.get("save_output_code")
    ours = getattr(previous, "__graphdbg__", False)  # an outer watch installed it
    if not ours:  # torch's None, or a test's patch (run_and_get_code), which is called too
        lowering.save_output_code = _hook if previous is None else _chained(previous)
    try:
        yield watch
    finally:
        _LOCAL.watches = watches
        if not ours:
            lowering.save_output_code = previous


def _hook(code: str) -> None:
    _saw_code(code)


_hook.__graphdbg__ = True  # type: ignore[attr-defined]


def _chained(previous: Any) -> Any:
    def hook(code: str) -> None:
        _saw_code(code)
        previous(code)

    hook.__graphdbg__ = True  # type: ignore[attr-defined]
    return hook
