"""Stand-ins for what a printed graph calls but this machine can't run as it was.

A graph printed on an 8-GPU SGLang server calls custom ops this machine lacks
(``torch.ops.sglang.inplace_all_reduce``), Triton kernels Dynamo kept only by index
(``triton_kernel_wrapper_mutation(kernel_idx=31, ...)``), collectives over a process group
that does not exist here, and CUDA streams and device switches of a GPU this machine may not
have. Each of those nodes gets a named stand-in: a plain Python function (so eager runs it and
Dynamo can trace it again) that does what the construct does on a one-device world, shaped by
the node's own annotation. Every stand-in is reported; none is silent.

    >>> hook = resolver()                                  # for parse_printed_graph(resolve=...)
    >>> pg = parse_printed_graph(text, filename="rank0_0.py", resolve=hook)
    >>> gm = pg.to_module()
    >>> used = install_stand_ins(gm, torch.device("cpu"))
    >>> [s.describe() for s in used][:1]
    ['inductor_1.inplace_all_reduce: custom_op (torch.ops.sglang.inplace_all_reduce is not on this machine: in-place, does nothing)']

In a world (torch.distributed initialised, several ranks: ``replay --all-ranks``) collectives
are real instead, on the group the graph names (``collectives.real_collective``).

Real implementations replace stand-ins: ``register_ops(["mypkg.sglang_ops"])`` imports modules
that define the ops with ``torch.library``; a registered op resolves like any torch op.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.graph.allow_list import OPS_ENV, allowed_namespaces, register_ops
from graphdbg.judge.op_names import call_name, op_name, op_parts
from graphdbg.rebuild.collectives import in_world, real_collective
from graphdbg.rebuild.inputs import NullStream, StandIn
from graphdbg.rebuild.ops_hint import ops_module_for
from graphdbg.rebuild.output_uses import ItemUses, outputs_as_used
from graphdbg.store.specs import TensorSpec

__all__ = ["MissingOp", "register_ops", "allowed_namespaces", "resolver", "install_stand_ins", "constructs",
           "OPS_ENV", "construct_of"]

# Names under torch that a CPU-only torch lacks but a printed CUDA graph calls. They parse as
# MissingOp markers and become stand-ins (on a CUDA replay they resolve to the real thing).
CUDA_ONLY_NAMES = frozenset({"torch._C._cuda_exchangeDevice", "torch._C._cuda_maybeExchangeDevice"})

COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd"})
_COLLECTIVE = re.compile(r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all|broadcast|wait_tensor")


class MissingOp:
    """Marks a call the parser found but this machine can't resolve; replaced before any run.

        >>> MissingOp("torch.ops.sglang.inplace_all_reduce").__name__
        'sglang_inplace_all_reduce'
    """

    def __init__(self, qualname: str):
        self.qualname = qualname
        # fx codegen names the global after __name__ and reads __module__; target_name shows both.
        self.__name__ = re.sub(r"\W+", "_", qualname.removeprefix("torch.ops.").removeprefix("torch."))
        self.__qualname__ = self.__name__
        self.__module__ = "graphdbg.missing"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise GraphdbgError(f"{self.qualname} is not on this machine and has no stand-in installed")

    def __repr__(self) -> str:
        return f"MissingOp({self.qualname!r})"


def resolver() -> Callable[[str], Any]:
    """The ``resolve`` hook for ``parse_printed_graph``: names the allow-list doesn't know.

    - a function under a registered namespace (dotted, or fx's mangled global): the function;
    - an op under ``torch.ops.<any namespace>`` that this machine lacks: a MissingOp marker;
    - CUDA runtime calls a CPU-only torch lacks (``torch._C._cuda_exchangeDevice``): a marker;
    - anything else: None, so the parser refuses it with the file and line.
    """
    namespaces = allowed_namespaces()

    def resolve(qualname: str) -> Any:
        for ns in namespaces:
            found = _from_namespace(ns, qualname)
            if found is not None:
                return found
        if qualname.startswith("torch.ops.") and qualname.count(".") >= 3:
            parts = qualname.split(".")
            # torch.ops.ns.op or torch.ops.ns.op.overload: the op is what the stand-in stands for
            return MissingOp(".".join(parts[:4]))
        if qualname in CUDA_ONLY_NAMES:
            return MissingOp(qualname)
        return None

    return resolve


def _from_namespace(ns: str, qualname: str) -> Any:
    mangled = re.sub(r"\W+", "_", ns) + "_"
    if qualname.startswith(ns + "."):
        attr_path = qualname[len(ns) + 1:].split(".")
    elif qualname.startswith(mangled):
        attr_path = [qualname[len(mangled):]]
    else:
        return None
    if any(p.startswith("_") for p in attr_path):
        return None  # private or dunder: a registered namespace is not a way around the deny rules
    obj: Any = importlib.import_module(ns)
    for part in attr_path:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


# What a target is, by name -------------------------------------------------------------

def _known_callables() -> dict[int, str]:
    known = {}
    for qual in ("torch.cuda.streams.Stream", "torch.cuda.Stream", "torch.cuda.current_stream", "torch.cuda.set_stream",
                 "torch.cuda.get_device_capability", "torch._C._cuda_exchangeDevice", "torch._C._cuda_maybeExchangeDevice"):
        obj: Any = torch
        for part in qual.split(".")[1:]:
            obj = getattr(obj, part, None)
        if obj is not None:
            known[id(obj)] = qual.replace("torch.cuda.Stream", "torch.cuda.streams.Stream")
    return known


_KNOWN: dict[int, str] | None = None


def construct_of(target: Any) -> str | None:
    """The dotted name of a target that may need a stand-in, or None for ordinary torch code.

        >>> construct_of(torch.cuda.set_stream), construct_of(torch.relu)
        ('torch.cuda.set_stream', None)
    """
    global _KNOWN
    if isinstance(target, MissingOp):
        return target.qualname
    if isinstance(target, torch._ops.HigherOrderOperator):
        name = target.name()
        return f"torch.ops.higher_order.{name}" if name.startswith("triton_kernel_wrapper") else None
    parts = op_parts(target)  # an OpOverload or an OpOverloadPacket
    if parts is not None:
        return op_name(target, python=True) if parts[0] in COLLECTIVE_NAMESPACES else None
    if _KNOWN is None:
        _KNOWN = _known_callables()
    try:
        return _KNOWN.get(id(target))
    except TypeError:
        return None


def constructs(gm_or_graphs: Any) -> list[str]:
    """The distinct constructs in a graph (and its nested graphs) that replay stands in for.

    Streams and device switches are listed whatever the replay device (they are remapped on
    a GPU, replaced on the CPU); custom ops only when this machine lacks them.
    """
    found: dict[str, None] = {}
    for graph in _graphs(gm_or_graphs):
        for node in graph.nodes:
            if node.op == "call_function" and (name := construct_of(node.target)) is not None:
                found.setdefault(name)
            elif node.op in ("call_function", "call_method") and any(isinstance(a, torch.device) and a.type == "cuda" for a in _flat(node.args, node.kwargs)):
                found.setdefault("device(type='cuda')")
    return list(found)


def _graphs(obj: Any) -> list[fx.Graph]:
    if isinstance(obj, fx.GraphModule):
        return [m.graph for m in obj.modules() if isinstance(m, fx.GraphModule)]
    if hasattr(obj, "submodules") and hasattr(obj, "graph"):  # a PrintedGraph
        out = [obj.graph]
        for sub in obj.submodules.values():
            out += _graphs(sub)
        return out
    return [obj]


def _flat(*values: Any) -> list[Any]:
    out: list[Any] = []
    fx.node.map_aggregate(values, lambda v: out.append(v) or v)
    return out


# Installing stand-ins -------------------------------------------------------------------

@dataclass
class _Context:
    device: torch.device
    streams: dict[tuple, Any]
    used: list[StandIn]
    root: fx.GraphModule | None = None
    _uses: ItemUses | None = None

    def uses(self, node: fx.Node) -> dict[int, TensorSpec | None] | None:
        """How the graph indexes ``node``'s result, across the pieces of a split graph."""
        if self.root is None:
            return None
        if self._uses is None:
            self._uses = ItemUses(self.root)
        return self._uses.of(node)

    def stream_for(self, key: tuple, what: str, path: str) -> Any:
        if key not in self.streams:
            if self.device.type == "cuda":
                self.streams[key] = torch.cuda.Stream(device=self.device)
                detail = f"{what}: a new stream on {self.device}"
            else:
                self.streams[key] = NullStream({"device": f"cuda:{key[1]}" if key[1] is not None else "cuda"})
                detail = f"{what}: no CUDA here, a no-op NullStream"
            self.used.append(StandIn(path, "stream", detail))
        return self.streams[key]


def install_stand_ins(gm: fx.GraphModule, device: torch.device, *, zero_uninitialized: bool = True) -> list[StandIn]:
    """Replace, in ``gm`` and its nested GraphModules, every call this machine can't make as it
    was with a stand-in for a replay on ``device``; returns what was replaced, one per node.

    GPU-bound calls are remapped rather than replaced on a CUDA replay: a device index the
    graph baked in (``_cuda_exchangeDevice(3)``) becomes the replay device's. With
    ``zero_uninitialized``, ``torch.empty``-style allocations are zeroed (one stand-in entry
    names them): a printed graph often returns buffers a kernel elsewhere would fill.
    """
    ctx = _Context(device, {}, [], gm)
    zeroed: list[str] = []
    reached = _reached(gm)
    for prefix, mod in _graph_modules(gm):
        changed = False
        listed = len(ctx.used)
        for node in list(mod.graph.nodes):
            if zero_uninitialized and _zero_allocation(node):
                if prefix in reached:
                    zeroed.append(f"{prefix}{node.name}")
                changed = True
                continue
            qual = construct_of(node.target) if node.op == "call_function" else None
            if qual is None:
                continue
            path = f"{prefix}{node.name}"
            changed |= _replace(node, qual, path, ctx)
        if prefix not in reached:
            # a nested class nothing calls (Inductor's `_orig_mod` copy of a piece) is stood in for
            # too, so it is safe, but listing it would name every stand-in of that piece twice
            del ctx.used[listed:]
        if changed:
            mod.recompile()
    if zeroed:
        ctx.used.append(StandIn("graph", "zeroed_allocation", f"torch.empty-style allocations made zeros in {len(zeroed)} nodes "
                                f"({', '.join(zeroed[:6])}{' ...' if len(zeroed) > 6 else ''}): uninitialised memory would "
                                "make two runs of the same graph differ"))
    return ctx.used


_EMPTY_FUNCTIONS = {"empty", "empty_like", "empty_strided"}
_EMPTY_METHODS = {"new_empty", "new_empty_strided"}


def _zero_allocation(node: fx.Node) -> bool:
    """Turn ``torch.empty(...)`` / ``x.new_empty(...)`` into the same allocation, zeroed."""
    if node.op == "call_function" and getattr(node.target, "__module__", None) in ("torch", "torch._C._VariableFunctions", None) \
            and getattr(node.target, "__name__", "") in _EMPTY_FUNCTIONS and getattr(torch, node.target.__name__) is node.target:
        node.target = _zeroed_function(node.target)
        return True
    if node.op == "call_method" and node.target in _EMPTY_METHODS:
        node.op, node.target = "call_function", _zeroed_method(str(node.target))
        return True
    return False


@functools.lru_cache(maxsize=None)
def _zeroed_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    def zeroed(*args: Any, **kwargs: Any) -> torch.Tensor:
        return fn(*args, **kwargs).zero_()

    zeroed.__name__ = zeroed.__qualname__ = f"stand_in_{fn.__name__}_zeroed"
    zeroed.__module__ = __name__
    zeroed.graphdbg_kind, zeroed.graphdbg_writes = "zeroed_allocation", _writes_nothing  # type: ignore[attr-defined]
    return zeroed


@functools.lru_cache(maxsize=None)
def _zeroed_method(name: str) -> Callable[..., Any]:
    def zeroed(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return getattr(self, name)(*args, **kwargs).zero_()

    zeroed.__name__ = zeroed.__qualname__ = f"stand_in_{name}_zeroed"
    zeroed.__module__ = __name__
    zeroed.graphdbg_kind, zeroed.graphdbg_writes = "zeroed_allocation", _writes_nothing  # type: ignore[attr-defined]
    return zeroed


def _reached(gm: fx.GraphModule) -> set[str]:
    """The prefixes (``""``, ``"inductor_1."``) of the nested GraphModules a run of ``gm`` calls."""
    reached, todo = {""}, [("", gm)]
    while todo:
        prefix, mod = todo.pop()
        for node in mod.graph.nodes:
            if node.op != "call_module":
                continue
            child = mod.get_submodule(str(node.target)) if hasattr(mod, "get_submodule") else None
            key = f"{prefix}{node.target}."
            if isinstance(child, fx.GraphModule) and key not in reached:
                reached.add(key)
                todo.append((key, child))
    return reached


def _graph_modules(gm: fx.GraphModule) -> list[tuple[str, fx.GraphModule]]:
    return [(f"{name}." if name else "", m) for name, m in gm.named_modules() if isinstance(m, fx.GraphModule)]


def _replace(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    """Put a stand-in in place of ``node`` (a call of ``qual``); False where it stays as it is."""
    handler = _HANDLERS.get(qual)
    if handler is not None:
        return handler(node, qual, path, ctx)
    short = qual.rsplit(".", 1)[-1]
    ns = qual.split(".")[2] if qual.startswith("torch.ops.") else ""
    missing = isinstance(node.target, MissingOp)
    # A missing op whose result the graph indexes returns a tuple, whatever its name suggests
    # (SGLang's flashinfer_allreduce_residual_rmsnorm returns (out, residual)).
    if missing and ctx.uses(node) is not None:
        return _replace_custom_op(node, qual, path, ctx)
    if ns in COLLECTIVE_NAMESPACES or (missing and _COLLECTIVE.search(short)):
        return _replace_collective(node, qual, path, ctx)
    if missing:
        return _replace_custom_op(node, qual, path, ctx)
    return False


def _replace_stream(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    key = (node.kwargs.get("stream_id"), node.kwargs.get("device_index"), node.kwargs.get("device_type"))
    stream = ctx.stream_for(key, f"{_call_text(node, qual)}", path)
    node.target, node.args, node.kwargs = _named(f"stream_{key[0]}", lambda *a, **k: stream), (), {}
    return True


def _replace_current_stream(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    if ctx.device.type == "cuda":
        return False
    node.target = _named("current_stream", lambda *a, **k: _NULL_STREAM)
    ctx.used.append(StandIn(path, "stream", "torch.cuda.current_stream(): no CUDA here, a no-op NullStream"))
    return True


def _replace_set_stream(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    if ctx.device.type == "cuda":
        return False
    node.target = _named("set_stream", _does_nothing)
    ctx.used.append(StandIn(path, "stream", "torch.cuda.set_stream: no CUDA here, does nothing"))
    return True


def _replace_device_query(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    """``_cuda_exchangeDevice(i)`` / ``get_device_capability(i)``: remapped to the replay device on
    a GPU, answered as a CUDA machine would on the CPU."""
    index = ctx.device.index or 0
    if ctx.device.type == "cuda" and not isinstance(node.target, MissingOp):
        if node.args and isinstance(node.args[0], int) and node.args[0] != index:
            ctx.used.append(StandIn(path, "device", f"{_call_text(node, qual)} remapped to device index {index}"))
            node.args = (index, *node.args[1:])
            return True
        return False
    if qual.endswith("_cuda_exchangeDevice"):
        node.target = _named("cuda_exchange_device", lambda *a, **k: -1)
        ctx.used.append(StandIn(path, "device", f"{_call_text(node, qual)}: no CUDA here, returns -1 (no switch)"))
    else:
        node.target = _named("get_device_capability", lambda *a, **k: (9, 0))
        ctx.used.append(StandIn(path, "device", f"{_call_text(node, qual)}: no CUDA here, returns (9, 0) (Hopper)"))
    return True


def _replace_maybe_exchange(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    if ctx.device.type == "cuda" and not isinstance(node.target, MissingOp):
        return False
    node.target = _named("cuda_maybe_exchange_device", lambda *a, **k: -1)
    ctx.used.append(StandIn(path, "device", f"{qual}: no CUDA here, does nothing"))
    return True


def _replace_triton_mutation(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    fresh = _fresh_buffers(node)
    node.target = _named("triton_kernel_wrapper_mutation", _triton_mutation_stand_in(fresh), "triton_kernel",
                         lambda n: [(n.kwargs.get("kwargs") or {}).get(k) for k in fresh])
    ctx.used.append(StandIn(path, "triton_kernel", f"kernel_idx={node.kwargs.get('kernel_idx')} was kept only in Dynamo's "
                            "side table: does nothing" + (f", zero-fills its fresh buffers {', '.join(fresh)}" if fresh else "")))
    return True


def _replace_triton_functional(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    node.target = _named("triton_kernel_wrapper_functional", _triton_functional_stand_in, "triton_kernel")
    ctx.used.append(StandIn(path, "triton_kernel", f"kernel_idx={node.kwargs.get('kernel_idx')} is lost: returns copies of its outputs unchanged"))
    return True


def _replace_collective(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    short = qual.rsplit(".", 1)[-1]
    ns = qual.split(".")[2] if qual.startswith("torch.ops.") else ""

    if in_world():  # every rank is here: the real collective, on the group the graph names
        changed, detail = real_collective(node, qual, short)
        if detail:
            ctx.used.append(StandIn(path, "collective", detail))
        if changed or ns in COLLECTIVE_NAMESPACES:
            return changed
    fn, how = _collective(node, short, ctx.device)
    writes = _collective_writes if fn.__name__ == "into" else None
    node.target = _named(short, fn, "collective", writes)
    where = "" if ns in COLLECTIVE_NAMESPACES else " is not on this machine"
    ctx.used.append(StandIn(path, "collective", f"{qual}{where}: as on a world of one, {how}"))
    return True


def _replace_custom_op(node: fx.Node, qual: str, path: str, ctx: _Context) -> bool:
    fn, how = outputs_as_used(node, ctx.uses(node), ctx.device)
    node.target = _named(qual.rsplit(".", 1)[-1], fn, "custom_op")
    node.target.graphdbg_op = qual  # type: ignore[attr-defined]  # what it stands for: rebuild/op_swaps.py swaps it for a reference

    module = ops_module_for(qual)  # its package is here, the module defining it was not imported
    hint = f"; --ops {module} would provide it" if module else ""
    ctx.used.append(StandIn(path, "custom_op", f"{qual} is not on this machine: {how}{hint}"))
    return True


_HANDLERS: dict[str, Callable[[fx.Node, str, str, _Context], bool]] = {
    "torch.cuda.streams.Stream": _replace_stream,
    "torch.cuda.current_stream": _replace_current_stream,
    "torch.cuda.set_stream": _replace_set_stream,
    "torch._C._cuda_exchangeDevice": _replace_device_query,
    "torch.cuda.get_device_capability": _replace_device_query,
    "torch._C._cuda_maybeExchangeDevice": _replace_maybe_exchange,
    "torch.ops.higher_order.triton_kernel_wrapper_mutation": _replace_triton_mutation,
    "torch.ops.higher_order.triton_kernel_wrapper_functional": _replace_triton_functional,
}


_NULL_STREAM = NullStream({"device": "cuda"})


def _does_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _named(name: str, fn: Callable[..., Any], kind: str | None = None,
           writes: Callable[[fx.Node], list[Any]] | None = None) -> Callable[..., Any]:
    """A fresh function object named ``stand_in_<name>``, so signatures and tables say what it is.

    ``kind`` marks a stand-in whose values differ from the real call's (``triton_kernel``,
    ``collective``, ``custom_op``): replay follows its data flow to the outputs. ``writes(node)``
    gives the arguments the stand-in itself writes (default: none), so replay knows which
    inputs need a fresh copy per run.
    """
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = "stand_in_" + re.sub(r"\W+", "_", name)
    stand_in.__module__ = __name__
    stand_in.graphdbg_kind = kind  # type: ignore[attr-defined]
    stand_in.graphdbg_writes = writes or _writes_nothing  # type: ignore[attr-defined]
    return stand_in


def _writes_nothing(node: fx.Node) -> list[Any]:
    return []


def stand_in_kind(target: Any) -> str | None:
    """The value-changing kind of a stand-in target (``triton_kernel``, ``collective``,
    ``custom_op``, ``zeroed_allocation``), or None for a real call or a stream/device stand-in."""
    return getattr(target, "graphdbg_kind", None)


def stand_in_writes(node: fx.Node) -> list[Any] | None:
    """What a stand-in node writes (graph values), or None when ``node`` is no stand-in."""
    writes = getattr(node.target, "graphdbg_writes", None)
    return writes(node) if writes is not None else None


def _call_text(node: fx.Node, qual: str) -> str:
    parts = [repr(a) for a in node.args if not isinstance(a, fx.Node)]
    parts += [f"{k}={v!r}" for k, v in node.kwargs.items() if not isinstance(v, fx.Node)]
    return f"{qual}({', '.join(parts)})"


_ALLOCATORS = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}
_VIEWS = {"view", "reshape", "unsqueeze", "squeeze", "flatten", "contiguous", "transpose", "permute", "getitem"}


def _fresh_buffers(node: fx.Node) -> tuple[str, ...]:
    """Kernel arguments allocated uninitialised just for it (``torch.empty``): its outputs.

    The lost kernel would have written them; zero-filling keeps the replay deterministic, so
    eager and a compiled run of the same stand-in agree.
    """
    fresh = []
    for key, value in (node.kwargs.get("kwargs") or {}).items():
        src = value
        while isinstance(src, fx.Node) and call_name(src, overload=True) in _VIEWS:
            src = src.args[0] if src.args else None
        if isinstance(src, fx.Node) and call_name(src, overload=True) in _ALLOCATORS:
            fresh.append(key)
    return tuple(fresh)


def _triton_mutation_stand_in(fresh: tuple[str, ...]) -> Callable[..., Any]:
    def run(*args: Any, kwargs: dict | None = None, **rest: Any) -> None:
        for key in fresh:
            kwargs[key].zero_()
        return None

    return run


def _triton_functional_stand_in(*args: Any, kwargs: dict | None = None, tensors_to_clone: Any = (), **rest: Any) -> dict:
    return {key: kwargs[key].clone() for key in tensors_to_clone}


_IN_KEYS = ("input", "input_", "inp", "tensor", "x", "self", "input_tensor", "input_tensors", "inputs", "tensors")
_OUT_KEYS = ("output", "out", "output_tensor", "output_tensors", "output_tensor_list", "outputs")


def _collective(node: fx.Node, name: str, device: torch.device) -> tuple[Callable[..., Any], str]:
    """A collective over one rank: all_reduce is the identity, all_gather repeats this rank's
    data to the gathered size (every rank holds the same), reduce_scatter keeps this rank's part.

    The stand-in takes whatever form the call has (positional or keyword tensors, a list of
    tensors for the coalesced and list forms, an output buffer first for the ``*_into_tensor``
    and in-place forms): SGLang, vLLM and c10d name the same arguments differently.
    """
    spec = node.meta.get("graphdbg_spec")
    shape = spec.concrete_shape() if isinstance(spec, TensorSpec) and spec.is_static() else None
    returns = isinstance(spec, TensorSpec) or any(u for u in node.users)
    moves = "gather" in name or "scatter" in name or "to_all" in name
    if name == "wait_tensor" or ("all_reduce" in name or "allreduce" in name) and name.endswith("_") and returns:
        def first(*args: Any, **kwargs: Any) -> Any:
            return _collective_operands(args, kwargs)[1]

        return first, "returns its input"
    group_size = next((a for a in list(node.args[1:]) + list(node.kwargs.values())
                       if isinstance(a, int) and not isinstance(a, bool)), None)
    if not returns or name.startswith("inplace_") or name.startswith("reg_") or name.endswith("_"):
        if not moves:
            return _does_nothing, "in place, leaves its input as it is"

        def into(*args: Any, **kwargs: Any) -> None:
            out, src = _collective_operands(args, kwargs)
            if out is None or src is None or out is src:
                return None
            for o in (out if isinstance(out, (list, tuple)) else [out]):
                _fill_from(o, torch.cat([s.reshape(-1) for s in src]) if isinstance(src, (list, tuple)) else src)
            return None

        return into, "writes its input into its output buffer (repeated to its size), in place"

    def functional(*args: Any, **kwargs: Any) -> Any:
        _, x = _collective_operands(args, kwargs, functional=True)
        if isinstance(x, (list, tuple)):  # the coalesced forms: one result per input
            return [_resize_like(t, None, name, group_size) for t in x]
        out = _resize_like(x, shape, name, group_size)
        return out if dtype is None else out.to(dtype)  # the annotation's dtype (a fused quantizing reduce)

    dtype = spec.torch_dtype if shape is not None else None
    return functional, ("returns its input" if shape is None else f"returns its input as {spec.annotation()}")


def _collective_operands(args: tuple, kwargs: dict, functional: bool = False) -> tuple[Any, Any]:
    """(output buffer or None, input) of a collective call, whatever its form.

    Keywords win (``input=``/``tensor=``, ``output=``/``out=``); else tensors and tensor lists
    in order: a functional call's first is its input; an in-place gather's first is its output,
    its second the input.
    """
    out = next((kwargs[k] for k in _OUT_KEYS if _is_tensors(kwargs.get(k))), None)
    src = next((kwargs[k] for k in _IN_KEYS if _is_tensors(kwargs.get(k))), None)
    positional = [a for a in args if _is_tensors(a)] + [v for k, v in kwargs.items()
                                                        if k not in _OUT_KEYS + _IN_KEYS and _is_tensors(v)]
    if functional or (out is None and len(positional) < 2 and src is None):
        return out, src if src is not None else (positional[0] if positional else out)
    if out is None:
        out = positional.pop(0) if positional else None
    if src is None:
        src = positional[0] if positional else out
    return out, src


def _collective_writes(node: fx.Node) -> list[Any]:
    """The output buffer an in-place gather/scatter stand-in fills (its graph node)."""
    nodes = [a for a in node.args if isinstance(a, (fx.Node, list, tuple))]
    out = next((node.kwargs[k] for k in _OUT_KEYS if k in node.kwargs), None)
    if out is None and len(nodes) + sum(1 for k in node.kwargs if k in _IN_KEYS) >= 2 and nodes:
        out = nodes[0]
    return _flat(out) if out is not None else []


def _is_tensors(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or (isinstance(value, (list, tuple)) and bool(value)
                                              and all(isinstance(v, torch.Tensor) for v in value))


def _fill_from(out: torch.Tensor, src: torch.Tensor) -> None:
    flat = src.reshape(-1)
    n = out.numel()
    reps = -(-n // max(flat.numel(), 1))
    out.copy_(flat.repeat(reps)[:n].view(out.shape))


def _resize_like(x: torch.Tensor, shape: list[int] | None, name: str, group_size: int | None) -> torch.Tensor:
    if shape is None:
        if "gather" in name and group_size:
            return torch.cat([x] * group_size)
        if "scatter" in name and group_size:
            return x.chunk(group_size)[0].clone()
        return x.clone()
    n = 1
    for d in shape:
        n *= d
    flat = x.reshape(-1)
    if n >= flat.numel():
        reps = -(-n // max(flat.numel(), 1))
        return flat.repeat(reps)[:n].view(shape).clone()
    return flat[:n].view(shape).clone()
