"""Candidates that cut a ``torch.vmap`` in half: spot them and put functorch's layer stack back.

transformers builds attention masks with ``torch.vmap``, so Dynamo graphs of real models hold
``_vmap_increment_nesting`` ... ``_vmap_decrement_nesting`` pairs. A shrunk candidate that keeps
the increment and drops the decrement leaves a vmap layer open in this process (every later
run would be batched) and returns tensors that escaped it, which can't even be compared. Such a
candidate is no graph a user could have, so it is answered as a failure of its own:

    >>> with balanced_functorch_layers() as check:
    ...     outcome = run_case(candidate, backend)
    >>> check.unbalanced   # True: the layer stack was restored, the outcome is not the bug
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch


@dataclass
class LayerCheck:
    unbalanced: bool = False


def _depth() -> int:
    return int(torch._C._functorch.get_dynamic_layer_stack_depth())


@contextlib.contextmanager
def balanced_functorch_layers() -> Iterator[LayerCheck]:
    """Restore functorch's dynamic layer stack to its depth on entry; say whether it had to."""
    check = LayerCheck()
    before = _depth()
    try:
        yield check
    finally:
        if _depth() != before:
            check.unbalanced = True
            torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(before)


def escaped_vmap(error: BaseException | None) -> bool:
    """Is ``error`` functorch refusing a tensor that escaped a vmap (an output cut from inside one)?"""
    return isinstance(error, RuntimeError) and "escaped from inside a function being vmapped" in str(error)
