"""Device literals in a replayed graph, moved from the capture device to the replay device."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx


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
