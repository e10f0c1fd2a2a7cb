"""The random-number state around accuracy mode's eager reference run.

The reference run must see the same random draws as the compiled call it checks (dropout masks,
``torch.rand`` in the graph), and must not use up draws the user's program would have seen:

    >>> before = rng_state()          # taken just before the compiled call
    >>> out = compiled(*args)
    >>> with same_draws(before):      # eager runs from the same state; afterwards the state is
    ...     expected = eager(*copies) # what the compiled call left, as if eager never ran

CPU and every initialised CUDA device are covered.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch


def rng_state() -> dict[str, Any]:
    """The CPU generator's state and, where CUDA is initialised, each device's."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def same_draws(before: dict[str, Any] | None) -> Iterator[None]:
    """Run the body from ``before``'s random state, then put back the state found on entry."""
    if before is None:
        yield
        return
    after = rng_state()
    set_rng_state(before)
    try:
        yield
    finally:
        set_rng_state(after)
