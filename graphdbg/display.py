"""How the nouns show themselves in rich and in notebooks, without importing the renderers.

``Dump``, ``Case``, ``Outcome``, the listing and the minify/bisect results inherit ``Displayed``;
the one lazy import of ``graphdbg.ui.render`` is here, so the nouns sit below the rendering layer
and ``render`` can import them freely. ``render.renderable`` (a ``functools.singledispatch``) picks
the renderer by the object's class, ``render.short_repr`` its one-line repr (no tensors, no
tracebacks: a notebook cell stays short).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable


class Displayed:
    """Mixin: ``__rich__``, ``_repr_html_`` and a short ``__repr__`` come from ``graphdbg.ui.render``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # @dataclass writes a __repr__ of every field (tensors, tracebacks) unless the class
        # body already holds one; this runs before the decorator, so pinning the inherited one
        # (ours, or a parent's own) keeps reprs short.
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = cls.__repr__

    def __rich__(self) -> Any:
        from graphdbg.ui.render import renderable  # upward, declared in ARCHITECTURE.md

        return renderable(self)

    def _repr_html_(self) -> str:
        from graphdbg.ui.render import html_of  # upward, declared in ARCHITECTURE.md

        return html_of(self)

    def __repr__(self) -> str:
        from graphdbg.ui.render import short_repr  # upward, declared in ARCHITECTURE.md

        return short_repr(self)


STDERR_KEPT = 4000


def run_quietly(run: Callable[[], Any]) -> Any:
    """Call ``run`` (which returns an Outcome) with Python's stderr kept rather than printed.

    A call that returns an Outcome has said what happened: torch.fx prints the failing graph's
    traceback on stderr before re-raising, and the Outcome already holds it. What was written
    goes to ``outcome.stderr_tail`` unless the run filled that itself.
    """
    kept = io.StringIO()
    with contextlib.redirect_stderr(kept):
        outcome = run()
    text = kept.getvalue()
    if text and not getattr(outcome, "stderr_tail", None):
        outcome.stderr_tail = text[-STDERR_KEPT:]
    return outcome
