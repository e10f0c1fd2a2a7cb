"""Will a graph's inputs fit on the replay device? Asked before anything is allocated.

A serving graph's inputs hold KV and Mamba caches of many GiB. Allocating them on a machine
without room swaps it to death (CPU) or dies out of memory halfway through (GPU), so replay
first adds up the inputs' bytes from their annotations and compares them with the device's
free memory, or with the limit the user gave (``--max-input-gb``, ``$GRAPHDBG_MAX_INPUT_GB``).

    >>> check_fits(5 << 30, torch.device("cpu"))   # raises InputsTooLarge if 5 GiB don't fit
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from graphdbg.errors import GraphdbgError
from graphdbg.store.specs import TensorSpec

if TYPE_CHECKING:
    import torch

MAX_INPUT_GB_ENV = "GRAPHDBG_MAX_INPUT_GB"
# What replay itself needs besides the inputs: the reference's outputs, the backend's
# workspace, the interpreter. Asked of the device on top of the inputs.
HEADROOM_BYTES = 256 << 20


class InputsTooLarge(GraphdbgError):
    """The inputs need more memory than the replay device has free (or than the user allows)."""


def tensor_bytes(spec: TensorSpec, env: Mapping[str, int] | None = None, default_size: int = 8) -> int:
    """Bytes of one tensor input; symbols without a value count as ``default_size``."""
    full = dict(env or {})
    for d in spec.shape + (spec.stride or []):
        if isinstance(d, str):
            for name in _symbols(d):
                full.setdefault(name, default_size)
    try:
        shape = spec.concrete_shape(full)
    except Exception:  # a size expression we can't evaluate counts as unknown, not as an error
        return 0
    return math.prod(shape) * spec.torch_dtype.itemsize


def descriptor_bytes(descs: Iterable[Mapping[str, Any]], env: Mapping[str, int] | None = None) -> int:
    """Bytes of the stored or regenerated tensors among a manifest's input descriptors."""
    total = 0
    for d in descs:
        kind = d.get("kind")
        if d.get("synthesized"):
            continue  # made from annotations: synthesis checks those itself, knowing how it fills them
        if kind == "tensor" and d.get("dtype"):
            try:
                total += tensor_bytes(TensorSpec.from_dict(d), env)
            except Exception:
                continue
        elif kind in ("list", "tuple"):
            total += descriptor_bytes(d.get("items", []), env)
    return total


def free_bytes(device: torch.device) -> int | None:
    """Free memory of ``device``: CUDA's free bytes, or the CPU's MemAvailable; None if unknown."""
    if device.type == "cuda":
        import torch  # lazy: the CPU's figure needs no torch

        try:
            free, _ = torch.cuda.mem_get_info(device)
            return int(free)
        except Exception:
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def limit_bytes(device: torch.device, max_input_gb: float | None = None) -> tuple[int | None, str]:
    """(the most input bytes replay may allocate on ``device``, where that number comes from)."""
    if max_input_gb is None and os.environ.get(MAX_INPUT_GB_ENV):
        try:
            max_input_gb = float(os.environ[MAX_INPUT_GB_ENV])
        except ValueError:
            raise GraphdbgError(f"${MAX_INPUT_GB_ENV}={os.environ[MAX_INPUT_GB_ENV]!r} is not a number of GiB") from None
    if max_input_gb is not None:
        return int(max_input_gb * (1 << 30)), f"--max-input-gb {max_input_gb:g}"
    free = free_bytes(device)
    if free is None:
        return None, "unknown"
    return max(free - HEADROOM_BYTES, 0), f"{_gib(free)} free on {device}"


def check_fits(nbytes: int, device: torch.device, max_input_gb: float | None = None) -> None:
    """Raise InputsTooLarge (one line, exit 2) when ``nbytes`` of inputs don't fit on ``device``."""
    limit, source = limit_bytes(device, max_input_gb)
    if limit is None or nbytes <= limit:
        return
    raise InputsTooLarge(f"the graph's inputs need {_gib(nbytes)}, more than fits on {device} ({source}); "
                         f"replay on a device with more room, or raise the limit with --max-input-gb "
                         f"(or ${MAX_INPUT_GB_ENV}) if you know it fits")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _symbols(expr: str) -> list[str]:
    return re.findall(r"[A-Za-z_]\w*", expr)
