"""Accuracy mode's second look: a difference from eager is a mismatch only when it holds up.

``compare_outputs`` judges the compiled call against eager within the dtype's tolerance. Two
kinds of difference are not the backend's fault, and are taken out here before a dump is written:

* outputs that flow from random ops (``judge.randomness``), when the backend drew other numbers
  than eager (Inductor's own random numbers; ``torch._inductor.config.fallback_random`` makes
  it draw eager's): nothing to compare them with, so they are set aside, and said once;
* rounding: reductions and fused kernels (attention, layer norm, their backwards) add in
  another order. What remains is confirmed against the float64 reference replay makes
  (``replay.float64``): the compiled value must be farther from float64 than eager's is, by
  a margin (``judge.accuracy.mismatches_beyond_float64``), to be a mismatch; where no float64
  reference can be made, eager judges within the dtype's bound in ulps
  (``judge.accuracy.mismatches_beyond_ulps``).

    >>> kept = confirm(gm, bad, expected, out, inputs, draws=Draws(before, after_compiled, after_eager))

Set aside, a difference would go unseen: a dropout's mask feeds every output of a training
step, so a wrong kernel before it (a TransformerEncoder's ReLU) was never compared. So while an
accuracy-mode capture compiles a graph with random ops, Inductor draws eager's random numbers
(``draw_as_eager``: ``fallback_random``, recorded in the dump's settings, which replay restores).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.capture.rng import same_draws
from graphdbg.capture.stderr import say
from graphdbg.judge.accuracy import (
    BY_DTYPE,
    OutputMismatch,
    Tolerance,
    mismatches_beyond_float64,
    mismatches_beyond_ulps,
    needs_float64,
)
from graphdbg.judge.randomness import random_outputs, same_generators
from graphdbg.rebuild.inputs import clone_values


@dataclass
class Draws:
    """The generator states around a checked call: before it, after the compiled call, after eager's."""

    before: dict[str, Any] | None
    compiled: dict[str, Any] | None
    eager: dict[str, Any] | None

    @property
    def differ(self) -> bool:
        return not same_generators(self.compiled, self.eager)


_told: set[str] = set()  # graphs whose random outputs were said to be set aside (once per graph)


def confirm(gm: fx.GraphModule, bad: list[OutputMismatch], expected: Any, actual: Any, inputs: list[Any], *,
            draws: Draws, tol: Tolerance = BY_DTYPE, positional: bool = False,
            label: str = "graph") -> list[OutputMismatch]:
    """The mismatches of ``bad`` (output mismatches of ``gm`` on ``inputs``) that hold up.

    ``positional``: ``expected``/``actual`` are a backward's gradient lists, ``None`` included,
    and mismatch indices are positions in them."""
    if not bad:
        return bad
    if draws.differ:
        drawn = random_outputs(gm, none_is_output=positional)
        kept = [m for m in bad if not (m.index in drawn and getattr(m, "what", "output") in ("output", "gradient"))]
        if len(kept) < len(bad) and label not in _told:
            _told.add(label)
            say(f"graphdbg: {label}: {len(bad) - len(kept)} output(s) that depend on random ops not compared "
                "(the backend draws other random numbers than eager; torch._inductor.config.fallback_random = True "
                "makes Inductor draw eager's)")
        bad = kept
    outputs = [m for m in bad if getattr(m, "what", "output") in ("output", "gradient")]
    if not outputs:
        return bad
    exp, act = (_as_leaves(expected), _as_leaves(actual)) if positional else (expected, actual)
    suspects = needs_float64(outputs, exp)
    if not suspects:
        return bad
    ref64 = _float64_values(gm, inputs, suspects, draws.before, positional)
    if ref64 is None:  # eager judges, within the dtype's resolution in ulps
        still_bad = mismatches_beyond_ulps(outputs, exp, act, tol=tol)
    else:
        still_bad = mismatches_beyond_float64(outputs, exp, act, ref64, tol=tol)
    checked, still = {id(m) for m in outputs}, {id(m) for m in still_bad}
    return [m for m in bad if id(m) not in checked or id(m) in still]


def _as_leaves(values: Any) -> list[Any]:
    """A gradient list with its ``None`` entries kept as leaves (0), so positions stay indices."""
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    return [0 if v is None else v for v in values]


def _float64_values(gm: fx.GraphModule, inputs: list[Any], indices: list[int], before: dict[str, Any] | None,
                    positional: bool) -> dict[int, Any] | None:
    """Float64 values of outputs ``indices``, run from the random state the checked call began in."""
    # replay.float64 is the float64 reference replay makes: imported only when a difference needs it
    from graphdbg.replay.float64 import ReferenceUnavailable, float64_reference

    try:
        with torch.no_grad(), same_draws(before):
            if not positional:
                return float64_reference(gm, clone_values(inputs), outputs=indices).values
            result = float64_reference(gm, clone_values(inputs)).values  # by pytree leaf
    except (ReferenceUnavailable, torch.OutOfMemoryError):
        return None
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat = pytree.tree_flatten(out.args[0], is_leaf=lambda x: x is None)[0]
    none_is_leaf = bool(pytree.tree_leaves([None]))  # torch 2.13's pytree keeps None gradients as leaves
    leaf_of, j = {}, 0
    for i, value in enumerate(flat):
        if value is not None or none_is_leaf:
            leaf_of[i], j = j, j + 1
    return {i: result[leaf_of[i]] for i in indices if i in leaf_of and leaf_of[i] in result}


@contextlib.contextmanager
def draw_as_eager(snap: Any, accuracy: bool) -> Iterator[None]:
    """While a backend compiles the graph of ``snap`` in accuracy mode: Inductor's random ops draw
    eager's numbers (``torch._inductor.config.fallback_random``), so the outputs that flow from
    them can be compared; the setting goes in the snapshot's recorded ones. Nothing when the graph
    draws nothing or the setting is on already."""
    values = (getattr(snap, "config", None) or {}).get("values")
    if not accuracy or not isinstance(values, dict) or snap.eager is None or not random_outputs(snap.eager):
        yield
        return
    import torch._inductor.config as config  # a few seconds the first time: only for an accuracy check of random ops

    if config.fallback_random:  # eager's numbers already (and recorded as a setting that differs)
        yield
        return
    values["inductor.fallback_random"] = True
    with config.patch(fallback_random=True):
        yield


__all__ = ["Draws", "confirm", "draw_as_eager"]
