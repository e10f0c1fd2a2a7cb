"""Objects Dynamo fetches by index from its side table, made graph inputs for a replay."""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError


def lift_external_objects(gm: fx.GraphModule, objects: dict[int, Any]) -> list[Any]:
    """Turn ``get_external_object_by_index(i)`` calls into graph inputs; returns the new inputs.

    Dynamo's side table is process state that each new compile resets, so a replayed graph
    can't read it. Passed as inputs instead, the recreated streams reach the graph directly,
    and when the graph is compiled again Dynamo puts them back in its side table itself, so
    the backend sees the same kind of graph as in the user's run.
    """
    calls = [n for n in gm.graph.nodes
             if n.op == "call_function" and getattr(n.target, "__name__", "") == "get_external_object_by_index"]
    if not calls:
        return []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    new_inputs: list[Any] = []
    anchor = placeholders[-1] if placeholders else None
    for node in calls:
        idx = node.args[0] if node.args else node.kwargs.get("index")
        if idx not in objects:
            raise GraphdbgError(f"the graph fetches external object {idx}, which the dump does not describe")
        ctx = gm.graph.inserting_after(anchor) if anchor is not None else gm.graph.inserting_before(next(iter(gm.graph.nodes)))
        with ctx:
            ph = gm.graph.placeholder(f"external_object_{idx}_{node.name}")
        ph.meta.update(node.meta)
        node.replace_all_uses_with(ph)
        gm.graph.erase_node(node)
        anchor = ph
        new_inputs.append(objects[idx])
    gm.recompile()
    return new_inputs
