"""Name a backend on the command line, get something torch.compile accepts.

    >>> resolve_backend("inductor")          # any registered torch.compile backend
    >>> resolve_backend("thunder")           # Lightning Thunder's ThunderCompiler
    >>> resolve_backend("mypkg.compilers:my_backend")
    >>> resolve_backend('recipe:{"kind":"aot_autograd","kwargs":{"fw_compiler":{"callable":"mypkg.compilers:fw"}}}')

Importing ``module:callable`` runs that module: it is code the user named. A dump names its
backend too, but a dump is someone else's file: ``dump_backend`` hands out a ``module:qualname``
it recorded only when the user said ``--trust-backend``. A backend defined in the captured
script itself (``__main__``) is loaded from the recorded script path (``path/prog.py:picky``)
with only the definitions it needs (``script_definitions``): the program (a ``try:`` running
the model, top-level calls, the ``__main__`` block) never runs, and a backend that needs more
than definitions is refused with one line.
An ``aot_autograd(...)`` or ``functools.partial`` backend is recorded as a recipe of its parts
(capture/backend_recipe.py); ``dump_backend`` hands it out as ``recipe:{...}``, with
``--trust-backend`` too, since rebuilding it imports the compilers it names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import sys
import sysconfig
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
from graphdbg.backends.script_definitions import Script, did_you_mean
from graphdbg.errors import GraphdbgError

# the PYTHONPATH the user started graphdbg with, kept when graphdbg adds a dump's project folder to it
USER_PYTHONPATH = "GRAPHDBG_USER_PYTHONPATH"

# Recorded names that mean a backend replay knows by name, whatever module spelled them.
KNOWN_ALIASES = {"thunder.dynamo.compiler:ThunderCompiler": "thunder", "thunder.dynamo:ThunderCompiler": "thunder"}


def import_object(spec: str) -> Any:
    """``package.module:attr.sub`` (or ``path/script.py:attr``) -> the object; one-line
    GraphdbgError when it can't be had. A script (``prog.py``), or a module of the user's that
    is one (its top level runs a program), gives only the definitions ``attr`` needs; a name it
    lacks is found out by reading it, with a did-you-mean, never by running it."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise GraphdbgError(f"{spec!r}: expected package.module:callable")
    if module_name.endswith(".py"):
        return script_object(module_name, attr, spec)
    file = user_module_file(module_name)
    if file is not None:
        script = _read_script(file)
        script.check_name(attr, spec)
        if script.runs_program():
            return script_object(str(file), attr, spec)
    try:
        obj: Any = importlib.import_module(module_name)
    except GraphdbgError:
        raise
    except Exception as e:
        raise GraphdbgError(f"{spec!r}: cannot import {module_name} ({type(e).__name__}: {_first_line(e)})") from e
    return _attribute(obj, attr, spec, module_name)


def _attribute(obj: Any, attr: str, spec: str, where: str) -> Any:
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            shown = [n for n in dir(obj) if not n.startswith("_")]
            raise GraphdbgError(f"{spec!r}: {where} has no {attr}{did_you_mean(part, shown)}") from e
    return obj


def user_module_file(module: str) -> Path | None:
    """The file of a top-level single-file module of the user's (not installed, not torch's or
    Python's), found without importing it; None otherwise."""
    if "." in module or not module.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if spec is None or spec.submodule_search_locations is not None or not origin or not origin.endswith(".py"):
        return None
    file = Path(origin).resolve()
    installed = {Path(p).resolve() for k, p in sysconfig.get_paths().items() if k in ("purelib", "platlib", "stdlib")}
    return None if any(file.is_relative_to(p) for p in installed) else file


def module_folder(module: str) -> str | None:
    """The ``sys.path`` folder a module would be imported from, found without importing it."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top) if top.isidentifier() else None
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    here = Path(spec.origin).resolve().parent
    return str(here.parent if spec.submodule_search_locations is not None else here)


_scripts: dict[Path, tuple[Script, types.ModuleType, set[int]]] = {}


def _read_script(path: str | Path) -> Script:
    file = Path(path).resolve()
    return _scripts[file][0] if file in _scripts and _scripts[file][0].source_mtime == _mtime(file) else Script.read(file)


def _mtime(file: Path) -> int | None:
    try:
        return file.stat().st_mtime_ns
    except OSError:
        return None


def script_object(path: str, qualname: str, spec: str | None = None) -> Any:
    """``qualname`` of a user's script, with only the definitions it needs run (module
    ``script_definitions`` says which); the program (its top-level calls, a ``try:`` running the
    model, its ``__main__`` block) never runs. Says so on stderr, once per script."""
    spec = spec or f"{path}:{qualname}"
    file = Path(path).resolve()
    if file in _scripts and _scripts[file][0].source_mtime == _mtime(file):  # an edited script is read again
        script, module, ran = _scripts[file]
    else:
        _scripts.pop(file, None)
        script = Script.read(file)
        module = types.ModuleType(f"graphdbg_script_{file.stem}")
        module.__file__ = str(file)
        ran = set()
    script.check_name(qualname, spec)
    todo = [i for i in script.needed(qualname) if i not in ran]
    sys.modules[module.__name__] = module  # dataclasses and pickling look classes up by module
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))  # the script's sibling modules import as they did for it
    try:
        exec(compile(ast.Module(body=[script.tree.body[i] for i in todo], type_ignores=[]), str(file), "exec"),
             module.__dict__)
    except Exception as e:
        raise GraphdbgError(f"{path}: loading the backend's definitions failed ({type(e).__name__}: {_first_line(e)})") from e
    if file not in _scripts:
        sys.stderr.write(f"graphdbg: loaded the backend from {file} ({qualname} and the definitions it needs: {len(todo)} of "
                         f"{len(script.tree.body)} top-level statements; the program not run)\n")
    ran.update(todo)
    _scripts[file] = (script, module, ran)
    return _attribute(module, qualname, spec, file.name)


def dump_backend(dump: Any, trust: bool, command: str = "replay", shown_path: Any = None) -> str:
    """The backend ``dump`` recorded, as ``resolve_backend`` takes it. A registered name is
    returned as it is; code the dump names (``module:qualname``, or a function of the captured
    script) only with ``trust``, else a GraphdbgError whose one line gives the command to run."""
    spec = dump.manifest.backend or "eager"
    spec = KNOWN_ALIASES.get(spec, spec)
    recipe = dump.manifest_data.get("backend_recipe")
    if recipe is not None or is_recipe_spec(spec):  # aot_autograd(...) / partial: the recipe wins over the class name
        return _recipe_backend(check_recipe(recipe) if recipe is not None else recipe_of_spec(spec), trust, command,
                               shown_path or dump.path)
    if ":" not in spec:
        return spec
    script = dump.manifest.backend_source.script if dump.manifest.backend_source else None
    if not trust:
        where = f" (defined in {script})" if script else ""
        raise GraphdbgError(
            f"the dump's backend is {spec}{where}, code the dump names; graphdbg imports it only when you say so: "
            f"graphdbg {command} {shown_path or dump.path} --trust-backend (or pick one with --backend)")
    if spec.startswith("__main__:"):
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
            os.environ.setdefault(USER_PYTHONPATH, os.environ.get("PYTHONPATH", ""))  # a self-check runs as the user would
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
    recipe = dump.manifest_data.get("backend_recipe")
    if recipe is not None:
        return recipe_spec(check_recipe(recipe))
    return str(dump.backend)


def backend_spec(backend: str | Callable[..., Any], strict: bool = True) -> str:
    """A backend as a string a child process (or a repro script) can resolve again: a name as it
    is; an ``aot_autograd(...)``/``partial`` object as its recipe; else ``module:qualname``.
    Not ``strict``: a backend no other process can import gets its best name instead of an error."""
    if isinstance(backend, str):
        return (registered_definition(backend) or backend) if strict else backend
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


def registered_definition(name: str) -> str | None:
    """Where a backend registered by ``name`` in this process only (``register_backend`` in the
    user's program, or a package imported here) is defined, as ``module:qualname`` (or
    ``path/script.py:qualname`` for one of the running script, ``__main__``), for a child that
    must bring it back: a fresh interpreter knows torch's own names and its entry points, not
    these. None for any other name. The user registered it in this process: it is their code,
    imported in the child under their trust, as a ``module:callable`` they named. One that no
    other process can import (a lambda, a local function, a notebook's) is a one-line error."""
    registry = sys.modules.get("torch._dynamo.backends.registry")  # imported by whoever registered one
    if registry is None or not _REGISTERED_NAME.fullmatch(name) or name in TORCH_BACKENDS or name == "thunder":
        return None
    fn = getattr(registry, "_COMPILER_FNS", {}).get(name)
    if fn is None or getattr(registry, "_BACKENDS", {}).get(name) is not None:  # unknown, or an entry point's: found by name
        return None
    module, qual = getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", None) or ""
    if module == "torch" or module.startswith("torch."):
        return None
    how = (f"backend {name!r} is registered in this process only ({module or '?'}:{qual or type(fn).__name__}), and a "
           "sandboxed worker can't import it: define it at the top level of a module or script and register it there, "
           "pass it as package.module:callable, or run in this process (isolate=False, --no-isolate)")
    if module == "__main__" and qual and "<" not in qual:  # a function or class of the running script
        script = getattr(sys.modules.get("__main__"), "__file__", None)
        if not script or not str(script).endswith(".py") or not Path(script).is_file():
            raise GraphdbgError(how)
        return f"{Path(script).resolve()}:{qual}"
    try:  # a module's function or class, or an aot_autograd(...)/partial recipe; not an instance, lambda or local
        return backend_spec(fn)
    except GraphdbgError:
        raise GraphdbgError(how) from None


_REGISTERED_NAME = re.compile(r"[A-Za-z_][\w.-]*")


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


# The names torch registers itself (``torch._dynamo.list_backends(exclude_tags=())`` of torch 2.13,
# and onnxrt of earlier releases), known without importing Dynamo (``known_without_dynamo``)
TORCH_BACKENDS = frozenset({
    "aot_eager", "aot_eager_decomp_partition", "aot_eager_decomp_partition_crossref", "aot_eager_decomp_partition_with_mode",
    "aot_eager_default_partitioner", "aot_ts", "cudagraphs", "dynamo_accuracy_minifier_backend", "dynamo_minifier_backend",
    "eager", "eager_debug", "eager_noexcept", "inductor", "invoke_subgraph", "onnxrt", "openxla", "openxla_eval",
    "pre_dispatch_eager", "ts", "tvm"})


def known_without_dynamo(spec: str | Callable[..., Any]) -> bool:
    """Whether ``spec`` is a registered name, as far as can be told without importing Dynamo (2 s
    of CPU): one torch registers itself, or ``thunder`` where it is installed. A torch that
    lacks one, or a Thunder that doesn't import, says so where the backend is resolved. False
    says nothing: ``resolve_backend`` knows."""
    if not isinstance(spec, str):
        return False
    if spec == "thunder":
        try:
            return importlib.util.find_spec("thunder") is not None
        except (ImportError, ValueError):
            return False
    return spec in TORCH_BACKENDS


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
        return backend_label(spec), rebuild_backend(recipe, script_object)
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
        known = {n for n in list_backends(exclude_tags=()) if "TESTING_ONLY" not in n} | {"thunder"}
        hint = did_you_mean(spec, known) or "; give a registered name (inductor, aot_eager, eager, ...)"
        raise GraphdbgError(f"unknown backend {spec!r}{hint}, or package.module:callable") from e
    return spec, spec
