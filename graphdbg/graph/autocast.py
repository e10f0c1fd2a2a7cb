"""The autocast a graph ran under without holding it: the user's ``with torch.autocast(...)``
around the compiled call.

Dynamo puts autocast regions opened *inside* the compiled code in the graph
(``_enter_autocast``/``_exit_autocast`` nodes), but the region the caller opened is global state
around the call: the graph's ``linear`` gives bf16 only because the caller's autocast is on. A
replay without it computes in float32, and its outputs are not the captured ones (their dtype,
then their values, then the gradients of a backward). Capture records that state per device
type (``{"cpu": "bfloat16"}``); rebuild puts it back in the graph as an outer region, so every
run of the rebuilt graph (replay, its re-trace by Dynamo, the backward through it, minify
candidates, repro.py) computes as the user's did, and the float64 reference, which drops
autocast nodes, still computes in float64.

    >>> ambient_autocast()                      # inside the user's ``with torch.autocast("cpu", dtype=torch.bfloat16)``
    {'cpu': 'bfloat16'}
    >>> enter_autocast(gm, {"cpu": "bfloat16"}, torch.device("cpu"))
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.fx as fx

from graphdbg.errors import DumpError

DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def ambient_autocast() -> dict[str, str]:
    """The device types whose autocast is on now, with the dtype each casts to."""
    state: dict[str, str] = {}
    for device_type in DEVICE_TYPES:
        try:
            if torch.is_autocast_enabled(device_type):
                state[device_type] = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
        except (RuntimeError, TypeError, AttributeError):  # a device type this torch lacks
            continue
    return state


def enter_autocast(gm: fx.GraphModule, recorded: Mapping[str, str] | None, device: torch.device) -> list[str]:
    """Wrap ``gm``'s body in the ``recorded`` autocast regions (outermost first), as the user's
    ``with torch.autocast`` wrapped the call. A region recorded for an accelerator follows the
    graph to the replay device (``cuda`` bf16 replayed on the CPU becomes ``cpu`` bf16). Returns
    what moved, for the stand-ins."""
    if not recorded:
        return []
    moved = []
    regions: list[tuple[str, torch.dtype]] = []
    for device_type, dtype_name in recorded.items():
        if device_type not in DEVICE_TYPES or dtype_name not in DTYPES:
            raise DumpError(f"manifest autocast {device_type!r}: {dtype_name!r}: not a device type and dtype torch.autocast takes")
        target = device_type
        if device_type != "cpu" and device_type != device.type:
            target = device.type
            moved.append(f"autocast {device_type} {dtype_name} replayed as {target} autocast")
        if target not in (t for t, _ in regions):
            regions.append((target, DTYPES[dtype_name]))
    graph = gm.graph
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    output = next(n for n in graph.nodes if n.op == "output")
    entered = []
    for device_type, dtype in regions:
        with graph.inserting_before(first if first is not None else output):
            entered.append(graph.call_function(torch.amp.autocast_mode._enter_autocast, (device_type, dtype, True, None)))
    for node in reversed(entered):
        with graph.inserting_before(output):
            graph.call_function(torch.amp.autocast_mode._exit_autocast, (node,))
    gm.recompile()
    return moved


__all__ = ["DEVICE_TYPES", "DTYPES", "ambient_autocast", "enter_autocast"]
