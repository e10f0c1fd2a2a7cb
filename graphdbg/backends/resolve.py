"""Name a backend on the command line, get something torch.compile accepts.

    >>> resolve_backend("inductor")          # any registered torch.compile backend
    >>> resolve_backend("thunder")           # Lightning Thunder's ThunderCompiler
    >>> resolve_backend("mypkg.compilers:my_backend")
    >>> resolve_backend('recipe:{"kind":"aot_autograd","kwargs":{"fw_compiler":{"callable":"mypkg.compilers:fw"}}}')

Importing ``module:callable`` runs that module: it is code the user named. A dump names its
backend too, but a dump is someone else's file: ``dump_backend`` hands out a ``module:qualname``
it recorded only when the user said ``--trust-backend``. A backend defined in the captured
script itself (``__main__``) is loaded from the recorded script path (``path/prog.py:picky``)
with its definitions only: the script's top-level calls and its ``if __name__ ==
"__main__":`` block are left out, so loading the backend does not run the program.
An ``aot_autograd(...)`` or ``functools.partial`` backend is recorded as a recipe of its parts
(capture/backend_recipe.py); ``dump_backend`` hands it out as ``recipe:{...}``, with
``--trust-backend`` too, since rebuilding it imports the compilers it names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

from graphdbg.backends.recipe import (
    backend_label,
    backend_recipe,
    check_recipe,
    describe_recipe,
    is_recipe_spec,
    rebuild_backend,
    recipe_of_spec,
    recipe_spec,
    unrecorded_parts,
)
from graphdbg.errors import GraphdbgError
from graphdbg.store.gate import MAX_TEXT_BYTES, read_regular

# Recorded names that mean a backend replay knows by name, whatever module spelled them.
KNOWN_ALIASES = {"thunder.dynamo.compiler:ThunderCompiler": "thunder", "thunder.dynamo:ThunderCompiler": "thunder"}


def import_object(spec: str) -> Any:
    """``package.module:attr.sub`` (or ``path/script.py:attr``) -> the object; one-line
    GraphdbgError when it can't be had."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise GraphdbgError(f"{spec!r}: expected package.module:callable")
    try:
        obj: Any = script_module(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except GraphdbgError:
        raise
    except Exception as e:
        raise GraphdbgError(f"{spec!r}: cannot import {module_name} ({type(e).__name__}: {_first_line(e)})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise GraphdbgError(f"{spec!r}: {module_name} has no {attr}") from e
    return obj


_scripts: dict[str, types.ModuleType] = {}


def script_module(path: str) -> types.ModuleType:
    """The definitions of a script, as a module that is not ``__main__``: imports, functions,
    classes and assignments run; top-level expression statements, loops, ``with`` blocks,
    ``if __name__ == ...`` blocks, and assignments that call something the script itself
    defines (``out = compiled(x)``) do not. Says so on stderr, once per script."""
    file = Path(path).resolve()
    key = str(file)
    if key in _scripts:
        return _scripts[key]
    try:  # through the gate: a FIFO or a device named as the script neither hangs nor is read whole

        tree = ast.parse(read_regular(file, max_bytes=MAX_TEXT_BYTES, text=True), filename=key)
    except (OSError, SyntaxError, UnicodeDecodeError, GraphdbgError) as e:
        raise GraphdbgError(f"{path}: cannot read the backend's script ({type(e).__name__}: {_first_line(e)})") from e
    kept, skipped = _definitions(tree.body)
    module = types.ModuleType(f"graphdbg_script_{file.stem}")
    module.__file__ = key
    sys.modules[module.__name__] = module  # dataclasses and pickling look classes up by module
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))  # the script's sibling modules import as they did for it
    try:
        exec(compile(ast.Module(body=kept, type_ignores=[]), key, "exec"), module.__dict__)
    except Exception as e:
        sys.modules.pop(module.__name__, None)
        raise GraphdbgError(f"{path}: loading the backend's definitions failed ({type(e).__name__}: {_first_line(e)})") from e
    _scripts[key] = module
    sys.stderr.write(f"graphdbg: loaded the backend from {file} (definitions only; {skipped} top-level statement(s) "
                     f"and its __main__ block not run)\n")
    return module


def _definitions(body: list[ast.stmt]) -> tuple[list[ast.stmt], int]:
    defined: set[str] = set()
    kept: list[ast.stmt] = []
    skipped = 0
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
            keep = True
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            calls = [n.func for n in ast.walk(stmt) if isinstance(n, ast.Call)]
            keep = not any(_root_name(f) in defined for f in calls)
        elif isinstance(stmt, ast.If):
            keep = "__name__" not in {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
        else:  # expression statements (calls), loops, with-blocks: the program itself
            keep = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        if keep:
            kept.append(stmt)
            for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [stmt]:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defined.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    defined.add(node.id)
        else:
            skipped += 1
    return kept, skipped


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def dump_backend(dump: Any, trust: bool, command: str = "replay", shown_path: Any = None) -> str:
    """The backend ``dump`` recorded, as ``resolve_backend`` takes it. A registered name is
    returned as it is; code the dump names (``module:qualname``, or a function of the captured
    script) only with ``trust``, else a GraphdbgError whose one line gives the command to run."""
    spec = str(dump.manifest.get("backend") or "eager")
    spec = KNOWN_ALIASES.get(spec, spec)
    recipe = dump.manifest.get("backend_recipe")
    if recipe is not None or is_recipe_spec(spec):  # aot_autograd(...) / partial: the recipe wins over the class name
        return _recipe_backend(check_recipe(recipe) if recipe is not None else recipe_of_spec(spec), trust, command,
                               shown_path or dump.path)
    if ":" not in spec:
        return spec
    source = dump.manifest.get("backend_source") or {}
    if not trust:
        where = f" (defined in {source['script']})" if source.get("script") else ""
        raise GraphdbgError(
            f"the dump's backend is {spec}{where}, code the dump names; graphdbg imports it only when you say so: "
            f"graphdbg {command} {shown_path or dump.path} --trust-backend (or pick one with --backend)")
    if spec.startswith("__main__:"):
        script = source.get("script")
        if not script:
            raise GraphdbgError(f"the dump's backend {spec} was defined in a script whose path was not recorded; "
                                f"give it with --backend path/to/script.py:{spec.partition(':')[2]}")
        if not Path(script).is_file():
            raise GraphdbgError(f"the dump's backend {spec} was defined in {script}, which is not on this machine; "
                                f"give it with --backend path/to/script.py:{spec.partition(':')[2]}")
        return f"{script}:{spec.partition(':')[2]}"
    _importable_near(spec.partition(":")[0], Path(str(dump.path)))
    return spec


def names_code(spec: Any) -> bool:
    """Whether a backend spelling imports code when resolved: ``module:callable``, a script
    path, or a recipe. A registered name (``eager``, ``inductor``) does not."""
    return not isinstance(spec, str) or ":" in spec or is_recipe_spec(spec)


def trusted_code(spec: Any, trust: bool, what: str, command: str, shown_path: Any) -> Any:
    """``spec`` (code a dump names: a minified backend, recorded passes) when ``trust``, else a
    GraphdbgError whose one line gives the command to run."""
    if trust or spec is None:
        return spec
    shown = describe_recipe(recipe_of_spec(spec)) if isinstance(spec, str) and is_recipe_spec(spec) else str(spec)
    raise GraphdbgError(
        f"the dump's {what} is {shown[:200]}, code the dump names; graphdbg imports it only when you say so: "
        f"graphdbg {command} {shown_path} --trust-backend")
def _importable_near(module: str, dump_path: Path) -> None:
    """A trusted backend's module that is not importable from here is looked for in the folders
    that hold the dump (a dump usually lives in the project that made it), so a replay works from
    any folder; the folder found goes on ``sys.path`` and, for isolated children, ``PYTHONPATH``."""
    top = module.split(".")[0]
    if not top.isidentifier():
        return
    try:
        if importlib.util.find_spec(top) is not None:
            return
    except (ImportError, ValueError):
        return
    for folder in dump_path.resolve().parents:
        if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
            sys.path.append(str(folder))
            paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            os.environ["PYTHONPATH"] = os.pathsep.join([*paths, str(folder)])
            return


def _recipe_backend(recipe: dict[str, Any], trust: bool, command: str, shown_path: Any) -> str:
    shown = describe_recipe(recipe)
    missing = unrecorded_parts(recipe)
    if missing:
        raise GraphdbgError(f"the dump's backend {shown} can't be rebuilt: its part {missing[0]} was not recorded "
                            "(a lambda, a function defined inside another or in the script, or a bound method); "
                            "give the backend with --backend package.module:callable")
    if not trust:
        raise GraphdbgError(
            f"the dump's backend is {shown}, code the dump names; graphdbg imports it only when you say so: "
            f"graphdbg {command} {shown_path} --trust-backend (or pick one with --backend)")
    return recipe_spec(recipe)


def recorded_backend(dump: Any) -> str:
    """The backend a dump records, as ``resolve_backend`` takes it (its recipe when it has one);
    for callers that already trust the dump (the Python API's defaults)."""
    recipe = dump.manifest.get("backend_recipe")
    if recipe is not None:
        return recipe_spec(check_recipe(recipe))
    return str(dump.backend)


def backend_spec(backend: str | Callable[..., Any], strict: bool = True) -> str:
    """A backend as a string a child process (or a repro script) can resolve again: a name as it
    is; an ``aot_autograd(...)``/``partial`` object as its recipe; else ``module:qualname``.
    Not ``strict``: a backend no other process can import gets its best name instead of an error."""
    if isinstance(backend, str):
        return backend
    if not strict:
        try:
            return backend_spec(backend)
        except GraphdbgError:
            return f"{getattr(backend, '__module__', '?')}:{getattr(backend, '__qualname__', type(backend).__name__)}"
    recipe = backend_recipe(backend)
    if recipe is not None:
        missing = unrecorded_parts(recipe)
        if missing:
            raise GraphdbgError(f"{describe_recipe(recipe)} can't be sent to another process: its part {missing[0]} "
                                "has no module:qualname; give it as package.module:callable")
        return recipe_spec(recipe)
    module = getattr(backend, "__module__", None)
    qual = getattr(backend, "__qualname__", None)
    if not module or not qual or "<locals>" in qual or module == "__main__":
        raise GraphdbgError(f"{backend!r} can't be sent to another process; give it as package.module:callable")
    return f"{module}:{qual}"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def thunder_backend() -> Callable[..., Any]:
    try:
        from thunder.dynamo import ThunderCompiler  # optional: not installed everywhere
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
    if is_recipe_spec(spec):  # before the module:callable reading: the JSON has ':' in it too
        recipe = recipe_of_spec(spec)
        return backend_label(spec), rebuild_backend(recipe, script_module)
    if ":" in spec:
        obj = import_object(spec)
        if isinstance(obj, type):
            obj = obj()
        if not callable(obj):
            raise GraphdbgError(f"{spec!r} is not callable")
        return spec, obj
    from torch._dynamo import list_backends, lookup_backend  # torch._dynamo costs about 2 s: imported only when needed

    try:
        lookup_backend(spec)
    except Exception as e:
        known = ", ".join(sorted(set(list_backends(exclude_tags=())) | {"thunder"}))
        raise GraphdbgError(f"unknown backend {spec!r}; registered here: {known}; or give package.module:callable") from e
    return spec, spec
