"""What a replay compiles with, the same for the forward replay (``replay.run``), the training
one (``replay.backward``) and ``bisect``: the backend as a callable, the passes split by
stage, and the captured compiler settings with Inductor's post_grad passes hooked in."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator

from graphdbg.backends.compiler_config import Settings, applied_config, not_restored
from graphdbg.backends.resolve import resolve_backend
from graphdbg.errors import GraphdbgError
from graphdbg.replay.passes import PassReport, PassSpec, inductor_post_grad_patch, resolve_passes

if TYPE_CHECKING:
    from graphdbg.outcome import Outcome


def backend_callable(be: str | Callable[..., Any]) -> Callable[..., Any]:
    """A backend ``resolve_backend`` left as a registered name, as Dynamo's callable."""
    if isinstance(be, str):
        from torch._dynamo import lookup_backend  # lazy: a direct replay under eager never imports Dynamo (~2 s)

        return lookup_backend(be)
    return be


def backend_and_passes(backend: str | Callable[..., Any], passes: Any,
                       pass_stage: str = "pre") -> tuple[str, Callable[..., Any], list[PassSpec], list[PassSpec]]:
    """(the backend's name, its callable, the ``pre`` passes, the post_grad ones Inductor runs);
    a GraphdbgError for post_grad passes with another backend."""
    name, be = resolve_backend(backend)
    specs = resolve_passes(passes, default_stage=pass_stage)
    pre = [p for p in specs if p.stage == "pre"]
    post = [p for p in specs if p.stage != "pre"]
    if post and name != "inductor":
        raise GraphdbgError(f"post_grad passes run inside Inductor; backend {name!r} is not inductor")
    return name, backend_callable(be), pre, post


@contextlib.contextmanager
def inductor_patch(patch: dict[str, Any]) -> Iterator[None]:
    """``torch._inductor.config.patch(patch)``; Inductor is imported only for a patch."""
    if not patch:
        yield
        return
    import torch._inductor.config as inductor_config  # loads Inductor; a replay under eager never needs it

    with inductor_config.patch(patch):
        yield


@contextlib.contextmanager
def compiler_settings(settings: Settings, post: list[PassSpec], reports: list[PassReport], outcome: Outcome) -> Iterator[None]:
    """The captured compiler settings, then the ``post`` passes hooked into Inductor (they win);
    a recorded setting this torch lacks is named among ``outcome.stand_ins``."""
    patch = inductor_post_grad_patch(post, reports) if post else {}
    with applied_config(settings) as unknown, inductor_patch(patch):
        outcome.stand_ins += not_restored(unknown)
        yield
