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
from safetensors import safe_open

from graphdbg.errors import DumpError
from graphdbg.store.safe_files import Folder
from graphdbg.store.tensor_header import ITEMSIZE, MAX_HEADER_BYTES, MAX_TENSOR_ENTRIES, check_tensor_file, one_line

__all__ = ["MAX_HEADER_BYTES", "MAX_TENSOR_ENTRIES", "SAFETENSORS_DTYPES", "check_tensor_file", "read_tensors",
           "storable", "write_tensors"]

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
    with _new_file(Path(path)) as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors.values():
            _write_tensor_bytes(f, t)
    return 8 + len(blob) + offset


def _new_file(path: Path):
    """A new file, made the way the gate's writer makes one (``O_EXCL | O_NOFOLLOW`` in a folder
    opened once): a link planted at ``path`` is replaced, never written through."""

    with Folder.open(path.parent) as folder:
        if os.path.lexists(path):
            folder.remove(path.name)
        return os.fdopen(folder.new_fd(path.name), "wb")


def _write_tensor_bytes(f, t: torch.Tensor) -> None:
    if t.numel() == 0:
        return
    flat = t.detach().reshape(-1) if t.is_contiguous() else t.detach().contiguous().reshape(-1)
    if flat.numel() == 1 and flat.stride(-1) != 1:  # one element keeps any stride, "contiguous" or not
        flat = flat.as_strided((1,), (1,))
    # Copied a chunk at a time, never viewed in place: numpy marks a storage it views as not
    # resizable, and the program goes on using the tensor (FSDP2 frees and regrows its
    # parameters' storage with resize_, which would then fail).
    per = max(1, _WRITE_CHUNK // flat.element_size())
    for start in range(0, flat.numel(), per):
        chunk = flat[start : start + per]
        f.write(_as_bytes(chunk.cpu() if chunk.device.type != "cpu" else chunk.clone()))


def _as_bytes(flat: torch.Tensor) -> memoryview:
    # numpy has no bfloat16 or float8: look at the bytes instead of the values.
    return memoryview(flat.view(torch.uint8).numpy())


def read_tensors(path: str | os.PathLike, names: Iterable[str] | None = None, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load some or all tensors, straight to ``device``; a damaged file is a DumpError."""
    path = Path(path)
    check_tensor_file(path)
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
        raise DumpError(f"{path}: cannot read tensors ({one_line(e)})") from e

# every dtype the writer may use (safetensors' own table: complex64, the FNUZ float8s, ...) is one the checker knows
ITEMSIZE.update({code: torch.empty((), dtype=dtype).element_size() for dtype, code in SAFETENSORS_DTYPES.items()
                 if code not in ITEMSIZE})
