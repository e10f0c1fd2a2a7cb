"""Rebuild a graph's inputs on this machine from a manifest's descriptors.

One descriptor, one value, whatever file it came from:
- a stored tensor comes back with its stride (a dump's safetensors);
- a view of a stored storage comes back as that view, so inputs that shared memory still do
  (a minifier's content store); a storage nobody saved is random bytes of its dtype;
- a tensor over the capture budget is regenerated from its statistics;
- a tensor nothing recorded (a printed graph's annotation) is synthesized by the caller's
  ``synthesize`` (index-aware plans, ``rebuild/synthesize.py``);
- streams, events and generators are recreated on the target device, or stood in for.
Every value that is not the captured one is reported, never silently substituted.

    >>> builder = InputBuilder(torch.device("cpu"), read, env={"s0": 8}, seed=0)
    >>> values = builder.build_all(manifest["inputs"])
    >>> [s.describe() for s in builder.stand_ins]
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from graphdbg.errors import DumpError, GraphSourceError
from graphdbg.store.specs import TensorSpec, dtype_from_name, eval_dim

SEED_ENV = "GRAPHDBG_SEED"  # the seed an isolated replay's child uses for values it makes up


def default_seed(seed: int | None) -> int:
    """``seed``, else ``$GRAPHDBG_SEED`` (so an isolated child makes the same values), else 0."""
    return int(seed) if seed is not None else int(os.environ.get(SEED_ENV, "0") or 0)


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
        self.stands_in_for = {**self.desc, "kind": "stream"}  # what a dump of it records (store.describe)

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
        self.stands_in_for = {**self.desc, "kind": "event"}

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
    return [clone_value(v) if isinstance(v, torch.Tensor) else v for v in values]


def clone_value(v: torch.Tensor) -> torch.Tensor:
    """A fresh copy of one tensor input, with its autograd standing (requires_grad, non-leaf)."""
    c = v.detach().clone()
    c.requires_grad_(v.requires_grad)
    return c if v.is_leaf else c.clone()  # a non-leaf stays one (autograd treats them apart)


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


def made_up(d: Mapping[str, Any]) -> bool:
    """An input nothing recorded: a tensor with no stored value, storage or statistics, or a
    symbolic size with no hint. Replay synthesizes it from the graph's annotations."""
    if d.get("kind") == "tensor":
        return not (d.get("stored") or d.get("storage") or d.get("stats"))
    return d.get("kind") in ("symint", "symfloat", "symbool") and d.get("hint") is None


@dataclass
class InputBuilder:
    """Turns descriptors into values on ``device``.

    ``read(keys)`` fetches stored tensors (or a storage's raw bytes, as uint8) by key;
    ``env`` gives every size symbol a value; ``synthesize(name)`` makes an input nothing
    recorded and returns it with its stand-in (None where it can't: the input is then
    regenerated from its descriptor alone); ``where`` names the file in errors.
    """

    device: torch.device
    read: Callable[[list[str]], dict[str, torch.Tensor]]
    env: dict[str, int]
    seed: int = 0
    stand_ins: list[StandIn] = field(default_factory=list)
    synthesize: Callable[[str], tuple[Any, StandIn] | None] | None = None
    where: str = ""
    synthesized: list[str] = field(default_factory=list)  # inputs made from annotations alone
    _storages: dict[str, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    _regenerated: set[str] = field(default_factory=set, init=False, repr=False)

    def build_all(self, descs: list[Mapping[str, Any]], names: list[str] | None = None) -> list[Any]:
        keys = sorted(_stored_keys(descs))
        stored = self.read(keys) if keys else {}
        names = [(names[i] if names else None) or d.get("node") or d.get("name") or f"input{i}" for i, d in enumerate(descs)]
        out = [self.build(name, d, stored) for name, d in zip(names, descs)]
        for i, d in enumerate(descs):
            if isinstance(d.get("sums_to"), int):
                self._sum_to(out, i, d["sums_to"], names[i])
        return out

    def build(self, name: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> Any:
        kind = d.get("kind")
        if kind == "tensor":
            return self._tensor(name, d, stored)
        if kind in ("symint", "symfloat", "symbool"):
            if d.get("hint") is not None:
                return d["hint"]
            if (made := self._synthesized(name)) is not None:
                return made[0]
            try:
                value = eval_dim(str(d.get("expr")), self.env)
            except Exception:
                raise DumpError(f"input {name}: symbolic value {d.get('expr')} has no recorded hint") from None
            self.stand_ins.append(StandIn(name, "synthesized", f"{d.get('expr')} = {value} (no hint recorded)"))
            return value
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
        if kind == "generator" or d.get("type") == "torch.Generator":
            self.stand_ins.append(StandIn(name, "generator", f"a fresh torch.Generator on {self.device}"))
            return torch.Generator(device=self.device)
        self.stand_ins.append(StandIn(name, "opaque", f"{d.get('type', kind)} passed as None"))
        return None

    def _device(self, text: str) -> torch.device:
        dev = torch.device(text)
        return self.device if dev.type == "cuda" else dev

    def _synthesized(self, name: str) -> tuple[Any] | None:
        """``(value,)`` from ``synthesize``, or None where it has no plan for ``name``."""
        made = self.synthesize(name) if self.synthesize is not None else None
        if made is None:
            return None
        value, stand_ins = made
        self.stand_ins.extend(stand_ins if isinstance(stand_ins, list) else [stand_ins])
        self.synthesized.append(name)
        return (value,)

    def _tensor(self, name: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if d.get("storage"):
            return self._view(name, d, stored)
        if made_up(d) and (made := self._synthesized(name)) is not None:
            return made[0]
        spec = TensorSpec.from_dict(d)
        device = self.device if (spec.device or "cpu") != "meta" else torch.device("meta")
        shape = spec.concrete_shape(self.env)
        stride = spec.concrete_stride(self.env)
        key = d.get("stored")
        if key:
            if key not in stored:
                raise DumpError(f"{self.where or 'dump'}: input {name}: stored value {key!r} is missing")
            data = stored[key]
            if list(data.shape) != shape:
                raise DumpError(f"input {name}: stored shape {list(data.shape)} does not match the manifest's {shape}")
            data = data.to(device)
            if stride is not None and list(data.stride()) != stride and data.numel() > 1:
                data = _restrided(data, shape, stride)
        else:
            data = self._regenerate(name, spec, shape, stride, d.get("stats") or {}, device, d.get("reason", "not stored"))
        if spec.requires_grad and (data.is_floating_point() or data.is_complex()):
            data.requires_grad_(True)
            if d.get("leaf") is False:  # captured with autograd history: rebuilt as a non-leaf
                data = data.clone()
        return data

    def _view(self, name: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """A tensor on a storage that several inputs may share (a minifier's ``reader.tensor``)."""
        var = str(d["storage"])
        base = self._storage(var, d, stored)
        spec = TensorSpec.from_dict(d)
        dtype = spec.torch_dtype
        shape = spec.concrete_shape(self.env)
        stride = spec.concrete_stride(self.env) or contiguous_strides(shape)
        offset = int(d.get("storage_offset") or 0)
        extent = offset + 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
        if extent * dtype.itemsize > base.numel():
            raise GraphSourceError(f"input {name}: {shape} with stride {stride} needs {extent * dtype.itemsize} bytes, "
                                   f"its storage has {base.numel()}", file=self.where or None, line=d.get("line"))
        t = torch.empty(0, dtype=dtype, device=self.device)
        t.set_(base.untyped_storage(), offset, shape, stride)
        if var in self._regenerated:
            self.stand_ins.append(StandIn(name, "regenerated", f"random {d.get('storage_dtype', spec.dtype)} data "
                                                               f"({d.get('reason', 'not stored')})"))
        if spec.requires_grad and (dtype.is_floating_point or dtype.is_complex):
            t.requires_grad_(True)
        return t

    def _storage(self, var: str, d: Mapping[str, Any], stored: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if var in self._storages:
            return self._storages[var]
        nbytes = int(d.get("storage_nbytes") or 0)
        key = d.get("stored")
        if key:
            if key not in stored:
                raise DumpError(f"{self.where or 'dump'}: storage {key!r} is missing")
            raw = stored[key].reshape(-1).view(torch.uint8)
            if raw.numel() != nbytes:
                raise DumpError(f"{self.where or 'dump'}: storage {key}: {raw.numel()} bytes, the file says {nbytes}")
        else:
            raw = _random_bytes(nbytes, dtype_from_name(d.get("storage_dtype") or "float32"), self.seed + _stable_int(var))
            self._regenerated.add(var)
        # a copy per storage: two storages with the same content (and hash) are still two
        self._storages[var] = raw.to(self.device, copy=True)
        return self._storages[var]

    def _sum_to(self, values: list[Any], i: int, j: Any, name: str) -> None:
        """Regenerated repeat counts must still add up to the output size the graph was traced
        with (what the minifier's own ``load_args`` does for ``repeat_interleave``)."""
        rep, size = values[i], values[j] if 0 <= j < len(values) else None
        regenerated = any(s.name == name and s.kind in ("regenerated", "synthesized") for s in self.stand_ins)
        if regenerated and isinstance(rep, torch.Tensor) and rep.dtype == torch.int64 and isinstance(size, int) and rep.numel():
            with torch.no_grad():
                rep.fill_(size // rep.numel())
                rep.view(-1)[: size % rep.numel()] += 1

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
        what = "from statistics" if stats else "random"
        self.stand_ins.append(StandIn(name, "regenerated", f"{spec.annotation()} {what} ({why})"))
        return out

    def _stream(self, name: str, d: Mapping[str, Any]) -> Any:
        """A stream of the recorded Python type: Dynamo hands a backend ``torch.Stream`` on some
        paths and ``torch.cuda.Stream`` on others, and a compiler treats the two apart."""
        typ, where = str(d.get("type") or "torch.cuda.streams.Stream"), str(d.get("device") or "?")
        if where.startswith("cpu"):
            return torch.Stream(device="cpu")
        if self.device.type == "cuda":
            kwargs = {"priority": d["priority"]} if isinstance(d.get("priority"), int) else {}
            cls, rebuilt = runtime_class(typ, "stream")
            s = cls(device=self.device, **kwargs)
            self.stand_ins.append(StandIn(name, "stream", f"a new {type_name_of(s)} on {self.device} "
                                          f"(captured: {typ} on {where}{'' if rebuilt else '; that type is not here'})"))
            return s
        self.stand_ins.append(StandIn(name, "stream", f"no CUDA here: a no-op NullStream stands in for the {typ} on {where}"))
        return NullStream(d)

    def _event(self, name: str, d: Mapping[str, Any]) -> Any:
        typ, where = str(d.get("type") or "torch.cuda.streams.Event"), str(d.get("device") or "cuda")
        flags = {k: bool(d[k]) for k in ("enable_timing", "blocking", "interprocess") if isinstance(d.get(k), bool)}
        if where.startswith("cpu"):
            return torch.Event(device="cpu", **flags)
        if self.device.type == "cuda":
            cls, rebuilt = runtime_class(typ, "event")
            e = cls(device=self.device, **flags) if cls is torch.Event else cls(**flags)
            self.stand_ins.append(StandIn(name, "event", f"a new {type_name_of(e)} on {self.device} "
                                          f"(captured: {typ} on {where}{'' if rebuilt else '; that type is not here'})"))
            return e
        self.stand_ins.append(StandIn(name, "event", f"no CUDA here: a no-op NullEvent stands in for the {typ} on {where}"))
        return NullEvent(d)


# The runtime types a backend may be handed, by the name ``store.describe.type_name`` records.
_RUNTIME_TYPES = {
    "stream": {"torch.Stream": lambda: torch.Stream, "torch.cuda.streams.Stream": lambda: torch.cuda.Stream,
               "torch.cuda.streams.ExternalStream": lambda: torch.cuda.Stream},
    "event": {"torch.Event": lambda: torch.Event, "torch.cuda.streams.Event": lambda: torch.cuda.Event},
}


def runtime_class(recorded: str, kind: str) -> tuple[type, bool]:
    """(the class to rebuild a recorded ``kind`` with, whether it is the recorded one). A type
    this torch doesn't have falls back to the CUDA class (what older dumps meant)."""
    table = _RUNTIME_TYPES[kind]
    if recorded in table:
        return table[recorded](), True
    return table["torch.cuda.streams." + kind.capitalize()](), False


def type_name_of(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}.{t.__qualname__}"


def _stored_keys(descs: list[Mapping[str, Any]]) -> set[str]:
    """The stored values ``descs`` name, inside lists and tuples too."""
    keys: set[str] = set()
    for d in descs:
        if d.get("kind") == "tensor" and d.get("stored"):
            keys.add(d["stored"])
        elif d.get("kind") in ("list", "tuple"):
            keys |= _stored_keys(d.get("items", []))
    return keys


def _random_bytes(nbytes: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random data of ``dtype`` as ``nbytes`` bytes: what torch's own repro reader does, seeded.
    Integers are 0 or 1, valid indices and counts for any dimension of size >= 2."""
    n = nbytes // dtype.itemsize
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        vals = torch.rand(n, generator=gen) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        vals = torch.randn(n, generator=gen).to(dtype)
    else:
        vals = torch.randint(0, 2, (n,), generator=gen).to(dtype)
    raw = vals.view(torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
    if raw.numel() < nbytes:
        raw = torch.cat([raw, torch.zeros(nbytes - raw.numel(), dtype=torch.uint8)])
    return raw


def _restrided(data: torch.Tensor, shape: list[int], stride: list[int]) -> torch.Tensor:
    """``data`` laid out with ``stride``. A broadcast input (stride 0, as ``expand`` makes) can't be
    written element by element: its first slice along each broadcast dim is copied, then expanded."""
    broadcast = [st == 0 and n > 1 for n, st in zip(shape, stride)]
    first = data[tuple(slice(0, 1) if b else slice(None) for b in broadcast)]
    out = torch.empty_strided(list(first.shape), stride, dtype=data.dtype, device=data.device)
    out.copy_(first)
    return out.expand(shape) if any(broadcast) else out


def contiguous_strides(shape: list[int]) -> list[int]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return list(reversed(stride))


def _stable_int(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF
