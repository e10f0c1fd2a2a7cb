"""Autograd's index backwards, checked before they run.

``embedding_dense_backward``, ``max_pool2d_with_indices_backward`` and their kin scatter a
gradient by an ``indices`` tensor into a new tensor whose size comes from another argument,
and torch checks none of those indices (an out-of-range one writes outside the tensor). Every
language model's and CNN's backward graph calls them, so they are not refused: each call's
indices are checked against the bound the op's schema implies, before the graph runs, on the
values the graph is given (``check_graph_module`` with the inputs):

    >>> index_bound(torch.ops.aten.embedding_dense_backward.default._schema)
    IndexBound(kind='count', source='num_weights', dims=0)
    >>> index_refusal(node, values)        # None, or why (an index out of range, or not known)

The rule, from the schema alone (``is_index_backward``, ``index_bound``): an op whose first
argument is a gradient (``grad``, ``grad_output``) and that reads an ``indices`` tensor. Its
indices run from 0 to, by the arguments it has:

- ``num_weights`` (an int): the embedding backwards' rows;
- ``weight`` (a tensor): that tensor's rows;
- ``dim`` and a ``self``/``input`` tensor: that tensor's size along ``dim``; ``dim`` and ``sizes``: ``sizes[dim]``;
- a ``self``/``input`` tensor and size arguments of a fixed length ``N`` (``int[2] kernel_size``,
  or the forward op's ``int[2] output_size``): the product of its last ``N`` sizes (a pooling plane).

An op with other index-like tensors besides (``offsets``, ``offset2bag``: the embedding-bag
backwards), or none of the above, has no bound graphdbg can check, and is refused. The indices
must be values the graph is given (an input, or a view or copy of one: a cut candidate's
input holds the value its producer computed); indices the graph computes before the op can't
be checked before it runs, and are refused. The bound's own source must be given too: a
literal, an input number, or the shape of an input tensor (annotations are the dump's word,
never trusted for this).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from graphdbg.judge.op_names import op_name

GRADIENTS = ("grad", "grad_output")
_BOUND_TENSORS = ("self", "input", "weight", "per_sample_weights")


@dataclass(frozen=True)
class IndexBound:
    kind: str  # "count", "rows", "dim", "sizes" or "plane"
    source: str  # the argument that holds the bound
    dims: int = 0  # for "plane": how many trailing sizes


def is_index_backward(schema: Any) -> bool:
    """Whether the op scatters a gradient by an ``indices`` tensor it is given (see the module docstring)."""
    args = schema.arguments
    if not args or args[0].name not in GRADIENTS:
        return False
    index = next((a for a in args if a.name == "indices" and str(a.type) == "Tensor"), None)
    return index is not None and not (index.alias_info is not None and index.alias_info.is_write)


def index_bound(schema: Any) -> IndexBound | None:
    """How far the op's indices may run, from its schema; None when graphdbg can't say."""
    names = {a.name: a for a in schema.arguments}
    others = [a.name for a in schema.arguments
              if "Tensor" in str(a.type) and a.name not in (*GRADIENTS, "indices", *_BOUND_TENSORS)]
    if others:
        return None
    if "num_weights" in names and "int" in str(names["num_weights"].type).lower():
        return IndexBound("count", "num_weights")
    if "weight" in names:
        return IndexBound("rows", "weight")
    tensor = next((n for n in ("self", "input") if n in names), None)
    if "dim" in names and tensor:
        return IndexBound("dim", tensor)
    if "dim" in names and "sizes" in names:
        return IndexBound("sizes", "sizes")
    if tensor:
        dims = _fixed_sizes(schema)
        if dims:
            return IndexBound("plane", tensor, dims)
    return None


def _fixed_sizes(schema: Any) -> int:
    """The fixed length of the op's size arguments (``int[2] kernel_size``), else of its forward's."""
    for s in [schema, *_forwards().get(schema.name.removesuffix("_backward"), [])]:
        found = next((getattr(a, "N", None) for a in s.arguments if getattr(a, "N", None)), None)
        if found:
            return int(found)
    return 0


@functools.lru_cache(maxsize=1)
def _forwards() -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in torch._C._jit_get_all_schemas():
        out.setdefault(s.name, []).append(s)
    return out


def _schemas(target: Any) -> list[Any]:
    if isinstance(target, torch._ops.OpOverload):
        return [target._schema]
    if isinstance(target, torch._ops.OpOverloadPacket):
        try:
            return [getattr(target, n)._schema for n in target.overloads()]
        except Exception:
            return []
    return []


def index_schema(target: Any) -> Any:
    """The schema of ``target`` (an overload, or the first overload of a packet) that is an index backward, or None."""
    return next((s for s in _schemas(target) if is_index_backward(s)), None)


def _arg(schema: Any, name: str, node: fx.Node) -> Any:
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if name in node.kwargs:
                return node.kwargs[name]
            if i < len(node.args) and not a.kwarg_only:
                return node.args[i]
            return a.default_value
    return None


def _given(value: Any, values: dict[fx.Node, Any], follow: bool) -> Any:
    """The value of an argument before the graph runs: a literal, an input's value, or (with
    ``follow``) the input a chain of views and copies starts from; None when not known."""
    seen = 0
    while isinstance(value, fx.Node) and seen < 64:
        if value in values:
            return values[value]
        if not follow or not _keeps_values(value) or not value.args or not isinstance(value.args[0], fx.Node):
            return None
        value, seen = value.args[0], seen + 1
    if isinstance(value, (list, tuple)):
        items = [_given(v, values, False) for v in value]
        return None if any(i is None for i in items) else items
    return None if isinstance(value, fx.Node) else value


_COPIES = ("clone", "contiguous", "detach", "alias", "lift_fresh_copy")


def _keeps_values(node: fx.Node) -> bool:
    """A view of its first argument, or a copy of it: no value in it that its input lacks."""
    if node.op == "call_method":
        name = str(node.target)
        packet = getattr(torch.ops.aten, name, None)
    elif node.op == "call_function" and isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        packet = node.target
        name = op_name(node.target)
    else:
        return False
    if any(isinstance(a, torch.dtype) for a in (*node.args[1:], *node.kwargs.values())):
        return False  # a view or copy as another dtype makes new values (int8 of 200 is -56)
    if name in _COPIES:
        return True
    schemas = _schemas(packet) if packet is not None else []
    return bool(schemas) and all(s.returns and s.returns[0].alias_info is not None and not s.returns[0].alias_info.is_write
                                 and s.arguments and s.arguments[0].alias_info is not None for s in schemas)


def _bound_of(rule: IndexBound, schema: Any, node: fx.Node, values: dict[fx.Node, Any]) -> int | None:
    source = _given(_arg(schema, rule.source, node), values, follow=False)
    if rule.kind == "count":
        return int(source) if isinstance(source, int) and not isinstance(source, bool) else None
    if rule.kind == "sizes":
        dim = _given(_arg(schema, "dim", node), values, follow=False)
        if not isinstance(source, list) or not isinstance(dim, int) or not all(isinstance(s, int) for s in source):
            return None
        return source[dim] if -len(source) <= dim < len(source) else None
    if not isinstance(source, torch.Tensor):
        return None
    shape = list(source.shape)
    if rule.kind == "rows":
        return shape[0] if shape else None
    if rule.kind == "dim":
        dim = _given(_arg(schema, "dim", node), values, follow=False)
        return shape[dim] if isinstance(dim, int) and -len(shape) <= dim < len(shape) else None
    if rule.kind == "plane" and 0 < rule.dims <= len(shape):
        plane = 1
        for size in shape[-rule.dims:]:
            plane *= size
        return plane
    return None


def index_refusal(node: fx.Node, values: dict[fx.Node, Any]) -> str | None:
    """Why this call of an index backward may not run: an index out of range, indices or a
    bound not known before the graph runs, or an op with no bound graphdbg can check; None
    when every index is in range (or the node is no index backward). ``values``: the graph's
    inputs, by placeholder."""
    if node.op != "call_function":
        return None
    schema = index_schema(node.target)
    if schema is None:
        return None
    op = f"aten.{schema.name.split('::')[-1]}"
    rule = index_bound(schema)
    if rule is None:
        return f"the op {op} writes by index tensors graphdbg can't check"
    indices = _given(_arg(schema, "indices", node), values, follow=True)
    if not isinstance(indices, torch.Tensor):
        return f"the op {op} writes by indices the graph computes: graphdbg checks them only where the graph is given them"
    bound = _bound_of(rule, schema, node, values)
    if bound is None:
        return f"the op {op} writes by indices whose bound ({rule.source}) is not known before the graph runs"
    if indices.numel() == 0 or indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool \
            or indices.device.type == "meta":
        return None  # nothing to write, or indices torch itself refuses
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= bound:
        return f"the op {op} got an index out of range ({lo if lo < 0 else hi}; {rule.source} allows 0 to {bound - 1})"
    return None
