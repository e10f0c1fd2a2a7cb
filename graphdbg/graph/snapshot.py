"""GraphSnapshot: the graph as a backend received it, taken before the backend can change it.

What the dump writer needs from a graph (its printed source, hash, node metadata, the tensors
it reaches, Dynamo's side-table objects, the collective groups it uses) is read here, at
compile time, because some of it (weak references in Dynamo's side table) is gone later.
"""

from __future__ import annotations

import copy
import functools
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from graphdbg.graph.autocast import ambient_autocast
from graphdbg.graph.hashing import module_hash, op_histogram, target_name
from graphdbg.graph.kernels import custom_ops, triton_kernels
from graphdbg.store.describe import describe_value


@dataclass
class GraphSnapshot:
    """The graph as the backend received it, taken before the backend can change it."""

    seq: int | str  # "3", or "3.1" for the first piece of graph 3
    source: str
    graph_hash: str
    node_count: int
    ops: dict[str, int]
    placeholders: list[fx.Node]
    node_info: dict[str, dict[str, Any]]
    attrs: dict[str, torch.Tensor]
    external_objects: list[dict[str, Any]]
    collectives: list[dict[str, Any]] = field(default_factory=list)
    eager: fx.GraphModule | None = None
    dumped: set[str] = field(default_factory=set)
    config: dict[str, Any] | None = None  # compiler settings that differ from the defaults (compiler_config)
    pieces: int = 0  # nested compiles this graph's backend started (capture.nested)
    children: list[dict[str, Any]] = field(default_factory=list)  # piece dumps not yet linked to an outer dump
    captured_path: Any = None  # the "always" dump of this graph, if one was written
    parent: Any = None  # {"frame", "call", "piece", "position"} when this graph is itself a piece of another captured graph
    origin: dict[str, Any] = field(default_factory=dict)  # frame and compile id (capture/origin.py)
    custom_ops: list[dict[str, Any]] = field(default_factory=list)  # the model's own ops (graph/kernels.py)
    triton_kernels: list[dict[str, Any]] = field(default_factory=list)  # user Triton kernels, read from Dynamo's side table now
    autocast: dict[str, str] = field(default_factory=dict)  # the caller's autocast around the graph (graph/autocast.py)
    ddp: dict[str, Any] | None = None  # DDP's bucket split: the whole graph's, or one piece's place in it (capture/ddp.py)
    generated_code: dict[str, Any] | None = None  # what Inductor generated for it, hashed (backends/generated_code.py)

    @classmethod
    def take(cls, seq: int, gm: fx.GraphModule, keep_eager: bool) -> GraphSnapshot:
        name_every_dtype()
        source = gm.print_readable(print_output=False, include_stride=True, include_device=True)
        return cls(
            seq=seq,
            source=source,
            graph_hash=module_hash(gm),
            node_count=len(gm.graph.nodes),
            ops=op_histogram(gm.graph),
            placeholders=[n for n in gm.graph.nodes if n.op == "placeholder"],
            node_info=_node_info(gm),
            attrs=_tensor_attrs(gm),
            external_objects=_external_objects(gm),
            collectives=collective_groups(gm),
            custom_ops=custom_ops(gm),
            triton_kernels=triton_kernels(gm),
            eager=copy.deepcopy(gm) if keep_eager else None,
            autocast=ambient_autocast(),  # Dynamo compiles under the state every call of the graph has (it guards on it)
        )


@functools.cache  # once per process: torch's dtypes don't change
def name_every_dtype() -> None:
    """FX prints each node's dtype by its abbreviation from torch's table, which on some torch
    releases lacks dtypes that release has (2.11: bits8, bits2x4, bits4x2, int1-7): printing a
    graph with one raised KeyError and no dump was written (and Dynamo's own structured log,
    where a handler is on, failed before the backend ran). Each missing dtype gets the name torch
    2.13 gives it (``dtype.abbr``) or, on a torch without that, its own name; nothing else changes.
    Called when a capture is set up and whenever a graph is printed."""
    from torch.utils import _dtype_abbrs  # here: torch's table, filled only when a graph is printed

    table = _dtype_abbrs.dtype_abbrs
    for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)} - set(table):
        table[dtype] = getattr(dtype, "abbr", None) or str(dtype).removeprefix("torch.")


def _node_info(gm: fx.GraphModule) -> dict[str, dict[str, Any]]:
    info: dict[str, dict[str, Any]] = {}
    for node in gm.graph.nodes:
        entry: dict[str, Any] = {}
        stack = node.meta.get("nn_module_stack")
        if stack:
            path, mod_type = list(stack.values())[-1]
            entry["module"] = _clean_module_path(path)
            entry["module_type"] = mod_type if isinstance(mod_type, str) else f"{mod_type.__module__}.{mod_type.__qualname__}"
        if entry:
            info[node.name] = entry
    return info


def _clean_module_path(path: str) -> str:
    # Dynamo spells paths as L['self'].layers[0].attn; people read layers.0.attn.
    import re

    path = re.sub(r"^L\['[^']+'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    return path.strip(".")


def _tensor_attrs(gm: fx.GraphModule) -> dict[str, torch.Tensor]:
    """Tensors the graphs reach with get_attr, by qualified name from the root module."""
    attrs: dict[str, torch.Tensor] = {}
    for prefix, mod in gm.named_modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            if node.op != "get_attr":
                continue
            obj = mod
            try:
                for part in str(node.target).split("."):
                    obj = getattr(obj, part)
            except AttributeError:
                continue
            if isinstance(obj, torch.Tensor):
                attrs[f"{prefix}.{node.target}" if prefix else str(node.target)] = obj
    return attrs


def _external_objects(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Objects Dynamo keeps out of the inputs and fetches by index (torch 2.11+ streams, events).

    The side table holds weak references that may be dead by the time a failure is dumped,
    so it is read now, while the graph is being compiled.
    """
    used: dict[int, list[str]] = {}
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for node in mod.graph.nodes:
                if node.op == "call_function" and getattr(node.target, "__name__", "") == "get_external_object_by_index":
                    idx = node.args[0] if node.args else node.kwargs.get("index")
                    if isinstance(idx, int):
                        used.setdefault(idx, []).append(node.name)
    if not used and "torch._dynamo" not in sys.modules:  # nothing fetched, and no Dynamo run filled the table
        return []
    try:
        from torch._dynamo import graph_bytecode_inputs as side_table  # torch._dynamo costs about 2 s: imported only when needed
    except ImportError:
        return []
    table = getattr(side_table, "index_to_external_object_weakref", {})
    out = []
    for idx in sorted(set(table) | set(used)):
        ref = table.get(idx)
        obj = ref() if ref is not None else None
        desc = describe_value(obj) if obj is not None else {"kind": "missing"}
        out.append({"index": idx, **desc, "used_by": used.get(idx, [])})
    return out


# Attributes Dynamo looks up on a backend; copied from the wrapped one so it behaves the same.
def _group_name_args(node: fx.Node) -> list[str]:
    """The string arguments a collective names its process group with."""
    names = [v for k, v in node.kwargs.items() if k in ("group_name", "tag", "group") and isinstance(v, str)]
    target = node.target
    if isinstance(target, torch._ops.OpOverloadPacket):  # Dynamo keeps the packet: all_reduce, not .default
        target = getattr(target, "default", target)
    schema = getattr(target, "_schema", None)
    if schema is not None:
        for arg, value in zip(schema.arguments, node.args):
            if arg.name in ("group_name", "tag") and isinstance(value, str):
                names.append(value)
    return names


def collective_groups(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Each process group the graph's collectives use: its name, the ops, and (when this process
    can resolve it) its ranks. Covers torch.ops._c10d_functional.* and custom ops such as
    torch.ops.sglang.inplace_all_reduce(x, group_name='tp:0')."""
    groups: dict[str, dict[str, Any]] = {}
    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            if node.op != "call_function":
                continue
            for name in _group_name_args(node):
                g = groups.setdefault(name, {"name": name, "ops": []})
                op = target_name(node)
                if op not in g["ops"]:
                    g["ops"].append(op)
    for g in groups.values():
        try:
            import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

            # a torch build may lack torch.distributed: the try answers without it
            from torch.distributed.distributed_c10d import _resolve_process_group

            if dist.is_initialized():
                pg = _resolve_process_group(g["name"])
                g["ranks"] = dist.get_process_group_ranks(pg)
                g["size"] = pg.size()
        except Exception:
            pass
    return sorted(groups.values(), key=lambda g: g["name"])


__all__ = ["GraphSnapshot", "collective_groups"]
