"""Rebuild a graph's inputs on this machine from a manifest's descriptors.

Stored tensors come back from inputs.safetensors with their stride; tensors that were over
the budget are regenerated from their statistics; streams, events and other things that
can't travel are recreated on the target device or replaced by a named stand-in. Every
value that is not the captured one is reported, never silently substituted.

    >>> values, stand_ins = rebuild_inputs(manifest["inputs"], tensor_file, torch.device("cpu"))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from graphdbg.errors import DumpError
from graphdbg.specs import TensorSpec, dtype_from_name


@dataclass
class StandIn:
    """A value replay made up because the captured one could not come back."""

    name: str
    kind: str  # "regenerated", "stream", "event", "process_group", "opaque", ...
    detail: str

    def describe(self) -> str:
        return f"{self.name}: {self.kind} ({self.detail})"


class NullStream:
    """Stands in for a CUDA stream on a machine without CUDA: waits and syncs do nothing."""

    def __init__(self, desc: Mapping[str, Any]):
        self.desc = dict(desc)

    def wait_stream(self, other: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else NullEvent({})

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"NullStream({self.desc.get('device', '?')})"


class NullEvent:
    def __init__(self, desc: Mapping[str, Any]):
        self.desc = dict(desc)

    def record(self, stream: Any = None) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


def clone_values(values: list[Any]) -> list[Any]:
    """Fresh copies of the tensors among ``values`` (requires_grad kept), the rest as they are:
    what every run of a graph gets, so that in-place ops and donated buffers touch no one else's."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            c.requires_grad_(v.requires_grad)
            out.append(c)
        else:
            out.append(v)
    return out


def to_float64(values: list[Any]) -> list[Any]:
    """The inputs of a float64 reference run: floating tensors upcast, everything else as is."""
    return [v.detach().to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def symbol_env(descs: list[Mapping[str, Any]]) -> dict[str, int]:
    """Concrete values of size symbols (s0, s77, ...) from the SymInt inputs' hints."""
    env: dict[str, int] = {}
    for d in descs:
        if d.get("kind") == "symint" and isinstance(d.get("hint"), int) and str(d.get("expr", "")).isidentifier():
            env[d["expr"]] = d["hint"]
    return env


@dataclass
class InputBuilder:
    """Turns descriptors into values on ``device``; ``read`` fetches stored tensors by key."""

    device: torch.device
    read: Callable[[list[str]], dict[str, torch.Tensor]]
    env: dict[str, int]
    seed: int = 0
    stand_ins: list[StandIn] = field(default_factory=list)

    def build_all(self, descs: list[Mapping[str, Any]], names: list[str] | None = None) -> list[Any]:
        keys = [d["stored"] for d in descs if d.get("kind") == "tensor" and d.get("stored")]
        stored = self.read(keys) if keys else {}
        out = []
        for i, d in enumerate(descs):
            name = (names[i] if names else None) or d.get("node") or d.get("name") or f"input{i}"
            out.append(self.build(name, d, stored))
        return out

    def build(self, name: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> Any:
        kind = d.get("kind")
        if kind == "tensor":
            return self._tensor(name, d, stored)
        if kind in ("symint", "symfloat", "symbool"):
            if d.get("hint") is None:
                raise DumpError(f"input {name}: symbolic value {d.get('expr')} has no recorded hint")
            return d["hint"]
        if kind in ("int", "bool", "str"):
            return d["value"]
        if kind == "float":
            v = d["value"]
            return float(v) if isinstance(v, str) else v
        if kind == "none":
            return None
        if kind == "device":
            return self._device(d["value"])
        if kind == "dtype":
            return dtype_from_name(d["value"])
        if kind in ("list", "tuple"):
            items = [self.build(f"{name}[{i}]", item, stored) for i, item in enumerate(d.get("items", []))]
            return items if kind == "list" else tuple(items)
        if kind == "stream":
            return self._stream(name, d)
        if kind == "event":
            return self._event(name, d)
        if kind == "process_group":
            self.stand_ins.append(StandIn(name, "process_group", f"group {d.get('name')!r} of size {d.get('size')} passed as None"))
            return None
        self.stand_ins.append(StandIn(name, "opaque", f"{d.get('type', kind)} passed as None"))
        return None

    def _device(self, text: str) -> torch.device:
        dev = torch.device(text)
        return self.device if dev.type == "cuda" else dev

    def _tensor(self, name: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> torch.Tensor:
        spec = TensorSpec.from_dict(d)
        device = self.device if (spec.device or "cpu") != "meta" else torch.device("meta")
        shape = spec.concrete_shape(self.env)
        stride = spec.concrete_stride(self.env)
        key = d.get("stored")
        if key:
            data = stored[key]
            if list(data.shape) != shape:
                raise DumpError(f"input {name}: stored shape {list(data.shape)} does not match the manifest's {shape}")
            data = data.to(device)
            if stride is not None and list(data.stride()) != stride and data.numel() > 1:
                out = torch.empty_strided(shape, stride, dtype=data.dtype, device=device)
                out.copy_(data)
                data = out
        else:
            data = self._regenerate(name, spec, shape, stride, d.get("stats") or {}, device, d.get("reason", "not stored"))
        if spec.requires_grad and (data.is_floating_point() or data.is_complex()):
            data.requires_grad_(True)
        return data

    def _regenerate(self, name, spec: TensorSpec, shape, stride, stats, device, why) -> torch.Tensor:
        dtype = spec.torch_dtype
        gen = torch.Generator(device="cpu").manual_seed(self.seed + _stable_int(name))
        n = math.prod(shape)
        lo, hi = stats.get("min"), stats.get("max")
        if dtype == torch.bool:
            p = stats.get("mean", 0.5)
            flat = torch.rand(n, generator=gen) < p
        elif dtype.is_floating_point or dtype.is_complex:
            mean, std = stats.get("mean", 0.0), stats.get("std", 1.0)
            flat = torch.randn(n, generator=gen, dtype=torch.float32) * std + mean
            if lo is not None and hi is not None:
                flat = flat.clamp(lo, hi)
        else:
            low = int(lo) if lo is not None else 0
            high = int(hi) + 1 if hi is not None else 2
            flat = torch.randint(low, max(high, low + 1), (n,), generator=gen, dtype=torch.int64)
        out = torch.empty_strided(shape, stride, dtype=dtype, device=device) if stride else torch.empty(shape, dtype=dtype, device=device)
        out.copy_(flat.reshape(shape).to(dtype))
        self.stand_ins.append(StandIn(name, "regenerated", f"{spec.annotation()} from statistics ({why})"))
        return out

    def _stream(self, name: str, d: Mapping[str, Any]) -> Any:
        if str(d.get("device", "")).startswith("cpu"):
            return torch.Stream(device="cpu")
        if self.device.type == "cuda":
            kwargs = {"priority": d["priority"]} if isinstance(d.get("priority"), int) else {}
            s = torch.cuda.Stream(device=self.device, **kwargs)
            self.stand_ins.append(StandIn(name, "stream", f"recreated on {self.device} (captured on {d.get('device', '?')})"))
            return s
        self.stand_ins.append(StandIn(name, "stream", f"no CUDA here: a no-op NullStream stands in for {d.get('device', '?')}"))
        return NullStream(d)

    def _event(self, name: str, d: Mapping[str, Any]) -> Any:
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=bool(d.get("enable_timing", False)))
            self.stand_ins.append(StandIn(name, "event", f"recreated for {self.device}"))
            return e
        self.stand_ins.append(StandIn(name, "event", "no CUDA here: a no-op NullEvent stands in"))
        return NullEvent(d)


def _stable_int(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode()) & 0x7FFFFFFF
