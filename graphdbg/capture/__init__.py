"""capture: wrap a torch.compile backend so that the graphs it fails on are dumped.

Importing this package does not import torch (so ``graphdbg --help`` is fast): ``capture``
and the names below load ``graphdbg.capture.hook`` when first used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:
    from graphdbg.capture.accuracy_checks import AccuracyChecks
    from graphdbg.capture.hook import CapturingBackend

__all__ = ["capture", "AccuracyChecks", "CapturingBackend", "DEFAULT_BUDGET"]
_FROM_HOOK = ("CapturingBackend", "DEFAULT_BUDGET")


def capture(
    backend: str | Callable[..., Any] = "inductor",
    dump_dir: str | os.PathLike[str] | None = None,
    *,
    mode: Literal["error", "accuracy", "always"] = "error",
    budget_bytes: int = 4 << 30,
    rtol: float | None = None,
    atol: float | None = None,
    redact: bool | None = None,
    checks: AccuracyChecks | None = None,
) -> CapturingBackend:
    """A backend for ``torch.compile`` that runs ``backend`` and dumps the graphs it fails on.

        >>> torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps", mode="accuracy"))

    ``mode``: ``"error"`` dumps on a compile error or a run-time error of the compiled code;
    ``"accuracy"`` also dumps when the outputs disagree with eager (``rtol``/``atol``, default by
    dtype); ``"always"`` dumps every graph. ``dump_dir`` defaults to ``$GRAPHDBG_DUMP_DIR``, else
    ``./graphdbg_dumps``; ``budget_bytes`` of input values are stored per graph (past it, specs and
    statistics); ``redact`` (default ``$GRAPHDBG_REDACT``) writes dumps safe to share.
    ``checks`` (``mode="accuracy"``): the calls of each graph compared with eager, by default the
    first 4, then 1 in 16 drawn at random (``AccuracyChecks``; ``$GRAPHDBG_ACCURACY_CHECKS``).
    """
    from graphdbg.capture import hook  # this module loads without torch (fast CLI start); this brings torch in
    from graphdbg.judge.accuracy import Tolerance  # torch, as the line above

    return hook.capture(backend, dump_dir, mode=mode, budget_bytes=budget_bytes, tol=Tolerance(rtol, atol), redact=redact,
                        checks=checks)


def __getattr__(name: str) -> Any:
    if name == "AccuracyChecks":
        from graphdbg.capture.accuracy_checks import AccuracyChecks  # when first used: a command's start (ls's) doesn't need it

        return AccuracyChecks
    if name in _FROM_HOOK:
        from graphdbg.capture import hook  # this module loads without torch (fast CLI start); this brings torch in

        return getattr(hook, name)
    raise AttributeError(f"module 'graphdbg.capture' has no attribute {name!r}")
