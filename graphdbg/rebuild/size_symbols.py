"""Values for a graph's size symbols, and its annotations bound to them.

A dump records a hint for every size symbol (``s77 = 2``); a printed graph or a compile-cache
file records none. ``size_env`` gives each symbol the caller's value (``sizes=``), else the
recorded hint, else ``DEFAULT_SYMBOL_SIZE``, and lists each defaulted one as a ``size``
stand-in. ``bind_sizes`` writes those values into a module's annotations, so that input
synthesis, attribute synthesis and the stand-ins for missing ops all see concrete shapes.

    >>> env, stand_ins = size_env(placeholders, manifest["inputs"], sizes={"s77": 16})
    >>> bind_sizes(gm, env)          # "f32[s77, 8]" now reads "f32[16, 8]" on every node
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.rebuild.inputs import StandIn, symbol_env
from graphdbg.rebuild.synthesize import DEFAULT_SYMBOL_SIZE, symbol_sizes
from graphdbg.store.specs import SymSpec, TensorSpec, eval_dim


def size_env(placeholders: list[fx.Node], descs: list[Mapping[str, Any]],
             sizes: Mapping[str, int] | None = None) -> tuple[dict[str, int], list[StandIn]]:
    """A value for every size symbol the inputs' annotations use; a stand-in for each guessed one."""
    sizes = dict(sizes or {})
    hints = symbol_env(list(descs))
    env: dict[str, int] = {}
    stand_ins: list[StandIn] = []
    for name in sorted(set(symbol_sizes(placeholders)) | set(hints)):
        if name in sizes:
            env[name] = int(sizes[name])
        elif name in hints:
            env[name] = int(hints[name])
        else:
            env[name] = DEFAULT_SYMBOL_SIZE
            stand_ins.append(StandIn(name, "size", f"no value recorded; {DEFAULT_SYMBOL_SIZE} used (pass sizes= to choose)"))
    for name, value in sizes.items():
        env.setdefault(name, int(value))
    return env, stand_ins


def bind_sizes(gm: fx.GraphModule, env: Mapping[str, int]) -> None:
    """Replace symbolic annotations in ``gm`` (and its nested graphs) by their values under ``env``.

    Annotations that use a symbol ``env`` lacks (an unbacked ``u0`` computed inside the graph)
    stay as they are. The graph is ``gm``'s own copy, so the parsed graph is not touched.
    """
    if not env:
        return
    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            spec = node.meta.get("graphdbg_spec")
            bound = bound_spec(spec, env)
            if bound is not spec:
                node.meta["graphdbg_spec"] = bound
                node.meta["graphdbg_symbolic_spec"] = spec  # which dims were dynamic (replay/retrace.as_captured)


def bound_spec(spec: Any, env: Mapping[str, int]) -> Any:
    """``spec`` with its symbols replaced by their values, or ``spec`` itself if it has none or ``env`` lacks one."""
    try:
        if isinstance(spec, TensorSpec) and not (spec.is_static() and all(isinstance(d, int) for d in spec.stride or [])):
            return replace(spec, shape=spec.concrete_shape(dict(env)), stride=spec.concrete_stride(dict(env)))
        if isinstance(spec, SymSpec) and spec.hint is None and spec.kind == "symint":
            return replace(spec, hint=eval_dim(spec.expr, dict(env)))
    except GraphdbgError:
        pass
    return spec
