"""The float64 reference: a graph run with every floating-point op in float64.

Upcasting the inputs is not enough: a graph casts on its own (``x.to(torch.float16)``,
``dtype=torch.bfloat16``, ``.float()``, autocast regions), and the next op then meets a float64
weight and fails (``expected mat1 and mat2 to have the same dtype``). Here an fx Interpreter
rewrites each call as it runs it: floating dtypes it asks for become float64, floating tensor
arguments are upcast at the op that computes with them (views and indexing pass the graph's own
dtype through, so a 5 GiB cache read at one slot is upcast at that slot only), and autocast is
off. Integer and bool ops run as they are. An op with no float64 kernel runs in the graph's own
dtype and its result is upcast; the reference names those nodes.

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

from graphdbg.replay.mutation import VIEW_OPS, alias_roots, call_name, mutated_inputs, writes

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
        if _opaque(node):  # a stand-in or the user's own function: called on what it gets
            up_args, up_kwargs = args, kwargs
        else:
            up_args, up_kwargs = self._upcast(node, args, kwargs, written)
        try:
            result = call(up_args, up_kwargs)
        except Exception as first:
            try:
                result = call(*self._own_dtypes(node, args, kwargs))
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

    def _own_dtypes(self, node: fx.Node, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The arguments in the dtype the graph annotated for this node (float32 if none)."""
        spec = node.meta.get("graphdbg_spec")
        dtype = getattr(spec, "torch_dtype", None) if spec is not None else None
        dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32

        def down(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.dtype == torch.float64:
                return v.to(dtype)
            return v

        return pytree.tree_map(down, args), pytree.tree_map(down, kwargs)

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


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
        return value.detach().to(torch.float64)
    if isinstance(value, torch.Tensor) and value.is_complex() and value.dtype != torch.complex128:
        return value.detach().to(torch.complex128)
    return value


def _up_value(value: Any) -> Any:
    """An argument as a float64 op takes it: tensors upcast, floating dtypes made float64."""
    if isinstance(value, torch.dtype):
        if value.is_floating_point:
            return torch.float64
        if value.is_complex:
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
    return v.is_floating_point() or v.is_complex()


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

    need([leaves[i] for i in outputs if isinstance(leaves[i], fx.Node)])
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
