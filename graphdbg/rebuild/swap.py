"""Swaps: every call of a custom op replaced by a reference, the way stand-ins replace calls.

``--swap OP=REFERENCE`` names the op as ``ns::name`` (or ``torch.ops.ns.name[.overload]``) and
the reference as a built-in (``graphdbg.judge.references``: ``attention``, ``rms_norm``, ...),
adapted to the op's schema by argument name, or as the user's own ``module:function``, imported
like ``--ops`` (the user's choice on the command line, never a name from the dump) and called
with the op's arguments as they are.

    >>> swaps = parse_swaps(["kt_attn::int8_attention=attention"], case.gm)
    >>> gm, used = swap_ops(case.gm, swaps)       # a copy; ``used`` lists each replaced node
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.graph.allow_list import register_ops
from graphdbg.graph.kernels import custom_op_of, qualified_name
from graphdbg.judge.references import REFERENCES, adapt, reference_for
from graphdbg.rebuild.inputs import StandIn


@dataclass
class Swap:
    op: str  # ns::name
    reference: str  # a built-in's name or module:function
    fn: Callable[..., Any]


def op_key(name: str) -> str:
    """``torch.ops.ns.name.default``, ``ns.name``, ``ns::name`` -> ``ns::name`` (overloads kept but default)."""
    name = name.strip().removeprefix("torch.ops.")
    if "::" not in name:
        ns, _, rest = name.partition(".")
        name = f"{ns}::{rest}"
    return name.removesuffix(".default")


def graph_ops(gm: fx.GraphModule) -> dict[str, list[str]]:
    """The custom ops ``gm`` calls, by ``ns::name``: the argument names of each one's schema."""
    found: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        op = custom_op_of(node)
        if op is not None:
            found.setdefault(qualified_name(op), [a.name for a in op._schema.arguments])
    return found


def resolve_reference(spec: str, op: str, schema_args: list[str]) -> Callable[..., Any]:
    """A reference for ``op``: a built-in by name, else the user's ``module:function``."""
    spec = spec.strip()
    if spec in REFERENCES:
        fn = adapt(REFERENCES[spec], schema_args)
        if fn is None:
            raise GraphdbgError(f"--swap {op}={spec}: the reference needs arguments {op}'s schema "
                                f"({', '.join(schema_args)}) doesn't name; give a module:function of your own")
        return fn
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise GraphdbgError(f"--swap {op}={spec}: not a built-in reference ({', '.join(REFERENCES)}) nor a module:function")
    register_ops([module])  # the user's own module, named on the command line: imported like --ops
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise GraphdbgError(f"--swap {op}={spec}: {module} has no function {attr}")
    return obj


def parse_swaps(specs: Iterable[str], gm: fx.GraphModule) -> list[Swap]:
    """``OP=REFERENCE`` strings to Swaps; an OP the graph doesn't call is an error."""
    ops = graph_ops(gm)
    swaps = []
    for spec in specs:
        op, sep, ref = spec.partition("=")
        if not sep or not op.strip() or not ref.strip():
            raise GraphdbgError(f"--swap {spec!r}: expected OP=REFERENCE (kt::attention=attention, ns::op=mymod:fn)")
        key = op_key(op)
        if key not in ops:
            raise GraphdbgError(f"--swap {spec}: the graph calls no {key} (its custom ops: {', '.join(ops) or 'none'})")
        swaps.append(Swap(key, ref.strip(), resolve_reference(ref, key, ops[key])))
    return swaps


def builtin_swaps(gm: fx.GraphModule, given: list[Swap] | None = None) -> list[Swap]:
    """A Swap for every custom op ``gm`` calls that has a reference: ``given`` ones first, then
    built-ins matched by the op's name and fitted to its schema."""
    out = list(given or [])
    for op, args in graph_ops(gm).items():
        if any(s.op == op for s in out):
            continue
        name = reference_for(op)
        fn = adapt(REFERENCES[name], args) if name else None
        if fn is not None:
            out.append(Swap(op, name, fn))
    return out


def swap_ops(gm: fx.GraphModule, swaps: Iterable[Swap]) -> tuple[fx.GraphModule, list[StandIn]]:
    """A copy of ``gm`` whose calls of each swapped op call its reference instead."""
    by_op = {s.op: s for s in swaps}
    out = copy.deepcopy(gm)
    used = []
    for node in out.graph.nodes:
        op = custom_op_of(node)
        swap = by_op.get(qualified_name(op)) if op is not None else None
        if swap is None:
            continue
        node.target = swap.fn
        used.append(StandIn(node.name, "swap", f"{swap.op} replaced by the reference {swap.reference}"))
    out.recompile()
    return out, used


__all__ = ["Swap", "builtin_swaps", "graph_ops", "op_key", "parse_swaps", "resolve_reference", "swap_ops"]
