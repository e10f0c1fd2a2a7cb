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

import contextlib
import copy
import re
from collections.abc import Iterator, Mapping

import torch
import torch.fx as fx
from torch.fx.graph_module import _forward_from_src

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


# Regions in a graph -------------------------------------------------------------------------
_ENTER, _EXIT = torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast


_ENTER_LINE = re.compile(r"^(?P<indent>\s*)\w+(?:\s*:\s*[^=]+)?\s*=\s*torch\.amp\.autocast_mode\._enter_autocast\((?P<args>[^()]*)\)\s*$")
_EXIT_LINE = re.compile(r"^(?P<indent>\s*)\w+(?:\s*:\s*[^=]+)?\s*=\s*torch\.amp\.autocast_mode\._exit_autocast\(\w+\)(?P<rest>;.*)?$")


def _with_blocks(src: str) -> str | None:
    """FX's code for a graph, its ``_enter_autocast``/``_exit_autocast`` lines made ``with``
    blocks; None when the regions are not nested line by line as Dynamo emits them."""
    out: list[str] = []
    depth = 0
    for line in src.splitlines():
        enter, leave = _ENTER_LINE.match(line), _EXIT_LINE.match(line)
        pad = "    " * depth
        if enter:
            out.append(f"{pad}{enter['indent']}with torch.amp.autocast({enter['args']}):")
            depth += 1
        elif leave:
            if depth == 0:
                return None
            out.append(f"{pad}{leave['indent']}pass{leave['rest'] or ''}")
            depth -= 1
        elif "_enter_autocast(" in line or "_exit_autocast(" in line:
            return None  # a region call written another way: left as it is
        else:
            out.append(pad + line if line.strip() else line)
    return "\n".join(out) + "\n" if depth == 0 else None


def retraceable(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` as Dynamo can trace it again on every torch: its autocast regions written as the
    ``with torch.autocast(...)`` blocks Dynamo saw in the user's code (a new GraphModule sharing
    ``gm``'s parameters and buffers; ``gm`` itself when it holds no region).

    Dynamo hands the backend the same graph either way, ``_enter_autocast``/``_exit_autocast``
    nodes. Traced as calls, torch 2.11 puts them in the graph as they are and calls
    ``_enter_autocast`` to learn what it returns: the region opens for real in the middle of the
    trace, its result (not a tensor) breaks the graph, and Dynamo, restarting, finds the global
    autocast state changed (``Global autocast(cpu)_enabled state changed while dynamo tracing``)."""
    if not any(n.op == "call_function" and n.target in (_ENTER, _EXIT) for n in gm.graph.nodes):
        return gm
    new = fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    code = new.recompile()
    src = _with_blocks(code.src)
    if src is None:
        return gm
    type(new).forward = _forward_from_src(src, code.globals)
    new._code = src  # what tracebacks and ``print(gm.code)`` show
    return new


def without_regions(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` with its autocast regions taken out: a float64 run computes in float64,
    where a region would cast back to the low precision the reference avoids."""
    new = copy.deepcopy(gm)
    for node in reversed(list(new.graph.nodes)):
        if node.op == "call_function" and node.target in (_ENTER, _EXIT):
            new.graph.erase_node(node)
    new.recompile()
    return new


# The global state around a run ------------------------------------------------------------
def _nesting() -> int:
    # torch has no getter: one step down and back up reads it
    level = torch.autocast_decrement_nesting()
    torch.autocast_increment_nesting()
    return level + 1


def _global_state() -> dict[str, tuple[bool, torch.dtype]]:
    state = {}
    for device_type in DEVICE_TYPES:
        try:
            state[device_type] = (torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))
        except (RuntimeError, TypeError, AttributeError):  # a device type this torch lacks
            continue
    return state


@contextlib.contextmanager
def autocast_kept() -> Iterator[None]:
    """Run a graph eagerly and leave the global autocast state as it found it, also when the
    run fails between a region's ``_enter_autocast`` and its ``_exit_autocast`` node. A region
    left open would make every later run (the compiled one among them) compute in its dtype."""
    before, level, cache = _global_state(), _nesting(), torch.is_autocast_cache_enabled()
    try:
        yield
    finally:
        if _global_state() != before or _nesting() != level:
            for device_type, (enabled, dtype) in before.items():
                torch.set_autocast_enabled(device_type, enabled)
                torch.set_autocast_dtype(device_type, dtype)
            torch.set_autocast_cache_enabled(cache)
            while _nesting() > level:
                if torch.autocast_decrement_nesting() == 0:
                    torch.clear_autocast_cache()


__all__ = ["DEVICE_TYPES", "DTYPES", "ambient_autocast", "autocast_kept", "enter_autocast", "retraceable", "without_regions"]
