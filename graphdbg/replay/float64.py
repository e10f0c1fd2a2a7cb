"""The float64 reference: a graph run with every floating-point op in float64.

Upcasting the inputs is not enough: a graph casts on its own (``x.to(torch.float16)``,
``dtype=torch.bfloat16``, ``.float()``, autocast regions), and the next op then meets a float64
weight and fails (``expected mat1 and mat2 to have the same dtype``). Here an fx Interpreter
rewrites each call as it runs it: floating dtypes it asks for become float64, floating tensor
arguments are upcast at the op that computes with them (views and indexing pass the graph's own
dtype through, so a 5 GiB cache read at one slot is upcast at that slot only), and autocast is
off. Integer and bool ops run as they are. A node whose kernel can't run in float64 runs in the
graph's own dtypes (each argument back in the dtype the graph had for it) and its result is
upcast; the reference names those nodes. Which nodes those are is one rule (``_own_dtype_only``
and the fallback in ``_call``): a user Triton kernel traced by Dynamo
(``triton_kernel_wrapper_functional``/``_mutation``, or its launch from a dump's recorded source)
always, since a Triton kernel is compiled for the pointer dtypes it is given and nothing says
its float64 variant computes what its author wrote; any other op when its float64 call raises
(a custom op with only half and float kernels, one that refuses float64).

    >>> ref = float64_reference(gm, inputs, outputs=[0])
    >>> ref.values[0].dtype, ref.own_dtype_nodes
    (torch.float64, [])

``outputs`` keeps only the outputs asked for (and what they need): the float64 run is made only
for outputs that disagree with eager. ``device`` moves the run (the CPU when the GPU lacks room).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.graph.kernels import TRITON_WRAPPERS
from graphdbg.judge import dtypes
from graphdbg.judge.op_names import call_name
from graphdbg.replay.mutation import VIEW_OPS, alias_roots, mutated_inputs, writes

_FLOAT_METHODS = {"half": "double", "float": "double", "bfloat16": "double", "double": "double"}
_AUTOCAST = {"_enter_autocast", "_exit_autocast", "autocast", "_set_autocast_enabled"}
# Ops that reinterpret bits or name a dtype for another reason than computing in it.
_KEEP_DTYPE = {"view", "view_as", "finfo", "iinfo"}


class ReferenceUnavailable(Exception):
    """No float64 reference could be computed; the message says why."""


@dataclass
class Float64Result:
    values: dict[int, Any]  # output leaf index -> value
    own_dtype_nodes: list[str] = field(default_factory=list)
    device: str = ""


class Float64Interpreter(fx.Interpreter):
    """An fx Interpreter that computes floating-point ops in float64 (see the module docstring).

        >>> Float64Interpreter(gm).run(*inputs)
    """

    def __init__(self, gm: fx.GraphModule, device: torch.device | None = None, upcast_inputs: set[int] | None = None):
        super().__init__(gm, garbage_collect_values=True)
        self.device = device
        self.upcast_inputs = upcast_inputs or set()
        self.own_dtype_nodes: list[str] = []
        self._placeholder_index = 0

    # node kinds -------------------------------------------------------------------
    def placeholder(self, target: Any, args: Any, kwargs: Any) -> Any:
        # inputs stay where they are: the ops that compute with them move (and upcast) what
        # they read, so a cache read at one slot crosses to ``device`` one slot at a time
        value = super().placeholder(target, args, kwargs)
        i, self._placeholder_index = self._placeholder_index, self._placeholder_index + 1
        # an input the graph writes must be float64 (and on the device) when the write happens
        return _up(self._move(value)) if i in self.upcast_inputs else value

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self._call(self.current_node, lambda a, k: target(*a, **k), args, kwargs)

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        name = _FLOAT_METHODS.get(str(target), str(target))
        return self._call(self.current_node, lambda a, k: getattr(a[0], name)(*a[1:], **k), args, kwargs)

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        sub = self.fetch_attr(target)
        if isinstance(sub, fx.GraphModule):
            inner = Float64Interpreter(sub, self.device, mutated_inputs(sub))
            out = inner.run(*args, **kwargs)
            self.own_dtype_nodes += [f"{target}.{n}" for n in inner.own_dtype_nodes]
            return out
        return sub(*pytree.tree_map(_up, args), **pytree.tree_map(_up, kwargs))

    def run_node(self, n: fx.Node) -> Any:
        self.current_node = n
        return super().run_node(n)


    # the rewriting ----------------------------------------------------------------
    def _call(self, node: fx.Node, call: Any, args: tuple, kwargs: dict) -> Any:
        name = call_name(node)
        if name in _AUTOCAST:
            return None  # autocast would bring back the low precision the reference avoids
        if name in VIEW_OPS and name != "to" or name in _KEEP_DTYPE:
            return call(args, kwargs)
        written = set(writes(node))
        if self.device is not None:  # tensors the graph makes on its own device follow the run
            args, kwargs = pytree.tree_map(self._on_device, (args, kwargs))
        if _own_dtype_only(node):
            result = self._in_own_dtypes(node, call, args, kwargs, written)
            self.own_dtype_nodes.append(node.name)
            return result if written else pytree.tree_map(_up, result)
        if _opaque(node):  # a stand-in or the user's own function: called on what it gets
            up_args, up_kwargs = args, kwargs
        else:
            up_args, up_kwargs = self._upcast(node, args, kwargs, written)
        try:
            result = call(up_args, up_kwargs)
        except Exception as first:
            try:
                result = self._in_own_dtypes(node, call, args, kwargs, written)
            except Exception:
                reason = str(first).splitlines()[0] if str(first) else ""
                raise ReferenceUnavailable(f"node {node.name} ({name}) fails in float64 and in its own dtypes: "
                                           f"{type(first).__name__}: {reason}") from None
            self.own_dtype_nodes.append(node.name)
        if written:
            return result  # an in-place op returns its (aliased) argument: left as it is
        return pytree.tree_map(_up, result)

    def _upcast(self, node: fx.Node, args: tuple, kwargs: dict, written: set) -> tuple[tuple, dict]:
        # the written argument keeps its dtype (its storage is what the graph reads later)
        arg_nodes = list(node.args) + [None] * max(0, len(args) - len(node.args))

        def convert(value: Any, source: Any) -> Any:
            if isinstance(source, fx.Node) and source in written:
                return value
            return pytree.tree_map(_up_value, value)

        new_args = tuple(convert(a, s) for a, s in zip(args, arg_nodes))
        new_kwargs = {k: convert(v, node.kwargs.get(k)) for k, v in kwargs.items()}
        return new_args, new_kwargs

    def _in_own_dtypes(self, node: fx.Node, call: Any, args: tuple, kwargs: dict, written: set) -> Any:
        """``call`` with each float64 argument back in the dtype the graph had for it; what the
        call writes in place is copied back into the float64 values the rest of the run reads."""
        own = _own_dtype_of(node)
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []

        def one(v: Any, source: Any) -> Any:
            if not (isinstance(v, torch.Tensor) and v.dtype in (torch.float64, torch.complex128)):
                return v
            dtype = _graph_dtype(source, v) or own or (torch.float32 if v.dtype == torch.float64 else torch.complex64)
            if dtype == v.dtype:
                return v
            lower = v.to(dtype)
            if isinstance(source, fx.Node) and source in written:
                copies.append((v, lower))
            return lower

        def down(value: Any, source: Any) -> Any:
            leaves, spec = pytree.tree_flatten(value)
            sources = pytree.tree_leaves(source) if source is not None else []
            if len(sources) != len(leaves):  # not one node per value: each matched by dtype and shape
                sources = [source] * len(leaves)
            return pytree.tree_unflatten([one(v, s) for v, s in zip(leaves, sources)], spec)

        arg_nodes = list(node.args) + [None] * max(0, len(args) - len(node.args))
        low_args = tuple(down(a, s) for a, s in zip(args, arg_nodes))
        low_kwargs = {k: down(v, node.kwargs.get(k)) for k, v in kwargs.items()}
        result = call(low_args, low_kwargs)
        for wide, lower in copies:  # an in-place kernel wrote the lower copy: the run reads the wide one
            wide.copy_(lower)
        return result

    def _on_device(self, value: Any) -> Any:
        if isinstance(value, torch.device) and value.type in ("cuda", "cpu"):
            return self.device
        if isinstance(value, torch.Tensor) and value.device != self.device:
            return value.to(self.device)
        return value

    def _move(self, value: Any) -> Any:
        if self.device is None:
            return value
        return pytree.tree_map(lambda v: v.to(self.device) if isinstance(v, torch.Tensor) else v, value)



class Float64Recorder(Float64Interpreter):
    """The float64 run keeping every node's value by name (``values``, as ``replay.values``'
    ValueRecorder does for the graph's own dtypes): the reference ``bisect nodes`` and a
    replay's first diverging node judge each node against.

        >>> rec = Float64Recorder(gm); rec.run(*inputs); rec.values["rsqrt"].dtype
        torch.float64
    """

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm, upcast_inputs=mutated_inputs(gm))
        self.garbage_collect_values = False
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "output":
            self.values[n.name] = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), result)
        return result


def _up(value: Any) -> Any:
    """A value as the float64 run carries it: floats (float8 included) in float64, complex in
    complex128; dtypes with no numeric value (packed float4, bits) as they are."""
    if not isinstance(value, torch.Tensor) or value.dtype in (torch.float64, torch.complex128):
        return value
    kind = dtypes.kind(value.dtype)
    if kind == dtypes.FLOAT:
        return value.detach().to(torch.float64)
    if kind == dtypes.COMPLEX:
        return value.detach().to(torch.complex128)
    return value


def _up_value(value: Any) -> Any:
    """An argument as a float64 op takes it: tensors upcast, floating dtypes made float64."""
    if isinstance(value, torch.dtype):
        if dtypes.kind(value) == dtypes.FLOAT:
            return torch.float64
        if dtypes.kind(value) == dtypes.COMPLEX:
            return torch.complex128
        return value
    return _up(value)


def float64_reference(gm: fx.GraphModule, inputs: list[Any], *, outputs: list[int] | None = None,
                      device: torch.device | None = None, grad: bool = False) -> Float64Result:
    """The float64 values of ``gm``'s output leaves ``outputs`` (all by default) on ``inputs``.

    ``inputs`` are not written: those the graph writes are copied (upcast) first. Raises
    ReferenceUnavailable with the reason when a node fails both in float64 and its own dtypes.
    """
    work = _keep_outputs(gm, outputs)
    mutated = mutated_inputs(work)
    values = [v.detach().clone() if i in mutated and isinstance(v, torch.Tensor) and not _floating(v) else v
              for i, v in enumerate(inputs)]
    interp = Float64Interpreter(work, device, upcast_inputs=mutated)
    with torch.no_grad():
        try:
            out = interp.run(*values)
        except ReferenceUnavailable:
            raise
        except torch.OutOfMemoryError:
            raise
        except Exception as e:
            raise ReferenceUnavailable(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    leaves = pytree.tree_leaves(out)
    wanted = outputs if outputs is not None else list(range(len(leaves)))
    return Float64Result({i: _up(v) for i, v in zip(wanted, leaves)}, interp.own_dtype_nodes,
                         str(device) if device is not None else "")


def _floating(v: torch.Tensor) -> bool:
    return dtypes.numeric(v.dtype)


def _keep_outputs(gm: fx.GraphModule, outputs: list[int] | None) -> fx.GraphModule:
    """A copy of ``gm`` returning only output leaves ``outputs``, without the nodes they don't
    need. A write stays when a kept node reads what it wrote afterwards (through any view); a
    call we can't see into (a stand-in, a nested graph) stays with what it reads."""
    if outputs is None:
        return gm
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    roots = alias_roots(gm)
    old_out = nodes[-1] if nodes[-1].op == "output" else next(n for n in reversed(nodes) if n.op == "output")
    leaves = pytree.tree_leaves(old_out.args[0])
    needed: set[fx.Node] = set()

    def need(start: list[fx.Node]) -> None:
        stack = list(start)
        while stack:
            n = stack.pop()
            if n not in needed:
                needed.add(n)
                stack += n.all_input_nodes

    kept = [leaves[i] for i in outputs if isinstance(leaves[i], fx.Node)]
    need(kept)
    writers = [(n, {roots.get(w, w) for w in writes(n)}) for n in nodes if writes(n)]
    opaque = [n for n in nodes if n.op == "call_module" or _opaque(n)]
    changed = True
    while changed:
        changed = False
        read_after: dict[fx.Node, int] = {}  # storage root -> last position a needed node reads it
        for n in needed:
            for a in n.all_input_nodes + [n]:
                r = roots.get(a, a)
                read_after[r] = max(read_after.get(r, -1), order[n])
        for leaf in kept:  # the output reads its values last: a buffer a kernel writes into after it is made
            read_after[roots.get(leaf, leaf)] = order[old_out]
        for n, written in writers + [(n, {roots.get(a, a) for a in n.all_input_nodes}) for n in opaque]:
            if n not in needed and any(read_after.get(r, -1) > order[n] for r in written):
                need([n])
                changed = True
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        if node.op == "placeholder" or (node in needed and node.op != "output"):
            env[node] = graph.node_copy(node, lambda x: env[x])
    graph.output(tuple(env[leaves[i]] if isinstance(leaves[i], fx.Node) else leaves[i] for i in outputs))
    return fx.GraphModule(gm, graph)


def _opaque(node: fx.Node) -> bool:
    # a call we can't see into (a stand-in, a custom op) may have effects: kept
    return node.op == "call_function" and not getattr(node.target, "__module__", "").startswith(("torch", "_operator"))


def _own_dtype_only(node: fx.Node) -> bool:
    """A node whose kernel can't run in float64, known before trying: a user Triton kernel
    (Dynamo's wrapper, or graphdbg's launch of it from a dump's source, or its stand-in)."""
    if node.op != "call_function":
        return False
    return (call_name(node).startswith(TRITON_WRAPPERS) or getattr(node.target, "graphdbg_kind", None) == "triton_kernel"
            or isinstance(node.kwargs.get("kernel_idx"), int) and isinstance(node.kwargs.get("kwargs"), dict))


def _own_dtype_of(node: fx.Node) -> torch.dtype | None:
    """The floating dtype the graph annotated for ``node``'s value, if any."""
    spec = node.meta.get("graphdbg_spec")
    dtype = getattr(spec, "torch_dtype", None) if spec is not None else None
    if not isinstance(dtype, torch.dtype):
        val = node.meta.get("val", node.meta.get("example_value"))
        dtype = getattr(val, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) and (dtype.is_floating_point or dtype.is_complex) else None


def _graph_dtype(source: Any, value: torch.Tensor) -> torch.dtype | None:
    """The dtype the graph had for ``value`` (an argument; ``source`` what the graph passed:
    a node, or a container of nodes whose tensor of the same shape is found)."""
    nodes = [n for n in pytree.tree_leaves(source) if isinstance(n, fx.Node)] if source is not None else []
    found = [d for d in (_own_dtype_of(n) for n in nodes) if d is not None and d.is_complex == value.is_complex()]
    if len(set(found)) == 1:
        return found[0]
    for n in nodes:  # several: the one whose recorded shape is the value's
        val = n.meta.get("val", n.meta.get("example_value"))
        spec = n.meta.get("graphdbg_spec")
        shape = getattr(val, "shape", None)
        if shape is not None and tuple(shape) == tuple(value.shape):
            return _own_dtype_of(n)
        if spec is not None and getattr(spec, "shape", None) == list(value.shape):
            return _own_dtype_of(n)
    return None
