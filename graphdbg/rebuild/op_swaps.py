"""Swaps: every call of a custom op replaced by a reference, the way stand-ins replace calls.

``--swap OP=REFERENCE`` names the op as ``ns::name`` (or ``torch.ops.ns.name[.overload]``) and
the reference as a built-in (``graphdbg.judge.references``: ``attention``, ``rms_norm``, ...),
adapted to the op's schema by argument name, with what the schema doesn't decide spelled out
(``attention(causal=True, scale=0.125)``) or assumed and said (each Swap's ``assumptions``),
or as the user's own ``module:function``, imported
like ``--ops`` (the user's choice on the command line, never a name from the dump) and called
with the op's arguments as they are.

    >>> swaps = parse_swaps(["kt_attn::int8_attention=attention"], case.gm)
    >>> gm, used = swap_ops(case.gm, swaps)       # a copy; ``used`` lists each replaced node
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.graph.allow_list import register_ops
from graphdbg.graph.kernels import custom_op_of, qualified_name
from graphdbg.judge.references import REFERENCES, fit, parse_reference, reference_for
from graphdbg.rebuild.inputs import StandIn

if TYPE_CHECKING:
    from graphdbg.store.schema import Manifest


@dataclass
class Swap:
    op: str  # ns::name
    reference: str  # a built-in's name (with its choices spelled out, as given) or module:function
    fn: Callable[..., Any]
    # a built-in's choices and where each came from (judge/references.py's ``fit``); none for the user's own
    assumptions: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "reference": self.reference, "assumptions": self.assumptions}


def op_key(name: str) -> str:
    """``torch.ops.ns.name.default``, ``ns.name``, ``ns::name`` -> ``ns::name`` (overloads kept but default)."""
    name = name.strip().removeprefix("torch.ops.")
    if "::" not in name:
        ns, _, rest = name.partition(".")
        name = f"{ns}::{rest}"
    return name.removesuffix(".default")


@dataclass
class OpArgs:
    """What a swap needs of an op's schema: its arguments' names, and those it writes when it
    returns nothing (an out-variant or in-place kernel: its results go there)."""
    names: list[str]
    written: list[str] = field(default_factory=list)


def graph_ops(gm: fx.GraphModule, kernel_names: dict[int, str] | None = None) -> dict[str, OpArgs]:
    """The custom ops ``gm`` calls, by ``ns::name``, and its Triton kernels, by name where the
    dump recorded it (``kernel_names``, graph/kernels.py), else ``kernel_idx=N``: the argument
    names of each one's schema (a kernel's: its keyword arguments)."""
    found: dict[str, OpArgs] = {}
    for node in (n for mod in gm.modules() if isinstance(mod, fx.GraphModule) for n in mod.graph.nodes):
        op = custom_op_of(node)
        if op is not None:
            schema = op._schema
            written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
            found.setdefault(qualified_name(op), OpArgs([a.name for a in schema.arguments], written if not schema.returns else []))
        missing = _stood_in_op(node)
        if missing is not None:  # no schema here: its arguments are known by position only
            found.setdefault(missing, OpArgs([]))
        key = _kernel_key(node, kernel_names or {})
        if key is not None:
            found.setdefault(key, OpArgs(list((node.kwargs.get("kwargs") or {}).keys())))
    return found


def _stood_in_op(node: fx.Node) -> str | None:
    """The custom op a stand-in replaced (this machine lacks it), as ``ns::name``."""
    qual = getattr(node.target, "graphdbg_op", None) if node.op == "call_function" else None
    return op_key(qual) if isinstance(qual, str) else None


def _op_name(node: fx.Node) -> str | None:
    op = custom_op_of(node)
    return qualified_name(op) if op is not None else _stood_in_op(node)


def _kernel_key(node: fx.Node, kernel_names: dict[int, str]) -> str | None:
    """A Triton wrapper node's kernel (captured, or a stand-in that kept its ``kernel_idx``)."""
    idx = node.kwargs.get("kernel_idx") if node.op == "call_function" else None
    if not isinstance(idx, int) or not isinstance(node.kwargs.get("kwargs"), dict):
        return None
    return kernel_names.get(idx) or f"kernel_idx={idx}"


def kernel_names(manifest: Manifest | None) -> dict[int, str]:
    """``kernel_idx`` to the kernel's name, as the dump recorded them."""
    return {k.kernel_idx: k.name for k in (manifest.triton_kernels if manifest is not None else []) if k.name}


def kernel_constants(manifest: Manifest | None) -> dict[int, dict[str, Any]]:
    """``constant_args_idx`` to that call's non-tensor arguments (sizes, eps, constexprs), as recorded."""
    out: dict[int, dict[str, Any]] = {}
    for k in manifest.triton_kernels if manifest is not None else []:
        for idx, constants in (k.constant_args_by_call or {}).items():
            if idx.isdigit():
                out[int(idx)] = constants
    return out


def builtin(name: str, args: OpArgs, given: dict[str, Any] | None = None) -> tuple[Callable[..., Any] | None, list[dict[str, Any]]]:
    """The built-in reference ``name`` fitted to an op's schema (by position where there is
    none), with the choices the user spelled out (``given``), and what it assumed; for an op
    that writes its results into arguments, it writes them there too."""
    fn, assumptions = fit(name, args.names or positional(REFERENCES[name]), given, by_position=not args.names)
    if fn is None or not args.written:
        return fn, assumptions

    def into(*call_args: Any, **kwargs: Any) -> None:
        named = dict(zip(args.names, call_args), **kwargs)
        result = fn(*call_args, **kwargs)
        for arg, value in zip(args.written, result if isinstance(result, tuple) else (result,)):
            named[arg].copy_(value)

    into.__name__ = into.__qualname__ = f"reference_{name}_into"
    positions = {a: i for i, a in enumerate(args.names)}
    into.graphdbg_writes = lambda node: [node.args[positions[a]] if positions[a] < len(node.args)  # type: ignore[attr-defined]
                                         else node.kwargs.get(a) for a in args.written]
    return into, assumptions


def resolve_reference(spec: str, op: str, args: OpArgs) -> tuple[Callable[..., Any], list[dict[str, Any]]]:
    """A reference for ``op``: a built-in by name (``attention(causal=True)``: with its choices
    spelled out), and what it assumed; else the user's ``module:function``."""
    spec = spec.strip()
    try:
        built_in = parse_reference(spec)
    except GraphdbgError as e:
        raise GraphdbgError(f"--swap {op}={spec}: {e}") from None
    if built_in is not None:
        fn, assumptions = builtin(built_in[0], args, built_in[1])
        if fn is None:
            raise GraphdbgError(f"--swap {op}={spec}: the reference needs arguments {op}'s schema "
                                f"({', '.join(args.names)}) doesn't name; give a module:function of your own")
        return fn, assumptions
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise GraphdbgError(f"--swap {op}={spec}: not a built-in reference ({', '.join(REFERENCES)}) nor a module:function")
    register_ops([module])  # the user's own module, named on the command line: imported like --ops
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise GraphdbgError(f"--swap {op}={spec}: {module} has no function {attr}")
    return obj, []


def positional(reference: Callable[..., Any]) -> list[str]:
    """A reference's own positional parameter names: the schema assumed for an op known by position only."""
    return [n for n, p in inspect.signature(reference).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]


def parse_swaps(specs: Iterable[str], gm: fx.GraphModule, names: dict[int, str] | None = None, *,
                only_called: bool = False) -> list[Swap]:
    """``OP=REFERENCE`` strings to Swaps; an OP the graph doesn't call is an error (left out
    with ``only_called``: one list of swaps for many graphs). OP is a custom op, or a Triton
    kernel by its name (``names``) or ``kernel_idx=N``."""
    ops = graph_ops(gm, names)
    swaps = []
    for spec in specs:
        by_index = re.match(r"^\s*(kernel_idx=\d+)\s*=(.*)$", spec, re.S)
        op, sep, ref = (by_index.group(1), "=", by_index.group(2)) if by_index else spec.partition("=")
        if not sep or not op.strip() or not ref.strip():
            raise GraphdbgError(f"--swap {spec!r}: expected OP=REFERENCE (kt::attention=attention, ns::op=mymod:fn)")
        key = op.strip() if op.strip() in ops else op_key(op)
        if key not in ops and only_called:
            continue
        if key not in ops:
            raise GraphdbgError(f"--swap {spec}: the graph calls no {key} (its custom ops: {', '.join(ops) or 'none'})")
        swaps.append(Swap(key, ref.strip(), *resolve_reference(ref, key, ops[key])))
    return swaps


def builtin_swaps(gm: fx.GraphModule, given: list[Swap] | None = None) -> list[Swap]:
    """A Swap for every custom op ``gm`` calls that has a reference: ``given`` ones first, then
    built-ins matched by the op's name and fitted to its schema. (A Triton kernel writes its
    outputs through pointers no name says, so only a reference of the user's fits one.)"""
    out = list(given or [])
    for op, args in graph_ops(gm).items():
        if "::" not in op:
            continue
        if any(s.op == op for s in out):
            continue
        name = reference_for(op)
        fn, assumptions = builtin(name, args) if name else (None, [])
        if fn is not None:
            out.append(Swap(op, name, fn, assumptions))
    return out


def swap_ops(gm: fx.GraphModule, swaps: Iterable[Swap], names: dict[int, str] | None = None,
             constants: dict[int, dict[str, Any]] | None = None) -> tuple[fx.GraphModule, list[StandIn]]:
    """A copy of ``gm`` whose calls of each swapped op (or Triton kernel) call its reference
    instead, in nested graphs too. A kernel's reference also gets the call's recorded
    non-tensor arguments (``constants``, by ``constant_args_idx``)."""
    by_op = {s.op: s for s in swaps}
    out = copy.deepcopy(gm)
    used = []
    for prefix, mod in out.named_modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            kernel = _kernel_key(node, names or {})
            swap = by_op.get(_op_name(node) or kernel or "")
            if swap is None:
                continue
            if kernel is None:
                node.target = swap.fn
            else:
                node.target = _kernel_reference(swap.fn, "tensors_to_clone" in node.kwargs,
                                                (constants or {}).get(node.kwargs.get("constant_args_idx"), {}))
            used.append(StandIn(f"{prefix}.{node.name}" if prefix else node.name, "swap",
                                f"{swap.op} replaced by the reference {swap.reference}"))
        mod.recompile()
    return out, used


def _kernel_reference(fn: Callable[..., Any], functional: bool, constants: dict[str, Any]) -> Callable[..., Any]:
    """A Triton wrapper's call turned into a call of ``fn`` with the kernel's keyword arguments
    and the call's constants: ``fn`` writes the kernel's outputs in place, as the kernel does
    (the functional wrapper's outputs are copies it returns)."""
    if functional:
        def reference(*, kwargs: dict, tensors_to_clone: Any = (), **rest: Any) -> dict:
            args = {k: (v.clone() if k in tensors_to_clone else v) for k, v in kwargs.items()}
            fn(**constants, **args)
            return {k: args[k] for k in tensors_to_clone}
    else:
        def reference(*, kwargs: dict, **rest: Any) -> None:
            fn(**constants, **kwargs)

    reference.graphdbg_writes = lambda node: list((node.kwargs.get("kwargs") or {}).values())  # type: ignore[attr-defined]
    return reference


__all__ = ["OpArgs", "Swap", "builtin", "builtin_swaps", "graph_ops", "kernel_constants", "kernel_names", "op_key", "parse_swaps", "resolve_reference", "swap_ops"]
