"""How the nouns show themselves in rich and in notebooks, without importing the renderers.

``Dump``, ``Case``, ``Outcome`` and the minify/bisect results inherit ``Displayed``; the one
lazy import of ``graphdbg.render`` is here, so the nouns sit below the rendering layer and
``render`` can import them freely. ``render.RENDERERS`` maps a class name to its renderer.
"""

from __future__ import annotations

from typing import Any


class Displayed:
    """Mixin: ``__rich__`` and ``_repr_html_`` come from ``graphdbg.render``."""

    def __rich__(self) -> Any:
        from graphdbg.render import renderable

        return renderable(self)

    def _repr_html_(self) -> str:
        from graphdbg.render import html_of

        return html_of(self)
