"""A backend's source brought along into a folder graphdbg writes (a minify output, an exported
test's data), so the folder runs on another machine, from any folder, after the script moved.

    >>> carry_backend("/home/me/proj/prog.py:strict_backend", Path("min"))
    Carried(spec='prog_backend:strict_backend', notes=['copied the definitions strict_backend needs from ../prog.py to min/prog_backend.py'])

- a backend defined in the user's script (``prog.py:fn``, or a recipe part of one): the
  definitions it needs (``script_definitions``: no program, no ``import graphdbg`` it does not
  use) are written to ``<stem>_backend.py`` in the folder, with where they came from in its
  first lines; the spec then names that module;
- a single-file module of the user's (``mybackend:fn``, not installed): copied to the folder
  (its definitions only, when importing it would run a program);
- a package of the user's: its ``sys.path`` folder, relative to the folder (``paths``);
- an installed module or a registered name: nothing to bring, it imports by name.

What a dump names never picks a file (issue 51): ``recorded_path``, the folder the dump says a
module backend was imported from, is looked in only when it lies under the user's own folder
(the working folder) and outside the dump; nothing inside the dump (``dump``) is copied or put
on the folder's ``sys.path``; and with ``user_folder_only`` (a custom op's module, for a repro)
only a file under the user's own folder is copied.

The folder's files are imported by name from the folder itself, after the folders they came
from (``paths``, relative): where the user's module still is, the user's module runs, so a fix
shows; a script's definitions are always the copy (a script is no module), and the repro says
when the script changed since.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphdbg.backends.recipe import RECIPE_PREFIX, is_recipe_spec, recipe_spec
from graphdbg.backends.resolve import module_folder, user_module_file
from graphdbg.backends.script_definitions import Script
from graphdbg.errors import GraphdbgError
from graphdbg.store.safe_files import write_file


@dataclass
class Carried:
    spec: str  # the backend as the folder's files name it
    notes: list[str] = field(default_factory=list)  # what was brought along, one line each, for the user
    paths: list[str] = field(default_factory=list)  # sys.path folders relative to the folder (packages of the user's)
    files: list[str] = field(default_factory=list)  # the file names written into the folder
    # a script's definitions copied: {file: [the script, relative to the folder; its sha256 then]}
    scripts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def modules(self) -> list[str]:
        """The user's modules copied (not a script's definitions): each imports by ``own_modules_first``'s rule."""
        return [f.removesuffix(".py") for f in self.files if f not in self.scripts]


def carry_backend(spec: str, folder: Path, recorded_path: str | None = None, *, dump: Path | None = None,
                  user_folder_only: bool = False) -> Carried:
    """``spec`` with every script or user-module part of it brought into ``folder``.
    ``recorded_path``: the sys.path folder capture recorded for a module backend (a dump's word:
    used only under the working folder, outside ``dump``). A file inside ``dump``, or with
    ``user_folder_only`` one outside the working folder, is a GraphdbgError (one line)."""
    folder = Path(folder)
    out = Carried(spec)
    scripts: dict[Path, set[str]] = {}
    recorded_path = str(own) if (own := user_folder(recorded_path, dump)) is not None else None

    def part(callable_: str, script: str | None) -> str:
        if script is None:
            module, _, qual = callable_.rpartition(":") if ".py:" in callable_ else callable_.partition(":")
        else:
            module, qual = script, callable_.partition(":")[2]
        file = Path(module).resolve() if module.endswith(".py") else _user_file(module, recorded_path)
        if file is not None:
            _may_copy(file, dump, user_folder_only)
        if file is not None and (module.endswith(".py") or Script.read(file).runs_program()):
            scripts.setdefault(file, set()).add(qual)  # a program: the definitions it needs, as replay loads them
            return f"{file.stem}_backend:{qual}"
        return f"{_module(module, file, folder, out, recorded_path, dump)}:{qual}"

    if is_recipe_spec(spec):
        recipe = json.loads(spec[len(RECIPE_PREFIX):])
        _walk_recipe(recipe, part)
        out.spec = recipe_spec(recipe)
    elif ":" in spec:
        out.spec = part(spec, None)
    for file, quals in scripts.items():
        _write_definitions(file, sorted(quals), folder, out)
        _relative_path(file.parent, folder, out, dump)  # its sibling modules, while they are where they were
    return out


def user_folder(path: str | Path | None, dump: Path | None) -> Path | None:
    """``path`` (a folder or file a dump names), resolved, when it lies under the user's own
    folder (the working folder) and outside ``dump``; else None."""
    if not path:
        return None
    try:
        where, cwd = Path(path).resolve(), Path.cwd().resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    if not where.is_relative_to(cwd) or _inside(where, dump):
        return None
    return where


def _inside(path: Path, dump: Path | None) -> bool:
    if dump is None:
        return False
    root = Path(dump).resolve()
    return Path(path).resolve().is_relative_to(root if root.is_dir() else root.parent)


def _may_copy(file: Path, dump: Path | None, user_folder_only: bool) -> None:
    """A GraphdbgError unless ``file`` may be copied: never from inside the dump (a dump chooses
    no code that graphdbg writes), and with ``user_folder_only`` only from the working folder."""
    if _inside(file, dump):
        raise GraphdbgError(f"{file.name} lies inside the dump: graphdbg copies no file of a dump's into what it writes")
    if user_folder_only and user_folder(file, None) is None:
        raise GraphdbgError(f"{file.name} lies outside the working folder: graphdbg copies modules from the user's own folder only")


_said: set[str] = set()


def say_once(notes: list[str]) -> None:
    """Each note on stderr, once per process."""
    for note in notes:
        if note not in _said:
            _said.add(note)
            sys.stderr.write(f"graphdbg: {note}\n")


def _walk_recipe(recipe: dict[str, Any], part: Any) -> None:
    items = list(recipe.get("kwargs", {}).values()) + [recipe.get("func") or {}] + list(recipe.get("args", []))
    items += list(recipe.get("keywords", {}).values())
    for item in items:
        if "recipe" in item:
            _walk_recipe(item["recipe"], part)
        elif "callable" in item:
            item["callable"] = part(item["callable"], item.pop("script", None))


def _write_definitions(file: Path, quals: list[str], folder: Path, out: Carried) -> None:
    script = Script.read(file)
    for qual in quals:
        script.check_name(qual, f"{file}:{qual}")
    indexes = sorted(set().union(*(script.needed(q) for q in quals)))
    name = f"{file.stem}_backend.py"
    origin = _relative(file, folder)
    digest = hashlib.sha256(script.source.encode()).hexdigest()
    out.scripts[name] = [origin, digest]
    header = (f'"""The definitions {", ".join(quals)} needs, copied by graphdbg from {origin} (sha256 {digest[:16]}...),\n'
              f'so that this folder runs without that script: {len(indexes)} of its {len(script.tree.body)} top-level '
              'statements, never its program."""\n\n')
    write_file(folder / name, header + script.definitions_source(indexes))
    out.files.append(name)
    out.notes.append(f"copied the definitions {', '.join(quals)} needs from {origin} to {folder / name}")


def _user_file(module: str, recorded_path: str | None) -> Path | None:
    file = user_module_file(module)
    if file is None and recorded_path and "." not in module and (Path(recorded_path) / f"{module}.py").is_file():
        file = Path(recorded_path, f"{module}.py").resolve()
    return file


# a module copied under one of these names would be run by pytest or Python on its own (a
# conftest.py collected beside an exported test, a sitecustomize.py at start): never written
_RUN_BY_NAME = frozenset({"conftest", "sitecustomize", "usercustomize", "pytest", "__init__", "__main__", "setup", "noxfile"})


def _module(module: str, file: Path | None, folder: Path, out: Carried, recorded_path: str | None,
            dump: Path | None = None) -> str:
    if file is not None and module in _RUN_BY_NAME:
        out.notes.append(f"not copied the backend's module {module}: a file {module}.py in {folder} would run on its own; "
                         "it is imported by name where the test or repro runs")
    elif file is not None:
        name = f"{module}.py"
        write_file(folder / name, Script.read(file).source)
        out.files.append(name)
        out.notes.append(f"copied the backend's module {module} from {_relative(file, folder)} to {folder / name}")
        _relative_path(file.parent, folder, out, dump)  # its sibling modules, while they are where they were
        return module
    root = module_folder(module) or recorded_path
    if root and not _installed(root) and _relative_path(Path(root), folder, out, dump):
        out.notes.append(f"the backend's package {module.split('.')[0]} is imported from {_relative(Path(root), folder)}, "
                         f"relative to {folder} (not copied)")
    return module


def _relative_path(root: Path, folder: Path, out: Carried, dump: Path | None = None) -> bool:
    rel = _relative(root, folder)
    if rel in out.paths or _inside(root, dump):  # a folder of the dump's never goes on sys.path
        return False
    out.paths.append(rel)
    return True


def _installed(root: str) -> bool:
    import sysconfig  # only for a package of the user's: rare

    return any(Path(root).resolve().is_relative_to(Path(p).resolve())
               for k, p in sysconfig.get_paths().items() if k in ("purelib", "platlib", "stdlib"))


def _relative(path: Path, folder: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), Path(folder).resolve())
    except ValueError:  # another drive: its name only
        return Path(path).name


def own_modules_first(folder, paths, copies, names):  # no annotations: written as is into files of any Python
    """Where the modules of a backend graphdbg copied import from, in a file graphdbg wrote (a
    ``repro.py``, an exported test): the one rule of both, written into each from here.

    Each module of ``names`` (a copy of it is in the folder ``copies``) is the user's own wherever
    that is importable: from a folder it lived in (``paths``, relative to ``folder``), else from
    the path the interpreter was started with (``PYTHONPATH``, the current folder under
    ``python -m``, pytest's rootdir); the copy only where it is not. ``sys.path`` is left that
    way: those folders first, then the rest of it, the copies' folder last. Returns one line per
    module saying which it imports, for the user.
    """
    # here: this function is the whole rule in the files it is written into, with its imports
    import importlib
    import importlib.machinery
    import os
    import sys

    def same(a, b):
        return os.path.realpath(a or ".") == os.path.realpath(b or ".")

    def shown(path):
        try:
            return os.path.relpath(path)
        except ValueError:  # another drive
            return path

    lived = [os.path.join(str(folder), p) for p in paths if os.path.isdir(os.path.join(str(folder), p))]
    lived = list(dict.fromkeys(p for p in lived if not same(p, copies)))
    sys.path[:] = [*lived, *(p for p in sys.path if p not in lived and not same(p, copies)), str(copies)]
    said = []
    for name in names:
        spec = importlib.machinery.PathFinder.find_spec(name, sys.path[:-1])
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            said.append(f"the backend's module {name}: yours, {shown(spec.origin)}")
        else:
            said.append(f"the backend's module {name}: graphdbg's copy, {shown(os.path.join(str(copies), name + '.py'))} "
                        "(yours is not importable from where it was nor from sys.path)")
        # imported now, from where it was found: a child process this one starts imports the module
        # this one did (graphdbg's children find what the parent imported first), not the copy
        importlib.import_module(name)
    return said


def import_rule_source() -> str:
    """``own_modules_first``'s source, for the files graphdbg writes (they import nothing of graphdbg for it)."""
    return inspect.getsource(own_modules_first)
