"""Backends for world replays that fail on one rank only (the rank comes from torchrun's $RANK)."""

from __future__ import annotations

import ctypes
import os


def segfault_on_rank1(gm, example_inputs):
    """Rank 1's compile kills its process (SIGSEGV); the other ranks wait in the graph's all-reduce."""
    if os.environ.get("RANK") == "1":
        ctypes.string_at(0)
    return gm.forward
