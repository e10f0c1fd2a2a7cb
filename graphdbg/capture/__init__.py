"""capture: wrap a torch.compile backend so that the graphs it fails on are dumped.

Importing this package does not import torch (so ``graphdbg --help`` is fast): ``capture``
and the names below load ``graphdbg.capture.hook`` when first used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["capture", "CapturingBackend", "DEFAULT_BUDGET"]
_FROM_HOOK = ("CapturingBackend", "DEFAULT_BUDGET")


def capture(backend: Any = "inductor", dump_dir: Any = None, **options: Any) -> Any:
    """A backend for ``torch.compile`` that runs ``backend`` and dumps the graphs it fails on.

        >>> torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps", mode="accuracy"))

    Options (``mode``, ``budget_bytes``, ``rtol``, ``atol``): see ``graphdbg.capture.hook.capture``.
    """
    from graphdbg.capture import hook  # this module loads without torch (fast CLI start); this brings torch in

    return hook.capture(backend, dump_dir, **options)


def __getattr__(name: str) -> Any:
    if name in _FROM_HOOK:
        from graphdbg.capture import hook  # this module loads without torch (fast CLI start); this brings torch in

        return getattr(hook, name)
    raise AttributeError(f"module 'graphdbg.capture' has no attribute {name!r}")
