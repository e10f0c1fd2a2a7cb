"""Backends for world replays that fail on one rank only: by torchrun's $RANK, or by the shapes one rank has."""

from __future__ import annotations

import ctypes
import os


def segfault_on_rank1(gm, example_inputs):
    """Rank 1's compile kills its process (SIGSEGV); the other ranks wait in the graph's all-reduce."""
    if os.environ.get("RANK") == "1":
        ctypes.string_at(0)
    return gm.forward


def _rows_not_tiled(example_inputs, tile: int = 4) -> int | None:
    """The first dimension of a 2-D input that is not a multiple of ``tile`` (a batch left over
    at the end of an epoch), else None."""
    return next((t.shape[0] for t in example_inputs if getattr(t, "dim", lambda: 0)() == 2 and t.shape[0] % tile), None)


def gelu_needs_tiled_rows(gm, example_inputs):
    """Refuses a graph that holds a GELU over rows that don't fill tiles of 4: on a DDP bucket
    split, only the piece holding the GELU, and only on the rank whose batch is short."""
    rows = _rows_not_tiled(example_inputs)
    if rows is not None and any("gelu" in str(n.target) for n in gm.graph.nodes):
        raise NotImplementedError(f"no GELU kernel for {rows} rows (tiles of 4)")
    return gm.forward


def forward_as_is(gm, example_inputs):
    return gm.forward


def reduce_scatter_needs_tiled_rows(gm, example_inputs):
    """A backward compiler that refuses a graph holding a reduce-scatter when its activations'
    rows don't fill tiles of 4: the rank whose batch is short fails in its backward."""
    rows = _rows_not_tiled(example_inputs)
    if rows is not None and any("reduce_scatter" in str(n.target) for n in gm.graph.nodes):
        raise NotImplementedError(f"no reduce-scatter lowering for {rows} rows (tiles of 4)")
    return gm.forward


def gelu_piece_fails_when_run(gm, example_inputs):
    """Compiles every graph; the code of one holding a GELU raises when it runs (a kernel that
    compiled and then faults): on a DDP bucket split, the GELU bucket's piece."""
    if not any("gelu" in str(n.target) for n in gm.graph.nodes):
        return gm.forward

    def run(*args):
        raise RuntimeError("illegal memory access in the GELU kernel")

    return run


def backward_needs_tiled_rows(gm, example_inputs):
    """A backward compiler that refuses a graph whose activations' rows don't fill tiles of 4."""
    rows = _rows_not_tiled(example_inputs)
    if rows is not None:
        raise NotImplementedError(f"no backward kernel for {rows} rows (tiles of 4)")
    return gm.forward
