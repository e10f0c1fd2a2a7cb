"""export_test: a dump becomes a pytest regression test, with its data next to it.

    >>> export_test("minified/", "tests/test_gelu_lowering.py")
    $ pytest tests/test_gelu_lowering.py      # fails while the bug is there, passes once fixed

The dump is copied beside the test (``test_<name>_data/``: graph.py, inputs.safetensors,
manifest.json, no pickle), and the test replays it through graphdbg the same way minify did:
it fails with the outcome's summary while the backend still fails, and passes once it runs
and agrees with eager.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from graphdbg.errors import GraphdbgError


def export_test(dump: Any, path: str | Path, *, backend: Any = None, passes: Any = None,
                direct: bool | None = None, isolate: bool = False, timeout: float | None = None) -> Path:
    """Write a pytest file at ``path`` and the dump's data next to it; returns ``path``.

    ``backend`` defaults to the dump's (a minified dump records the one minify used, and how it
    called it in ``manifest["minified"]``).
    """
    import graphdbg
    from graphdbg.dump import Dump

    d = dump if isinstance(dump, Dump) else graphdbg.load(dump)
    path = Path(path)
    if not path.name.startswith("test_") or path.suffix != ".py":
        raise GraphdbgError(f"{path}: a pytest file is named test_*.py")
    minified = d.manifest.get("minified") or {}
    if backend is None:
        backend = minified.get("backend") or d.backend
    if not isinstance(backend, str):
        backend = f"{backend.__module__}:{backend.__qualname__}"
    if passes is None:
        passes = minified.get("passes")
    if passes is not None and not isinstance(passes, str):
        passes = ",".join(p if isinstance(p, str) else f"{p.__module__}:{p.__qualname__}" for p in passes)
    if direct is None:
        direct = bool(minified.get("direct", False))
    data = path.with_name(path.stem + "_data")
    if data.exists():
        shutil.rmtree(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(d.path, data)
    name = path.stem[len("test_"):] or "dump"
    path.write_text(_TEMPLATE.format(name=name, data=data.name, backend=backend, passes=passes, direct=direct,
                                     isolate=isolate, timeout=timeout, kind=d.failure_kind,
                                     signature=(d.signature or "").replace('"""', "'''")))
    return path


_TEMPLATE = '''"""Regression test exported by graphdbg from a {kind} dump.

Captured failure: {signature}
It fails while the backend still fails this graph, and passes once the backend compiles it,
runs it, and agrees with eager. The graph and its inputs are in {data}/ (a graphdbg dump).
"""
from pathlib import Path

import graphdbg
from graphdbg.replay.run import run_case

DUMP = Path(__file__).with_name({data!r})
BACKEND = {backend!r}
PASSES = {passes!r}


def test_{name}():
    dump = graphdbg.load(DUMP)
    outcome = run_case(dump.case(), BACKEND, PASSES, direct={direct!r}, isolate={isolate!r}, timeout={timeout!r})
    assert outcome.status == "pass", f"{{outcome.summary()}} (the captured failure: {{dump.signature}})"
'''
