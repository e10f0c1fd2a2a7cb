"""A graph's identity: a structural hash and an op histogram.

The hash sees ops, targets, argument structure, constants and placeholder specs, not node
names, comments, source lines or device indices (each rank of a world runs its graph on its own
GPU), so the same graph printed twice (or parsed back from its
printed form) hashes the same.

    >>> gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    >>> len(graph_hash(gm.graph))
    64
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

import torch
import torch.fx as fx

from graphdbg.judge.op_names import call_name
from graphdbg.store.specs import TensorSpec


def target_name(node: fx.Node) -> str:
    """A readable, stable name for what a node calls: ``torch.ops.aten.add.Tensor``, ``Tensor.add``."""
    return call_name(node, overload=True, python=True)


_DEVICE_INDEX = re.compile(r"(?<=[a-z]):\d+$")  # "f32[4, 8][8, 1]cuda:1": the device's type only


def _canon(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return f"%{index[value]}"
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_canon(v, index) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[str(k), _canon(v, index)] for k, v in value.items()]]
    if isinstance(value, slice):
        return ["slice", _canon(value.start, index), _canon(value.stop, index), _canon(value.step, index)]
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, torch.device):  # rank r's graph on cuda:r is the same graph as rank 0's
        return value.type
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return type(value).__name__


def _placeholder_spec(node: fx.Node) -> str:
    return _DEVICE_INDEX.sub("", _annotation(node))


def _annotation(node: fx.Node) -> str:
    spec = node.meta.get("graphdbg_spec")
    if spec is not None:
        return spec.annotation()
    val = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(val, torch.Tensor):
        return TensorSpec.of(val).annotation()
    if isinstance(val, torch.SymInt):
        return f"Sym({val.node.expr})"
    return ""


def graph_hash(graph: fx.Graph, submodules: dict[str, fx.GraphModule] | None = None) -> str:
    """sha256 over the graph's structure; nested GraphModules are hashed in by their own hash."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    h = hashlib.sha256()
    for node in graph.nodes:
        parts: list[Any] = [node.op, target_name(node)]
        if node.op == "placeholder":
            parts.append(_placeholder_spec(node))
        parts.append(_canon(node.args, index))
        parts.append(_canon(node.kwargs, index))
        h.update(repr(parts).encode())
    for name, sub in sorted((submodules or {}).items()):
        h.update(f"{name}:{graph_hash(sub.graph, _graph_submodules(sub))}".encode())
    return h.hexdigest()


def _graph_submodules(gm: torch.nn.Module) -> dict[str, fx.GraphModule]:
    return {n: m for n, m in gm.named_children() if isinstance(m, fx.GraphModule)}


def module_hash(gm: fx.GraphModule) -> str:
    return graph_hash(gm.graph, _graph_submodules(gm))


def op_histogram(graph: fx.Graph) -> dict[str, int]:
    """How many times each target is called; placeholders and output left out."""
    counts = Counter(target_name(n) for n in graph.nodes if n.op not in ("placeholder", "output"))
    return dict(counts.most_common())
