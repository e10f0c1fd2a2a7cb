"""Name a backend on the command line, get something torch.compile accepts.

    >>> resolve_backend("inductor")          # any registered torch.compile backend
    >>> resolve_backend("thunder")           # Lightning Thunder's ThunderCompiler
    >>> resolve_backend("mypkg.compilers:my_backend")

Importing ``module:callable`` runs that module: it is code the user named, not code from a
dump.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from graphdbg.errors import GraphdbgError


def import_object(spec: str) -> Any:
    """``package.module:attr.sub`` -> the object; one-line GraphdbgError when it can't be had."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GraphdbgError(f"{spec!r}: expected package.module:callable")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:
        raise GraphdbgError(f"{spec!r}: cannot import {module_name} ({type(e).__name__}: {_first_line(e)})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise GraphdbgError(f"{spec!r}: {module_name} has no {attr}") from e
    return obj


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def thunder_backend() -> Callable[..., Any]:
    try:
        from thunder.dynamo import ThunderCompiler
    except Exception as e:
        raise GraphdbgError(
            f"backend 'thunder' is not available here: cannot import thunder.dynamo "
            f"({type(e).__name__}: {_first_line(e)}); install lightning-thunder (pip install 'graphdbg[thunder]')"
        ) from e
    return ThunderCompiler()


def eager(gm: Any, example_inputs: Any, **kwargs: Any) -> Callable[..., Any]:
    """What Dynamo's ``eager`` backend does, without importing Dynamo's whole backend registry
    (1.5 s, most of an eager replay)."""
    return gm.forward


def resolve_backend(spec: str | Callable[..., Any]) -> tuple[str, Callable[..., Any] | str]:
    """(name, backend): a registered name stays a string for torch.compile to look up."""
    if callable(spec):
        return getattr(spec, "__qualname__", type(spec).__name__), spec
    if spec == "thunder":
        return spec, thunder_backend()
    if spec == "eager":
        return spec, eager
    if ":" in spec:
        obj = import_object(spec)
        if isinstance(obj, type):
            obj = obj()
        if not callable(obj):
            raise GraphdbgError(f"{spec!r} is not callable")
        return spec, obj
    from torch._dynamo import list_backends, lookup_backend

    try:
        lookup_backend(spec)
    except Exception as e:
        known = ", ".join(sorted(set(list_backends(exclude_tags=())) | {"thunder"}))
        raise GraphdbgError(f"unknown backend {spec!r}; registered here: {known}; or give package.module:callable") from e
    return spec, spec
