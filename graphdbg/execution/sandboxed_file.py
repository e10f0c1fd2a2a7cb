"""A file run as ``__main__`` in a replay child's sandbox: the child side of a self-check (``minify.self_check``).

    python -I -m graphdbg.execution.sandboxed_file [--hide-graphdbg SHADOW] --script repro.py ARGS...
    python -I -m graphdbg.execution.sandboxed_file [--replays-here] --module pytest ARGS...

A ``repro.py`` or an exported test runs a dump's graph, which is untrusted: this launcher
applies the sandbox and the memory cap of a replay child (``execution.sandbox.sandbox_child``:
writes under ``$GRAPHDBG_SANDBOX_DIR`` alone, no sockets, ...) before any of it runs, then runs
the file as ``python FILE`` (``runpy``, as ``__main__``) or the module as ``python -m``. What a
file starts (a repro runs its backend in a child: ``python repro.py --in-process``) inherits the
sandbox: Landlock, seccomp, no new privileges and the address-space limit all hold across
``fork`` and ``execve``.

``--replays-here``: an isolated replay the file asks for (an exported test's) runs in this
process, already a replay child's sandbox, not in a child of its own (``sandbox.HERE_ENV``, read by ``executor.executor_for``).

``--hide-graphdbg``: a repro must run without graphdbg, so once the sandbox is on, graphdbg's
modules are forgotten and ``SHADOW`` (a ``graphdbg`` package that refuses to load) comes first
on ``sys.path``; the same folder is on ``PYTHONPATH`` for the interpreters the repro starts.

Its stdout goes where its stderr goes (one file the parent reads through the gate).
"""

from __future__ import annotations

import os
import runpy
import sys

from graphdbg.execution import sandbox
from graphdbg.execution.child import die_with_parent


def main(argv: list[str]) -> None:
    die_with_parent()
    sandbox.sandbox_child(own_parent=False)  # before anything of the file is read; it notes what it applied
    os.dup2(2, 1)
    sys.stdout.reconfigure(line_buffering=True)  # the two streams in one file, in the order written
    shadow = None
    if argv[0] == "--replays-here":  # read when the API chooses where an isolated replay runs (executor_for)
        os.environ[sandbox.HERE_ENV], argv = "1", argv[1:]
    if argv[0] == "--hide-graphdbg":
        shadow, argv = argv[1], argv[2:]
    what, target, args = argv[0], argv[1], argv[2:]
    if shadow is not None:
        for name in [n for n in sys.modules if n == "graphdbg" or n.startswith("graphdbg.")]:
            del sys.modules[name]
        # nor found by name where this process imported it from (sandbox.child_path's ``first``)
        sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "key", None) != "first"]
        sys.path.insert(0, shadow)
    if what == "--script":
        sys.argv = [target, *args]
        # first on the path, as ``python FILE`` puts it: what was written beside the file (a
        # backend's module copied there) imports as it does for the user
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
