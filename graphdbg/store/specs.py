"""What a value looked like, without the value: tensor specs, annotations, symbolic sizes.

A printed FX graph annotates each value as ``"f32[s0, 8][8, 1]cpu"`` (dtype, shape, stride,
device) or ``"Sym(s0)"``. The same spec, as a dict, describes every input in a manifest.

    >>> spec = parse_annotation("bf16[1, 2048][2048, 1]cuda:5")
    >>> spec.dtype, spec.shape, spec.device
    ('bfloat16', [1, 2048], 'cuda:5')
    >>> spec.annotation()
    'bf16[1, 2048][2048, 1]cuda:5'
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphdbg.errors import GraphdbgError
from graphdbg.store.symbolic_sizes import (  # noqa: F401 (re-exported: where they always were)
    MAX_EXPR_CHARS,
    MAX_EXPR_NODES,
    MAX_MAGNITUDE,
    MAX_NUMEL,
    check_numel,
    eval_dim,
    shortened,
)

if TYPE_CHECKING:
    import torch

# Abbreviations as torch.fx prints them; kept here so that files printed by another torch parse too.
DTYPE_ABBRS: dict[str, str] = {
    "b8": "bool",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "c32": "complex32",
    "c64": "complex64",
    "c128": "complex128",
    "f8e5m2": "float8_e5m2",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e8m0fnu": "float8_e8m0fnu",
    "f4e2m1fnx2": "float4_e2m1fn_x2",
}
_ABBR_OF = {v: k for k, v in DTYPE_ABBRS.items()}

Dim = int | str  # an int, or a symbolic expression such as "s0" or "8*s27"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    import torch  # lazy: parsing annotations (graphdbg ls) imports no torch

    name = DTYPE_ABBRS.get(name, name).removeprefix("torch.")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise GraphdbgError(f"unknown dtype {name!r}")
    return dtype


@dataclass
class TensorSpec:
    """Dtype, shape, stride and device of a tensor; dims may be symbolic expressions."""

    dtype: str
    shape: list[Dim]
    stride: list[Dim] | None = None
    device: str | None = None
    requires_grad: bool = False
    storage_offset: int = 0

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        import torch  # lazy: parsing annotations (graphdbg ls) imports no torch

        return cls(
            dtype=dtype_name(t.dtype),
            shape=[_dim(d) for d in t.shape],
            stride=[_dim(s) for s in t.stride()] if t.layout == torch.strided else None,
            device=str(t.device),
            requires_grad=bool(t.requires_grad),
            storage_offset=_dim(t.storage_offset()) if t.layout == torch.strided else 0,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        known = {k: d[k] for k in ("dtype", "shape", "stride", "device", "requires_grad", "storage_offset") if k in d}
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        # asdict's copy, by hand: dims are ints and strings (ls makes one per input of every file)
        return {"dtype": self.dtype, "shape": list(self.shape), "stride": None if self.stride is None else list(self.stride),
                "device": self.device, "requires_grad": self.requires_grad, "storage_offset": self.storage_offset}

    @property
    def torch_dtype(self) -> torch.dtype:
        return dtype_from_name(self.dtype)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def numel(self, env: dict[str, int] | None = None) -> int:
        n = 1
        for d in self.concrete_shape(env):
            n *= d
        return n

    def nbytes(self, env: dict[str, int] | None = None) -> int:
        return self.numel(env) * self.torch_dtype.itemsize

    def concrete_shape(self, env: dict[str, int] | None = None) -> list[int]:
        shape = [eval_dim(d, env or {}) for d in self.shape]
        check_numel(shape, f"a {self.dtype} tensor")
        return shape

    def concrete_stride(self, env: dict[str, int] | None = None) -> list[int] | None:
        if self.stride is None:
            return None
        return [eval_dim(d, env or {}) for d in self.stride]

    def annotation(self) -> str:
        abbr = _ABBR_OF.get(self.dtype, self.dtype)
        text = f"{abbr}[{', '.join(str(d) for d in self.shape)}]"
        if self.stride is not None:
            text += f"[{', '.join(str(d) for d in self.stride)}]"
        if self.device:
            text += self.device
        return text


@dataclass
class SymSpec:
    """A symbolic scalar (``"Sym(s0)"``): its expression and, where known, a concrete hint."""

    expr: str
    hint: int | float | bool | None = None
    kind: str = field(default="symint")

    def annotation(self) -> str:
        return f"Sym({self.expr})"


def _dim(d: Any) -> Dim:
    import torch  # lazy: parsing annotations (graphdbg ls) imports no torch

    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if expr.is_number else str(expr)
    return int(d)


MAX_ANNOTATION_CHARS = 8192  # a 64-dim tensor with symbolic strides prints in under 2 KB
_ANNOTATION = re.compile(
    r"^(?P<dtype>[a-z][a-z0-9_]*)\[(?P<shape>[^\]]*)\](?:\[(?P<stride>[^\]]*)\])?(?P<device>[a-z]+(?::\d+)?)?$"
)


def parse_annotation(text: str) -> TensorSpec | SymSpec | None:
    """Parse a printed annotation; returns None for text that is not a tensor or Sym annotation."""
    text = text.strip()
    if len(text) > MAX_ANNOTATION_CHARS:
        return None
    if text.startswith("Sym(") and text.endswith(")"):
        expr = text[4:-1].strip()
        hint: int | float | bool | None = None
        try:  # a bare symbol (s0) is no literal: not parsed (ls reads thousands of them)
            value = ast.literal_eval(expr) if not expr.isidentifier() or expr in ("True", "False") else None
            if isinstance(value, (int, float, bool)):
                hint = value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        kind = "symfloat" if isinstance(hint, float) else "symbool" if expr in ("True", "False") else "symint"
        return SymSpec(expr=expr, hint=hint, kind=kind)
    m = _ANNOTATION.match(text)
    if not m or m.group("dtype") not in DTYPE_ABBRS:
        return None
    return TensorSpec(
        dtype=DTYPE_ABBRS[m.group("dtype")],
        shape=_parse_dims(m.group("shape")),
        stride=_parse_dims(m.group("stride")) if m.group("stride") is not None else None,
        device=m.group("device"),
    )


def _parse_dims(text: str) -> list[Dim]:
    dims: list[Dim] = []
    for part in _split_top_level(text):
        part = part.strip()
        if not part:
            continue
        # more digits than any real size stays text: eval_dim refuses it with a reason
        dims.append(int(part) if re.fullmatch(r"-?\d{1,19}", part) else part)
    return dims


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


