"""Objects Dynamo fetches by index from its side table, put back where the graph looks for them.

A graph Dynamo made reads streams and events from a side table by index, twice over:
``get_external_object_by_index(1)`` returns one, and ``torch.ops.streams.wait_stream(0, 1)``
takes the indices themselves. So replay seats every recorded object at its recorded index
(``seat_external_objects``), where an eager run and a backend handed the graph as it is (a
piece of a nested compile) find them. A graph replayed through ``torch.compile`` also gets
them as inputs (``lift_external_objects``): Dynamo's new trace resets its table and fills it
again from what it is given.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError


def place_external_objects(gm: fx.GraphModule, objects: dict[int, Any], *, piece: bool) -> list[Any]:
    """Seat ``objects`` in Dynamo's side table; unless ``gm`` is a piece (compiled as it is, never
    re-traced), also make them graph inputs. Returns the inputs added."""
    seat_external_objects(objects)
    return [] if piece else lift_external_objects(gm, objects)


def seat_external_objects(objects: dict[int, Any]) -> None:
    """Each object at its index in Dynamo's side table (held alive by the table's own list)."""
    if not objects:
        return
    try:
        from torch._dynamo import graph_bytecode_inputs as side_table  # torch._dynamo costs about 2 s: imported only when needed
    except ImportError:  # an older torch: its graphs take such objects as inputs
        return
    table = getattr(side_table, "index_to_external_object_weakref", None)
    if table is None:
        return
    # torch 2.11 has the table but no setter: the table holds weak references, so keep the values
    alive = getattr(side_table, "keep_alive", _KEEP_ALIVE)
    for index, value in objects.items():
        try:
            table[index] = weakref.ref(value)
        except TypeError:  # no weak reference to it (a stand-in that is None): nothing to look up
            continue
        alive.append(value)


_KEEP_ALIVE: list[Any] = []


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
