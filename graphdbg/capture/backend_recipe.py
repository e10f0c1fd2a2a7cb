"""How to build a backend again when its name alone can't: ``aot_autograd(...)`` and ``functools.partial``.

``aot_autograd(fw_compiler=my_fw)`` is an ``AotAutograd`` instance whose class name says nothing
of ``my_fw``; a ``functools.partial(compile_fn, mode="x")`` has no ``__qualname__``. The recipe
records the parts as ``module:qualname`` and plain values, and ``rebuild_backend`` puts them
together again (it imports the named callables: call it only for dumps you trust).

    >>> backend_recipe(aot_autograd(fw_compiler=mypkg.compilers.fw))
    {'kind': 'aot_autograd', 'kwargs': {'fw_compiler': {'callable': 'mypkg.compilers:fw'}}, 'complete': True}
    >>> backend = rebuild_backend(dump.manifest["backend_recipe"])
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from graphdbg.errors import GraphdbgError


def _part(value: Any) -> dict[str, Any]:
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, functools.partial) or type(value).__name__ == "AotAutograd":
        nested = backend_recipe(value)
        if nested is not None:
            return {"recipe": nested}
    module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qual and "<" not in qual and module != "__main__":
        return {"callable": f"{module}:{qual}"}
    return {"unrecorded": repr(value)[:200]}


def backend_recipe(backend: Any) -> dict[str, Any] | None:
    """The recipe for an ``aot_autograd(...)`` or ``functools.partial`` backend; None for others."""
    if type(backend).__name__ == "AotAutograd" and isinstance(getattr(backend, "kwargs", None), dict):
        recipe = {"kind": "aot_autograd", "kwargs": {k: _part(v) for k, v in backend.kwargs.items()}}
        parts = list(recipe["kwargs"].values())
    elif isinstance(backend, functools.partial):
        recipe = {"kind": "partial", "func": _part(backend.func), "args": [_part(a) for a in backend.args],
                  "keywords": {k: _part(v) for k, v in backend.keywords.items()}}
        parts = [recipe["func"], *recipe["args"], *recipe["keywords"].values()]
    else:
        return None
    recipe["complete"] = all("unrecorded" not in p and p.get("recipe", {}).get("complete", True) for p in parts)
    return recipe


def _build(part: dict[str, Any]) -> Any:
    if "value" in part:
        return part["value"]
    if "recipe" in part:
        return rebuild_backend(part["recipe"])
    if "callable" in part:
        module, _, qual = part["callable"].partition(":")
        obj: Any = importlib.import_module(module)
        for name in qual.split("."):
            obj = getattr(obj, name)
        return obj
    raise GraphdbgError(f"the backend can't be rebuilt: {part.get('unrecorded', part)!r} was not recorded "
                        "(a lambda or a function defined inside another)")


def rebuild_backend(recipe: dict[str, Any]) -> Any:
    """The backend a recipe describes; GraphdbgError when a part of it wasn't recordable."""
    if recipe.get("kind") == "aot_autograd":
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(**{k: _build(v) for k, v in recipe["kwargs"].items()})
    if recipe.get("kind") == "partial":
        return functools.partial(_build(recipe["func"]), *[_build(a) for a in recipe["args"]],
                                 **{k: _build(v) for k, v in recipe["keywords"].items()})
    raise GraphdbgError(f"unknown backend recipe {recipe.get('kind')!r}")
