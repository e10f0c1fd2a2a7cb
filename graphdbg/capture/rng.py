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

from graphdbg.judge.randomness import rng_state, same_draws, set_rng_state

__all__ = ["rng_state", "same_draws", "set_rng_state"]
