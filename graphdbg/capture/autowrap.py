"""Wrap every torch.compile backend of a process without editing its code.

``graphdbg capture -- python script.py`` puts ``capture/site`` on ``PYTHONPATH``; its
``sitecustomize`` calls :func:`install`, which waits for ``torch._dynamo.eval_frame`` to be
imported and then wraps the function through which torch.compile and torch._dynamo.optimize
resolve their backend. Settings come from the environment (``GRAPHDBG_DUMP_DIR``,
``GRAPHDBG_MODE``, ``GRAPHDBG_BUDGET``), so child processes (torchrun workers) inherit them.

Importing torch in sitecustomize would slow down every Python process the command starts,
including those that never use torch; the import hook costs nothing until torch is used.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from graphdbg.capture.on_import import watch
from graphdbg.capture.settings import DEFAULT_BUDGET, ENV_BUDGET, ENV_MODE

TARGET = "torch._dynamo.eval_frame"


def patch(eval_frame: Any) -> None:
    original = eval_frame.get_compiler_fn
    if getattr(original, "_graphdbg_wrapped", False):
        return

    def get_compiler_fn(compiler_fn: Any) -> Any:
        # Imported here, not at patch time: torch._dynamo is still being initialised then.
        from graphdbg.capture.hook import CapturingBackend, capture, user_backend

        # torch.compile(backend=graphdbg.capture(...)) arrives inside torch.compile's wrapper: one capture is enough
        if compiler_fn is not None and not isinstance(user_backend(compiler_fn), CapturingBackend):
            compiler_fn = capture(
                compiler_fn,
                mode=os.environ.get(ENV_MODE, "error"),
                budget_bytes=int(os.environ.get(ENV_BUDGET, DEFAULT_BUDGET)),
            )
        return original(compiler_fn)

    get_compiler_fn._graphdbg_wrapped = True  # type: ignore[attr-defined]
    eval_frame.get_compiler_fn = get_compiler_fn
    # Watch the nested-compile entry points as soon as their modules load, before a program
    # binds them by name (``from torch._inductor.compile_fx import compile_fx``).
    from graphdbg.capture import nested

    nested.install()


def _patch_logged(name: str, module: Any) -> None:
    try:
        patch(module)
    except Exception as e:
        sys.stderr.write(f"graphdbg: could not wrap torch.compile backends ({type(e).__name__}: {e})\n")


def install() -> None:
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    else:
        watch("autowrap", lambda name: name == TARGET, _patch_logged)
