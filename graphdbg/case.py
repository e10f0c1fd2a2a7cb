"""Case: a runnable graph with its inputs on one device, and the stand-ins it needed.

    >>> case = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d").case()
    >>> out = case.run_eager()
    >>> case.stand_ins        # what is not the captured value, and why
"""

from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from graphdbg.display import Displayed
from graphdbg.errors import GraphdbgError
from graphdbg.rebuild.inputs import StandIn

if TYPE_CHECKING:
    from graphdbg.dump import Dump


@dataclass
class Case(Displayed):
    gm: fx.GraphModule
    inputs: list[Any]
    device: torch.device
    stand_ins: list[StandIn] = field(default_factory=list)
    dump: Dump | None = None
    modified: bool = False  # True once the graph or inputs differ from ``dump`` (a minified candidate)

    @property
    def placeholders(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def run(self, backend: Any = "eager", passes: Any = None, **options: Any):
        """Replay under ``backend`` after ``passes``; returns an Outcome (see ``run_case``)."""
        from graphdbg.display import run_quietly
        from graphdbg.replay.run import run_case

        return run_quietly(lambda: run_case(self, backend, passes, **options))

    def run_eager(self) -> Any:
        """Run the graph as it is, in eager mode, on the case's inputs."""
        from graphdbg.graph_allow_list import check_graph_module

        check_graph_module(self.gm, self.inputs)
        with torch.no_grad():
            return self.gm(*self.inputs)



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


def retarget_devices(gm: fx.GraphModule, source: torch.device, device: torch.device) -> list[str]:
    """Point the graph's device literals for the capture device at the replay device.

    ``device(type='cuda', index=5)`` in a graph captured on cuda:5 becomes ``device``, so a
    graph captured on rank 5 runs on cuda:0 or the CPU; a CPU-captured graph's ``'cpu'``
    literals (``torch.ones(..., device=x.device)`` traced on the CPU) follow it onto a GPU.
    Literals of another device type stay: the program asked for them. Returns the nodes changed.
    """
    changed: list[str] = []

    def follows(d: torch.device) -> bool:
        return d.type == source.type and d != device

    def move(value: Any) -> Any:
        if isinstance(value, torch.device) and follows(value):
            return device
        if isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda") and _is_device_string(value) and follows(torch.device(value)):
            # "cuda" may be a device_type (autocast) that must not gain an index
            return str(device) if ":" in value else device.type
        if isinstance(value, (list, tuple)):
            return type(value)(move(v) for v in value)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            if node.op not in ("call_function", "call_method"):
                continue
            args, kwargs = move(node.args), move(node.kwargs)
            if args != node.args or kwargs != node.kwargs:
                node.args, node.kwargs = args, kwargs
                changed.append(node.name)
        if changed:
            mod.recompile()
    return changed


def _is_device_string(text: str) -> bool:
    try:
        torch.device(text)
        return True
    except (RuntimeError, ValueError):
        return False
