"""Case: a runnable graph with its inputs on one device, and the stand-ins it needed.

    >>> case = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d").case()
    >>> out = case.run_eager()
    >>> case.stand_ins        # what is not the captured value, and why
"""

from __future__ import annotations

import weakref
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from graphdbg.replay.inputs import StandIn

if TYPE_CHECKING:
    from graphdbg.replay.dump import Dump


@dataclass
class Case:
    gm: fx.GraphModule
    inputs: list[Any]
    device: torch.device
    stand_ins: list[StandIn] = field(default_factory=list)
    external_objects: dict[int, Any] = field(default_factory=dict)
    dump: Dump | None = None
    modified: bool = False  # True once the graph or inputs differ from ``dump`` (a minified candidate)

    @property
    def placeholders(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def install_external_objects(self) -> None:
        """Put recreated streams/events where ``get_external_object_by_index`` looks for them."""
        if not self.external_objects:
            return
        from torch._dynamo import graph_bytecode_inputs as side_table

        for idx, obj in self.external_objects.items():
            side_table.index_to_external_object_weakref[idx] = weakref.ref(obj)

    def run(self, backend: Any = "eager", passes: Any = None, **options: Any):
        """Replay under ``backend`` after ``passes``; returns an Outcome (see ``run_case``)."""
        from graphdbg.replay.run import run_case

        return run_case(self, backend, passes, **options)

    def run_eager(self) -> Any:
        """Run the graph as it is, in eager mode, on the case's inputs."""
        self.install_external_objects()
        with torch.no_grad():
            return self.gm(*self.inputs)

    def __rich__(self) -> Any:
        from graphdbg.render import case_panel

        return case_panel(self)


def save_case(case: Case, dump_dir: Path | str, *, kind: str | None = None) -> Path:
    """Write ``case`` as a dump folder under ``dump_dir`` (``rank<R>/<id>/``); returns its path."""
    from graphdbg.capture.hook import GraphSnapshot
    from graphdbg.capture.write import write_dump

    origin = case.dump.manifest if case.dump is not None else {}
    case.install_external_objects()
    snap = GraphSnapshot.take(0, case.gm, keep_eager=False)
    return write_dump(
        Path(dump_dir), snap=snap, inputs=list(case.inputs), kind=kind or origin.get("failure", {}).get("kind", "captured"),
        exc=None, backend=str(origin.get("backend", "replay")), mode="replay", budget_bytes=1 << 62,
        inputs_state="replay", manifest_overrides={"grad_enabled": origin.get("grad_enabled", False)},
    )


def retarget_devices(gm: fx.GraphModule, device: torch.device) -> list[str]:
    """Point device literals in the graph (``device(type='cuda', index=5)``) at ``device``.

    Returns the nodes changed. A cuda literal on a CPU replay becomes the CPU, so that a
    graph captured on rank 5 runs anywhere; cpu literals stay, as the program asked for them.
    """
    changed: list[str] = []

    def move(value: Any) -> Any:
        if isinstance(value, torch.device) and value.type == "cuda" and value != device:
            return device
        if isinstance(value, str) and value.startswith("cuda") and _is_device_string(value) and torch.device(value) != device:
            return str(device)
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
