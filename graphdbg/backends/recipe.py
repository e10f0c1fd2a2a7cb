"""How to build a backend again when its name alone can't: ``aot_autograd(...)`` and ``functools.partial``.

``aot_autograd(fw_compiler=my_fw)`` is an ``AotAutograd`` instance whose class name says nothing
of ``my_fw``; a ``functools.partial(compile_fn, mode="x")`` has no ``__qualname__``. The recipe
records the parts as ``module:qualname`` and plain values, and ``rebuild_backend`` puts them
together again (it imports the named callables: call it only for dumps you trust).

    >>> backend_recipe(aot_autograd(fw_compiler=mypkg.compilers.fw))
    {'kind': 'aot_autograd', 'kwargs': {'fw_compiler': {'callable': 'mypkg.compilers:fw'}}, 'complete': True}
    >>> backend = rebuild_backend(dump.manifest_data["backend_recipe"])

On a command line, in an isolated child's request and in a repro script, a recipe travels as
one string, ``recipe:`` and its compact JSON (``recipe_spec``); nothing else starts with
``recipe:{`` (a ``module:callable`` name can't), so readers check for it before they split at
``:``. People read it as ``describe_recipe`` writes it: ``aot_autograd(fw_compiler=mypkg.compilers:fw)``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from graphdbg.errors import GraphdbgError

if TYPE_CHECKING:
    from graphdbg.store.schema import Manifest


def _part(value: Any) -> dict[str, Any]:
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, functools.partial) or type(value).__name__ == "AotAutograd":
        nested = backend_recipe(value)
        if nested is not None:
            return {"recipe": nested}
    if inspect.ismethod(value) and not isinstance(value.__self__, type):
        return {"unrecorded": repr(value)[:200]}  # bound to an object the dump can't hold
    module, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qual and "<" not in qual and module != "__main__":
        return {"callable": f"{module}:{qual}"}
    if module == "__main__" and qual and "<" not in qual:
        script = _main_script()  # a function of the user's script: loaded from its file, as replay loads a backend
        if script is not None:
            return {"callable": f"__main__:{qual}", "script": script}
    return {"unrecorded": repr(value)[:200]}


def _main_script() -> str | None:

    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) and path.endswith(".py") else None


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


RECIPE_PREFIX = "recipe:"
_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def recipe_spec(recipe: dict[str, Any]) -> str:
    """The recipe as one backend string: ``recipe:{...}`` (``resolve_backend`` takes it)."""
    return RECIPE_PREFIX + json.dumps(recipe, separators=(",", ":"), sort_keys=True)


def is_recipe_spec(spec: Any) -> bool:
    return isinstance(spec, str) and spec.startswith(RECIPE_PREFIX + "{")


def recipe_of_spec(spec: str) -> dict[str, Any]:
    """``recipe:{...}`` -> the recipe, checked; GraphdbgError (one line) when it is not one."""
    try:
        recipe = json.loads(spec[len(RECIPE_PREFIX):])
    except ValueError as e:
        raise GraphdbgError(f"backend {spec[:80]!r}: not a recipe (bad JSON: {e})") from None
    return check_recipe(recipe)


def check_recipe(recipe: Any) -> dict[str, Any]:
    """``recipe`` if it has a recipe's shape (a dump is someone else's file); else GraphdbgError."""
    def part_ok(part: Any) -> bool:
        if not isinstance(part, dict) or len(part.keys() & {"value", "callable", "recipe", "unrecorded"}) != 1:
            return False
        if "script" in part and not (isinstance(part["script"], str) and part["script"].endswith(".py") and "callable" in part):
            return False
        if "value" in part:
            return part["value"] is None or isinstance(part["value"], (bool, int, float, str))
        if "callable" in part:
            return isinstance(part["callable"], str) and bool(_CALLABLE.fullmatch(part["callable"]))
        if "recipe" in part:
            return shape_ok(part["recipe"])
        return isinstance(part["unrecorded"], str)

    def shape_ok(r: Any) -> bool:
        if not isinstance(r, dict):
            return False
        if r.get("kind") == "aot_autograd":
            kw = r.get("kwargs")
            return isinstance(kw, dict) and all(isinstance(k, str) and k.isidentifier() and part_ok(v) for k, v in kw.items())
        if r.get("kind") == "partial":
            args, kw = r.get("args", []), r.get("keywords", {})
            return (part_ok(r.get("func")) and isinstance(args, list) and all(map(part_ok, args))
                    and isinstance(kw, dict) and all(isinstance(k, str) and k.isidentifier() and part_ok(v) for k, v in kw.items()))
        return False

    if not shape_ok(recipe):
        raise GraphdbgError(f"the backend recipe {json.dumps(recipe, default=str)[:120]} is not one graphdbg wrote "
                            "(kind aot_autograd or partial, parts named module:qualname); give the backend with --backend")
    return recipe


def _shown(part: dict[str, Any]) -> str:
    if "value" in part:
        return repr(part["value"])
    if "recipe" in part:
        return describe_recipe(part["recipe"])
    if "callable" in part:
        return f"{part['script']}:{part['callable'].partition(':')[2]}" if "script" in part else part["callable"]
    return "<not recorded>"


def describe_recipe(recipe: dict[str, Any]) -> str:
    """How people read a (checked) recipe: ``aot_autograd(fw_compiler=mod:fw, bw_compiler=mod:bw)``,
    ``partial(mod:compile_fn, mode='x')``."""
    if recipe.get("kind") == "aot_autograd":
        return "aot_autograd(" + ", ".join(f"{k}={_shown(v)}" for k, v in recipe["kwargs"].items()) + ")"
    parts = [_shown(recipe["func"]), *map(_shown, recipe.get("args", [])),
             *(f"{k}={_shown(v)}" for k, v in recipe.get("keywords", {}).items())]
    return "partial(" + ", ".join(parts) + ")"


def unrecorded_parts(recipe: dict[str, Any], where: str = "") -> list[str]:
    """The parts of a (checked) recipe that were not recorded, each as ``name (its repr)``."""
    if recipe.get("kind") == "aot_autograd":
        named = list(recipe["kwargs"].items())
    else:
        named = [("func", recipe["func"]), *((f"args[{i}]", a) for i, a in enumerate(recipe.get("args", []))),
                 *recipe.get("keywords", {}).items()]
    out = []
    for name, part in named:
        if "recipe" in part:
            out += unrecorded_parts(part["recipe"], f"{where}{name}.")
        elif "unrecorded" in part:
            shown = " ".join(str(part["unrecorded"]).split())[:80]
            out.append(f"{where}{name} ({shown})")
    return out


def backend_label(spec: Any) -> str:
    """A backend string as people read it: a ``recipe:{...}`` spelled as ``describe_recipe`` does."""
    if is_recipe_spec(spec):
        try:
            return describe_recipe(recipe_of_spec(spec))
        except GraphdbgError:
            return str(spec)[:80]
    return str(spec)


def shown_backend(manifest: Manifest) -> str:
    """The backend a manifest records, for display: its recipe when it has one, else its name."""
    if manifest.backend_recipe is not None:
        try:
            return describe_recipe(check_recipe(manifest.backend_recipe.model_dump(by_alias=True, exclude_unset=True)))
        except GraphdbgError:
            pass
    return backend_label(manifest.backend or "?")


def _build(part: dict[str, Any], load_script: Any = None) -> Any:
    if "value" in part:
        return part["value"]
    if "recipe" in part:
        return rebuild_backend(part["recipe"], load_script)
    if "callable" in part:
        module, _, qual = part["callable"].partition(":")
        try:
            if "script" in part:  # the user's script: the definitions this part needs, never its program
                if load_script is None:
                    raise GraphdbgError(f"the backend recipe names {part['callable']} of {part['script']}: "
                                        "give the backend with --backend")
                return load_script(part["script"], qual)
            obj: Any = importlib.import_module(module)
        except GraphdbgError:
            raise
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            raise GraphdbgError(f"the backend recipe names {part['callable']}: cannot import {module} "
                                f"({type(e).__name__}: {first})") from e
        for name in qual.split("."):
            try:
                obj = getattr(obj, name)
            except AttributeError:
                raise GraphdbgError(f"the backend recipe names {part['callable']}: {module} has no {qual}") from None
        return obj
    raise GraphdbgError(f"the backend can't be rebuilt: {part.get('unrecorded', part)!r} was not recorded "
                        "(a lambda or a function defined inside another)")


def rebuild_backend(recipe: dict[str, Any], load_script: Any = None) -> Any:
    """The backend a recipe describes; GraphdbgError when a part of it wasn't recordable.
    ``load_script(path, qualname)``: an object of a user's script, for parts defined there
    (``resolve.script_object``: only the definitions it needs)."""
    check_recipe(recipe)
    if recipe.get("kind") == "aot_autograd":
        from torch._dynamo.backends.common import aot_autograd  # torch._dynamo costs about 2 s: imported only when needed

        return aot_autograd(**{k: _build(v, load_script) for k, v in recipe["kwargs"].items()})
    if recipe.get("kind") == "partial":
        return functools.partial(_build(recipe["func"], load_script), *[_build(a, load_script) for a in recipe.get("args", [])],
                                 **{k: _build(v, load_script) for k, v in recipe.get("keywords", {}).items()})
    raise GraphdbgError(f"unknown backend recipe {recipe.get('kind')!r}")
