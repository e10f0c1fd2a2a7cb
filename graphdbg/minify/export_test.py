"""export_test: a dump becomes a pytest regression test, with its data next to it.

    >>> export_test("minified/", "tests/test_gelu_lowering.py")
    $ pytest tests/test_gelu_lowering.py      # fails while the bug is there, passes once fixed

The dump's own files are copied beside the test (``test_<name>_data/``: graph.py,
inputs.safetensors, manifest.json, no pickle; named by graphdbg whatever the dump's manifest
calls them; nothing else from the folder, no symbolic link), and the test replays it through
graphdbg the same way minify did:
it fails with the outcome's summary while the backend still fails, and passes once it runs
and agrees with eager. The backend's source graphdbg copied beside it is a fallback: the test
imports the user's own module wherever that is importable (``backends.carry.own_modules_first``,
repro.py's rule too), so it passes once the user's file is fixed, and says which it used.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from graphdbg.backends.carry import carry_backend, import_rule_source, say_once
from graphdbg.backends.resolve import backend_label, backend_spec, dump_backend, names_code, trusted_code
from graphdbg.dump import Dump
from graphdbg.errors import GraphdbgError
from graphdbg.formats import load as load_dump
from graphdbg.store.safe_files import Folder, write_file
from graphdbg.store.schema import Minified
from graphdbg.store.write import copy_dump


def export_test(dump: Any, path: str | Path, *, backend: Any = None, passes: Any = None,
                direct: bool | None = None, isolate: bool = True, timeout: float | None = None,
                trust: bool = True, command: str = "export-test") -> Path:
    """Write a pytest file at ``path`` and the dump's data next to it; returns ``path``.

    ``backend`` defaults to the dump's (a minified dump records the one minify used, and how it
    called it in ``manifest["minified"]``). The test replays in a child process by default
    (``isolate``), so a backend that segfaults fails the test instead of taking pytest down;
    it uses only graphdbg's public API (``graphdbg.load``, ``Case.run``).

    Not ``trust`` (the CLI without ``--trust-backend``): code the dump names (its backend, a
    recipe, minify's recorded backend and passes) is refused with the command to run; the test
    then holds only what ``backend``/``passes`` gave, or registered backend names.
    """
    d = dump if isinstance(dump, Dump) else load_dump(dump)
    path = Path(path)
    if not path.name.startswith("test_") or path.suffix != ".py":
        raise GraphdbgError(f"{path}: a pytest file is named test_*.py")
    minified = d.manifest.minified or Minified()
    shown = f"{d.path} -o {path}"
    if backend is None:
        recorded = minified.backend
        if recorded is not None and names_code(recorded):
            recorded = trusted_code(recorded, trust, "minified backend", command, shown)
        if recorded is None:
            recorded = dump_backend(d, trust, command, shown_path=shown)  # a script's function: from its recorded path
        backend = recorded  # an aot_autograd(...)/partial dump: its recipe
    if not isinstance(backend, str):
        if not callable(backend):
            raise GraphdbgError(f"{d.path}: the dump's backend {str(backend)[:60]!r} is not a backend name")
        backend = backend_spec(backend, strict=False)
    if passes is None:
        passes = trusted_code(minified.passes, trust, "minified passes", command, shown)
    if passes is not None and not isinstance(passes, (str, list, tuple)):
        raise GraphdbgError(f"{d.path}: the dump's passes {str(passes)[:60]!r} are not pass names")
    if passes is not None and not isinstance(passes, str):
        passes = ",".join(p if isinstance(p, str) else f"{p.__module__}:{p.__qualname__}" for p in passes)
    if direct is None:
        direct = bool(minified.direct)
    if not d.path.is_dir():
        raise GraphdbgError(f"{d.path}: export-test needs a graphdbg dump folder (minify a file first)")
    data = path.with_name(path.stem + "_data")
    if data.is_symlink() or data.exists() and not data.is_dir():
        raise GraphdbgError(f"{data}: exists and is not a folder graphdbg wrote")
    if data.exists():
        shutil.rmtree(data)
    # the backend's source comes along (a script's definitions, a module of the user's, named by
    # module); the test imports the user's own where it is importable, the copy where it is not
    carried = carry_backend(backend, data, d.manifest.backend_source.path if d.manifest.backend_source else None, dump=d.path)
    backend_before, backend = backend, carried.spec
    name = re.sub(r"\W", "_", path.stem[len("test_"):]) or "dump"
    # Every value goes into the file through repr, and the result must compile: a captured
    # message with quotes or backslashes is data, never code.
    shown = " ".join(backend_label(backend).split())  # a recipe, as people read it, in a comment beside it
    backend_line = repr(backend) + (f"  # {shown}" if shown != backend else "")
    text = _TEMPLATE.format(name=name, data=repr(data.name), backend=backend_line, passes=repr(passes),
                            direct=repr(bool(direct)), isolate=repr(bool(isolate)),
                            timeout=repr(None if timeout is None else float(timeout)),
                            kind=repr(str(d.failure_kind)), signature=repr(str(d.signature or "")),
                            paths=repr(carried.paths), modules=repr(carried.modules),
                            script=repr(_live_script(backend_before, carried, data)), rule=import_rule_source())
    try:
        compile(text, str(path), "exec")
    except SyntaxError as e:  # a bug here, not in the dump: never write a test that can't run
        raise GraphdbgError(f"{path}: the generated test does not compile ({e.msg}); please report this") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    copy_dump_files(d, data)
    say_once(carried.notes)
    return write_file(path, text)


def export_swap_test(dump: Any, path: str | Path, swaps: list[str], *, ops: list[str] | None = None,
                     trust_kernels: bool = False, within: list[str] | None = None) -> Path:
    """Write a pytest file at ``path`` asserting that the dump's graph with its kernels agrees with
    the graph with ``swaps`` (``OP=REFERENCE``) within the outputs' tolerance, or within the
    bounds ``within`` (``cosine>=0.9999``: recorded in the test, which checks them): it fails
    while a kernel is wrong and passes once it is fixed (docs/kernels.md). ``ops`` and the
    references' modules are the user's, imported by name where the test runs; the dump's files
    come along."""
    d = dump if isinstance(dump, Dump) else load_dump(dump)
    path = Path(path)
    if not path.name.startswith("test_") or path.suffix != ".py":
        raise GraphdbgError(f"{path}: a pytest file is named test_*.py")
    if not d.path.is_dir():
        raise GraphdbgError(f"{d.path}: export-test needs a graphdbg dump folder (minify a file first)")
    data = path.with_name(path.stem + "_data")
    if data.is_symlink() or data.exists() and not data.is_dir():
        raise GraphdbgError(f"{data}: exists and is not a folder graphdbg wrote")
    text = _SWAP_TEMPLATE.format(name=re.sub(r"\W", "_", path.stem[len("test_"):]) or "dump", data=repr(data.name),
                                 swaps=repr(list(swaps)), ops=repr(list(ops or [])), trust=repr(bool(trust_kernels)),
                                 within=repr([str(w) for w in within or []]))
    compile(text, str(path), "exec")  # every value went in through repr
    if data.exists():
        shutil.rmtree(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    copy_dump_files(d, data)
    return write_file(path, text)


def _live_script(backend: str, carried: Any, data: Path) -> tuple[str, str] | None:
    """(the script relative to the test's folder, the backend's name) for a backend of a script's own."""
    if not carried.scripts or ":" not in backend or not backend.rpartition(":")[0].endswith(".py"):
        return None
    (origin, _), = carried.scripts.values()  # relative to the data folder, one below the test's
    return str(Path(origin).relative_to("..")) if origin.startswith("..") else f"{data.name}/{origin}", backend.rpartition(":")[2]


def copy_dump_files(d: Any, dest: Path) -> list[str]:
    """Copy a dump's own files (manifest, graph, tensors) to the folder ``dest`` (made here, not
    through a link) under names graphdbg gives them; returns their names.

    Nothing else in the folder is copied (a ``conftest.py`` or a script placed in a dump would
    run under pytest), a graph file the manifest names ``conftest.py`` becomes ``graph.py``, no
    symbolic link is followed, and only regular files are read.
    """
    with Folder.open(dest.parent, create=True) as parent, parent.sub(dest.name, create=True) as folder:
        return copy_dump(d.path, folder, d.manifest_data)  # the manifest the Dump read and checked: not read again


_TEMPLATE = '''"""Regression test exported by graphdbg from a dump (the captured failure is CAPTURED below).

It fails while the backend still fails this graph, and passes once the backend compiles it,
runs it, and agrees with eager. The graph and its inputs are in the folder DUMP names (a
graphdbg dump: manifest.json, graph.py, inputs.safetensors; no pickle), with the backend's
source graphdbg copied (MODULES, a script's definitions). Your own module is imported wherever
it is importable (where it was, BACKEND_PATHS relative to DUMP, or your sys.path), graphdbg's
copy only where it is not, so a fix shows here; the test says which it used.
"""
import os
import sys
from pathlib import Path

import graphdbg
from graphdbg.store.manifest import GRAPH, INPUTS, MANIFEST

DUMP = Path(__file__).with_name({data})
BACKEND_PATHS = {paths}  # where the backend's modules (or package) were, relative to DUMP
MODULES = {modules}  # the backend's modules graphdbg copied into DUMP
SCRIPT = {script}  # a script that defines the backend, relative to this file; its definitions copied into DUMP
BACKEND = {backend}
PASSES = {passes}
KIND = {kind}
CAPTURED = {signature}


{rule}

def test_{name}(monkeypatch, capsys):
    backend, used = BACKEND, []
    if SCRIPT is not None and Path(__file__).parent.joinpath(SCRIPT[0]).is_file():
        backend = f"{{Path(__file__).parent.joinpath(SCRIPT[0]).resolve()}}:{{SCRIPT[1]}}"
        used.append(f"the backend {{SCRIPT[1]}}: yours, in {{SCRIPT[0]}}")
    elif SCRIPT is not None:
        used.append(f"the backend {{SCRIPT[1]}}: graphdbg's copy of its definitions ({{SCRIPT[0]}} is not there)")
    if MODULES or BACKEND_PATHS or SCRIPT is not None:  # here, and for the isolated replay: where it was, then your path, the copies last
        monkeypatch.setattr(sys, "path", list(sys.path))
        used += own_modules_first(DUMP, BACKEND_PATHS, DUMP, MODULES)
        lived = [str(DUMP / p) for p in BACKEND_PATHS if (DUMP / p).is_dir()]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*lived, *filter(None, [os.environ.get("PYTHONPATH")])]))
    with capsys.disabled():  # on the terminal whether it passes or fails
        print("".join(f"\\n{{Path(__file__).name}}: {{line}}" for line in used), end="\\n" if used else "")
    dump = graphdbg.load(DUMP)
    outcome = dump.case().run(backend, PASSES, direct={direct}, isolate={isolate}, timeout={timeout})
    assert outcome.status == "pass", f"{{outcome.summary()}} (the captured failure: {{CAPTURED}})" + "".join(f"; {{u}}" for u in used)
'''


_SWAP_TEMPLATE = '''"""Regression test exported by graphdbg (export-test --swap): the graph with its own kernels
agrees with the graph with each kernel of SWAPS replaced by its reference, within every bound of
WITHIN (the measures graphdbg compare --swap --within takes), or, with none, within the outputs'
tolerance. It fails while a kernel is wrong, and passes once it computes what its reference does.
The graph and its inputs are in the folder DUMP names (a graphdbg dump: manifest.json, graph.py,
inputs.safetensors; no pickle); OPS are the modules that define the custom ops.
"""
from pathlib import Path

import graphdbg

DUMP = Path(__file__).with_name({data})
SWAPS = {swaps}
OPS = {ops}
TRUST_KERNELS = {trust}  # True: its user Triton kernels run from the dump's source, in graphdbg's sandboxed replay child
WITHIN = {within}  # the bounds this test was written with; empty: the outputs' dtype tolerance


def test_{name}():
    report = graphdbg.compare_swap(DUMP, SWAPS, ops=OPS, trust_kernels=TRUST_KERNELS, within=WITHIN)
    assert report.within == WITHIN, report.judged_by()
    assert not report.moved, report.moves()
'''
