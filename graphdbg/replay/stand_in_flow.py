"""Which stand-ins does each output of a graph depend on? Followed along the graph's data flow.

A printed serving graph replays with stand-ins: Triton kernels kept only by index do nothing,
``torch.empty`` buffers they would have filled are zeros, collectives act as on a world of
one, caches too big to fill are zeros. An output computed from those is not what the real
program computed, and a backend mismatch on it may come from the stand-ins alone (a no-op
kernel leaves zeros that one backend divides by, the other doesn't). Replay says so.

    >>> flow = stand_ins_behind_outputs(case.gm, {7: "input mamba_cache (zeros)"})
    >>> flow[0]
    frozenset({'triton_kernel_wrapper_mutation_1 (no-op Triton kernel)', 'inplace_all_reduce (world-of-one collective)'})

Values flow through arguments, and through writes: after ``inplace_all_reduce(x)`` (a stand-in
that would have written ``x``) every later reader of ``x`` or of a view of it depends on the
stand-in. The answer errs on the side of "depends": a stand-in's arguments all count as written.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.rebuild.stand_ins import stand_in_kind
from graphdbg.replay.mutation import alias_roots, writes

KIND_TEXT = {
    "triton_kernel": "no-op Triton kernel",
    "collective": "world-of-one collective",
    "custom_op": "missing custom op, zeros",
    "zeroed_allocation": "zeroed torch.empty",
}

Labels = frozenset[str]


def stand_ins_behind_outputs(gm: fx.GraphModule, input_labels: dict[int, str] | None = None) -> list[Labels]:
    """For each output leaf of ``gm`` (in ``pytree.tree_leaves`` order), the stand-ins it may
    depend on; ``input_labels`` names the inputs that are stand-ins themselves, by position."""
    per_node = _flow(gm, [frozenset({input_labels[i]}) if input_labels and i in input_labels else frozenset()
                          for i in range(sum(1 for n in gm.graph.nodes if n.op == "placeholder"))])
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    leaves = pytree.tree_leaves(output.args[0])
    return [per_node(leaf) if isinstance(leaf, fx.Node) else frozenset() for leaf in leaves]


def _flow(gm: fx.GraphModule, inputs: list[Labels]):
    roots = alias_roots(gm)
    taint: dict[fx.Node, Labels] = {}
    written: dict[fx.Node, Labels] = {}  # storage root -> what was written into it

    def read(value: Any) -> Labels:
        out: set[str] = set()

        def add(v: Any) -> Any:
            if isinstance(v, fx.Node):
                out.update(taint.get(v, ()))
                out.update(written.get(roots.get(v, v), ()))
            return v

        fx.node.map_aggregate(value, add)
        return frozenset(out)

    placeholders = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            taint[node] = next(placeholders, frozenset())
            continue
        if node.op == "output":
            continue
        got = read((node.args, node.kwargs))
        if node.op == "call_module":
            sub = gm.get_submodule(str(node.target))
            if isinstance(sub, fx.GraphModule):
                inner = _flow(sub, [read(a) for a in node.args])
                inner_out = next(n for n in reversed(sub.graph.nodes) if n.op == "output")
                got = got | frozenset().union(*(inner(leaf) for leaf in pytree.tree_leaves(inner_out.args[0])
                                                if isinstance(leaf, fx.Node)))
        kind = stand_in_kind(node.target) if node.op == "call_function" else None
        if kind is not None:
            got = got | {f"{node.name} ({KIND_TEXT.get(kind, kind)})"}
        taint[node] = got
        targets = writes(node)
        if kind in ("triton_kernel", "collective", "custom_op"):
            # the real call may have written any of its tensor arguments
            targets = [v for v in _flat((node.args, node.kwargs)) if isinstance(v, fx.Node)]
        for target in targets:
            root = roots.get(target, target)
            written[root] = written.get(root, frozenset()) | got

    return lambda node: read(node)


def _flat(value: Any) -> list[Any]:
    out: list[Any] = []
    fx.node.map_aggregate(value, lambda v: out.append(v) or v)
    return out
