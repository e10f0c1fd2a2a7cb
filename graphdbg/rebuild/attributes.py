"""A module's attributes (buffers, parameters, nn modules) that no file stored as values.

Two kinds: those a script's ``__init__`` builds (a minifier's ``self.fc = Linear(...)``,
``register_buffer('c', tensor([0.5, 2.]))``), read from its AST as ``AttrConstruction``s and
made here by graphdbg, never by running the script; and those a printed graph only names
(``self._tensor_constant0: "f32[3]"``), synthesized from their annotation. Whatever is not
the user's value is a stand-in.

    >>> value, stand_in = build_attribute(construction, torch.device("cpu"), seed=0, filename="repro.py")
    >>> value, stand_in = synthesized_attribute("inner._tensor_constant0", spec, torch.device("cpu"), seed=0)
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import torch

from graphdbg.errors import GraphdbgError, GraphSourceError
from graphdbg.rebuild.inputs import StandIn
from graphdbg.rebuild.synthesize import InputPlan, synthesize
from graphdbg.store.specs import TensorSpec

if TYPE_CHECKING:
    from graphdbg.graph.parser import AttrConstruction

# The nn classes torch's minifier prints as constructors (NNModuleToString.safe_reprs).
SAFE_MODULES = frozenset({
    "Linear", "Conv1d", "Conv2d", "Conv3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "Dropout",
    "Softmax", "ReLU", "GELU", "Identity", "MaxPool2d", "Embedding", "Tanh", "ConvTranspose1d", "GLU", "LSTM",
    "Flatten", "AdaptiveAvgPool2d",
})
# Constructors whose result is the user's value exactly (literal data, or constant fills).
_EXACT = frozenset({"tensor", "torch.tensor", "torch.zeros", "torch.ones", "torch.full"})


def build_attribute(c: AttrConstruction, device: torch.device, seed: int, filename: str) -> tuple[Any, StandIn | None]:
    """The value ``c`` describes on ``device``, and a stand-in unless it is the user's value."""
    if c.kind == "module":
        if c.func not in SAFE_MODULES:
            raise GraphSourceError(f"refusing module constructor {c.func} for self.{c.name} (not one torch's minifier prints)",
                                   file=filename, line=c.lineno)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + c.lineno)
            try:
                mod = getattr(torch.nn, c.func)(*c.args, **c.kwargs)
            except Exception as e:
                raise GraphSourceError(f"cannot build {c.func} for self.{c.name}: {e}", file=filename, line=c.lineno) from None
        fresh = any(True for _ in mod.parameters()) or any(True for _ in mod.buffers())
        stand_in = StandIn(c.name, "regenerated", f"{c.func} with fresh weights (the minifier does not save module weights)") if fresh else None
        return mod.to(device), stand_in
    value = _factory(c, seed, f"{filename}:{c.lineno}")
    stand_in = None
    if c.func not in _EXACT:
        stand_in = StandIn(c.name, "regenerated", f"{c.func}{list(value.shape)} as the script writes it "
                                                  f"(the minifier does not save {c.kind}s over 4 elements)")
    value = value.to(device)
    if c.kind == "parameter":
        return torch.nn.Parameter(value, requires_grad=value.is_floating_point()), stand_in
    return value, stand_in


def synthesized_attribute(qualname: str, spec: Any, device: torch.device, seed: int, filename: str = "") -> tuple[Any, StandIn]:
    """An attribute a graph uses but its file can't carry (a tensor constant), made from its
    annotation (``spec``, with sizes already bound) like an input the graph doesn't index with."""
    if not isinstance(spec, TensorSpec):
        raise GraphSourceError(f"attribute {qualname} has no value in the file and no annotation to make one from",
                               file=filename or None)
    dtype = spec.torch_dtype
    kind = "mask" if dtype == torch.bool else "normal" if dtype.is_floating_point or dtype.is_complex else "integers"
    how = {"mask": "mask: each element True with probability 1/2", "normal": "normal(0, 0.1)",
           "integers": "integers in [0, 8)"}[kind]
    (value,), (made,) = synthesize([InputPlan(qualname, spec, kind, 0, 8, how)], device, seed=seed)
    return value, StandIn(qualname, "regenerated", f"{made.detail} (the file holds no value for this attribute)")


def _factory(c: AttrConstruction, seed: int, where: str) -> torch.Tensor:
    """The tensor one of the minifier's buffer expressions describes, made by graphdbg:
    literal data for ``tensor([...])``, seeded random data for ``torch.randn``/``randint``."""
    kw = dict(c.kwargs)
    dtype = kw.pop("dtype", None)
    kw.pop("device", None)  # the replay device decides
    kw.pop("requires_grad", None)
    if c.func in ("tensor", "torch.tensor"):
        if len(c.args) != 1:
            raise GraphdbgError(f"{where}: tensor() takes one literal")
        return torch.tensor(c.args[0], dtype=dtype)
    gen = torch.Generator().manual_seed(seed + (zlib.crc32(c.name.encode()) & 0x7FFFFFFF))
    size = kw.pop("size", None)
    if c.func in ("torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty"):
        shape = size if size is not None else (c.args[0] if len(c.args) == 1 and isinstance(c.args[0], (list, tuple)) else c.args)
        shape = [int(s) for s in shape]
        dtype = dtype or torch.float32
        if c.func == "torch.randn":
            return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        if c.func == "torch.rand":
            return torch.rand(shape, generator=gen, dtype=torch.float32).to(dtype)
        if c.func == "torch.ones":
            return torch.ones(shape, dtype=dtype)
        return torch.zeros(shape, dtype=dtype)  # empty: any value is right, zeros are reproducible
    if c.func == "torch.randint":
        # the minifier writes torch.randint(1, size=[...]) (all zeros) or randint(low, high, size)
        bounds = [int(b) for b in c.args]
        low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        return torch.randint(low, max(high, low + 1), [int(s) for s in size or []], generator=gen).to(dtype or torch.int64)
    if c.func == "torch.full" and len(c.args) == 2:
        return torch.full([int(s) for s in c.args[0]], c.args[1], dtype=dtype)
    raise GraphdbgError(f"{where}: unsupported constructor {c.func} for self.{c.name}")
