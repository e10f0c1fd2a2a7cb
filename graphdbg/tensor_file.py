"""inputs.safetensors: written tensor by tensor, read lazily.

The writer streams each tensor's bytes straight from its memory (one device-to-host copy at
a time for GPU tensors), so dumping 8 GB of Mamba caches needs no second 8 GB in RAM. The
file is plain safetensors: ``safetensors.safe_open`` reads it, and so does anything else.

    >>> write_tensors("x.safetensors", {"a": torch.ones(2)})
    >>> read_tensors("x.safetensors", ["a"])["a"]
    tensor([1., 1.])
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from graphdbg.errors import DumpError

SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
}
for _name, _code in (("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64"),
                     ("float8_e5m2", "F8_E5M2"), ("float8_e4m3fn", "F8_E4M3")):
    if hasattr(torch, _name):
        SAFETENSORS_DTYPES[getattr(torch, _name)] = _code
try:  # safetensors' own table (complex64, the FNUZ float8s, ...) wins over ours
    from safetensors.torch import _TYPES as _SAFETENSORS_TYPES

    SAFETENSORS_DTYPES.update({dtype: code for code, dtype in _SAFETENSORS_TYPES.items()})
except ImportError:
    pass

_WRITE_CHUNK = 64 << 20  # bytes per write for host tensors; device tensors copy over in pieces this big


def storable(t: torch.Tensor) -> bool:
    return t.dtype in SAFETENSORS_DTYPES and t.layout == torch.strided and type(t) in (torch.Tensor, torch.nn.Parameter)


def write_tensors(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> int:
    """Write ``tensors`` as safetensors; returns bytes written. Tensors must be ``storable``."""
    header: dict[str, object] = {}
    offset = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = dict(metadata)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors.values():
            _write_tensor_bytes(f, t)
    return 8 + len(blob) + offset


def _write_tensor_bytes(f, t: torch.Tensor) -> None:
    if t.numel() == 0:
        return
    flat = t.detach().reshape(-1) if t.is_contiguous() else t.detach().contiguous().reshape(-1)
    if flat.numel() == 1 and flat.stride(-1) != 1:  # one element keeps any stride, "contiguous" or not
        flat = flat.as_strided((1,), (1,))
    if flat.device.type != "cpu":
        per = max(1, _WRITE_CHUNK // flat.element_size())
        for start in range(0, flat.numel(), per):
            f.write(_as_bytes(flat[start : start + per].cpu()))
        return
    f.write(_as_bytes(flat))


def _as_bytes(flat: torch.Tensor) -> memoryview:
    # numpy has no bfloat16 or float8: look at the bytes instead of the values.
    return memoryview(flat.view(torch.uint8).numpy())


def read_tensors(path: str | os.PathLike, names: Iterable[str] | None = None, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load some or all tensors, straight to ``device``; a damaged file is a DumpError."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            keys = list(f.keys())
            wanted = keys if names is None else list(names)
            missing = [n for n in wanted if n not in keys]
            if missing:
                raise DumpError(f"{path}: tensor {missing[0]!r} is not in the file")
            return {n: f.get_tensor(n) for n in wanted}
    except DumpError:
        raise
    except Exception as e:  # safetensors raises its own error types for truncation and bad headers
        raise DumpError(f"{path}: cannot read tensors ({_one_line(e)})") from e


def check_tensor_file(path: str | os.PathLike) -> dict[str, dict]:
    """Validate the header and the file size without reading data; returns the header."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise DumpError(f"{path}: truncated (no safetensors header)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise DumpError(f"{path}: truncated (header claims {n} bytes, file has {size - 8})")
            header = json.loads(f.read(n))
    except DumpError:
        raise
    except (OSError, ValueError) as e:
        raise DumpError(f"{path}: not a safetensors file ({_one_line(e)})") from e
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise DumpError(f"{path}: truncated ({size} bytes, tensors need {8 + n + end})")
    return header


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
