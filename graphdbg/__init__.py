"""graphdbg: capture the FX graphs a torch.compile backend fails on, and replay them offline.

    >>> import graphdbg
    >>> compiled = torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps"))
    >>> dump = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d")
    >>> case = dump.case()          # the GraphModule and its inputs, on this machine
    >>> dump.nodes()                # a pandas table of the graph
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Sequence

from graphdbg._version import __version__, say_untested_torch

say_untested_torch()  # once, in one line, on a torch the suite does not run on

if TYPE_CHECKING:
    import pandas

    from graphdbg.capture.accuracy_checks import AccuracyChecks
    from graphdbg.dump import Dump
    from graphdbg.replay.options import ReplayOptions

from graphdbg.capture import capture  # noqa: E402
from graphdbg.errors import DumpError, GraphdbgError, GraphSourceError  # noqa: E402
from graphdbg.formats import load as _load

_LAZY = {"ReplayOptions": "graphdbg.replay.options", "AccuracyChecks": "graphdbg.capture.accuracy_checks"}


def __getattr__(name: str) -> Any:
    """The names of ``_LAZY``, imported when first used: a command's start (ls's) doesn't need them."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'graphdbg' has no attribute {name!r}")


def load(path: str | os.PathLike[str]) -> Dump:
    """Load a dump folder (or a printed graph file) as a :class:`~graphdbg.dump.Dump`."""
    return _load(path)


def compare(
    dump: Dump | str | os.PathLike[str],
    backends: Sequence[str] = ("eager", "aot_eager", "inductor"),
    *,
    device: str | None = None,
    isolate: bool = True,
    timeout: float | None = None,
    passes: str | Sequence[Any] | None = None,
    accuracy: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    direct: bool = False,
    max_input_gb: float | None = None,
) -> pandas.DataFrame:
    """Replay ``dump`` (a Dump or a path) under each backend; a pandas DataFrame, one row each
    (``backend``, ``status``, ``signature``, ``stage``, ``seconds``, ``max_abs_error``,
    ``max_rel_error``, ``trusted``, ``reproduces``), with the Outcomes in ``.attrs["outcomes"]``."""
    # this module loads without torch (fast CLI start); this brings torch in
    from graphdbg.execution.entry import compare_backends
    from graphdbg.replay.options import ReplayOptions  # as __getattr__ does

    if not hasattr(dump, "manifest_data"):
        dump = load(dump)
    opts = ReplayOptions(device=device, isolate=isolate, timeout=timeout, passes=passes, accuracy=accuracy, rtol=rtol,
                         atol=atol, direct=direct, max_input_gb=max_input_gb)
    return compare_backends(dump, list(backends), opts)


def compare_swap(dump: Dump | str | os.PathLike[str], swaps: Sequence[str], *, ops: Sequence[str] = (),
                 device: str | None = None, trust_kernels: bool = False, within: Sequence[str] = ()) -> Any:
    """``graphdbg compare DUMP --swap OP=REFERENCE``: the graph as captured against the graph
    with each ``OP=REFERENCE`` of ``swaps`` swapped in; a SwapReport (``rows``: per output,
    ``max_abs_error``, ``mean_abs_error``, ``cosine``, ``rel_l1``, ``rel_l2``, ``ulps``,
    ``close``; ``moved``; ``swaps``: each with what its built-in reference assumed; ``kernels``:
    how each kernel ran). ``ops``: modules defining the custom ops, imported first (``--ops``).
    ``trust_kernels``: user Triton kernels run from the dump's source, in the sandboxed replay
    child (``--trust-kernels``). ``within``: bounds each output is judged by instead of the
    dtype's tolerance (``["cosine>=0.9999", "rel_l1<=0.01"]``, ``--within``). docs/kernels.md."""
    from graphdbg.replay.compare_swap import swap_dump  # torch: only when a swap is asked for

    return swap_dump(dump if hasattr(dump, "manifest_data") else load(dump), list(swaps), ops=list(ops), device=device,
                     trust_kernels=trust_kernels, within=list(within))


__all__ = ["compare", "compare_swap", "capture", "AccuracyChecks", "load", "ReplayOptions", "GraphdbgError", "DumpError", "GraphSourceError", "__version__"]
