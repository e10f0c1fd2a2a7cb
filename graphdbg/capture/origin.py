"""Which user code a graph came from: the frame Dynamo was compiling and its compile id.

Prefill and decode, or ``h.0`` and ``h.2``, compile to graphs that look alike; the frame and
Dynamo's compile id (``"1/0"``: frame 1, first compile; ``"1/1"`` a recompile) tell them apart.

    >>> compile_origin(gm)      # called from inside a backend
    {'function': 'forward', 'file': '/src/model.py', 'line': 41, 'compile_id': '0/0'}
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx


def compile_origin(gm: fx.GraphModule) -> dict[str, Any]:
    """The frame and compile id of the Dynamo compile now running; empty outside Dynamo."""
    origin: dict[str, Any] = {}
    try:
        # torch._dynamo costs about 2 s: imported only when needed
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        code = getattr(tx, "f_code", None)
        if code is not None:
            origin.update(function=code.co_name, file=code.co_filename, line=code.co_firstlineno)
    except Exception:
        pass
    compile_id = getattr(gm, "meta", {}).get("dynamo_compile_id")
    if compile_id is None:
        try:
            from torch._guards import CompileContext  # a private torch API that may move: the try answers without it

            compile_id = CompileContext.current_compile_id()
        except Exception:
            compile_id = None
    if compile_id is not None:
        origin["compile_id"] = str(compile_id)
    return origin
