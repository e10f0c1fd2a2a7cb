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
from graphdbg.store.gate import Folder, open_stream

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
        raise DumpError(f"{path}: cannot read tensors ({_one_line(e)})") from e


MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
MAX_TENSOR_ENTRIES = 200_000  # tensors in one file: a dump stores one per input and attribute
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
             "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
# every dtype the writer may use (safetensors' own table: complex64, the FNUZ float8s, ...) is one the checker knows
_ITEMSIZE.update({code: torch.empty((), dtype=dtype).element_size() for dtype, code in SAFETENSORS_DTYPES.items()
                  if code not in _ITEMSIZE})


def check_tensor_file(path: str | os.PathLike) -> dict[str, dict]:
    """Validate the header against the file before any tensor is read; returns the header.

    The file is untrusted: the header's size is bounded, every entry's dtype, shape and
    offsets are checked (dtype x shape == byte length, inside the file, no two tensors
    overlapping), and then safetensors' own reader validates it too.
    """

    path = Path(path)
    try:
        with open_stream(path, follow=False) as f:  # the file the gate checked, no link followed
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise DumpError(f"{path}: truncated (no safetensors header)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise DumpError(f"{path}: safetensors header of {n} bytes is over the {MAX_HEADER_BYTES} byte limit")
            if n > size - 8:
                raise DumpError(f"{path}: truncated (header claims {n} bytes, file has {size - 8})")
            raw = f.read(n)
            if raw.count(b"data_offsets") > MAX_TENSOR_ENTRIES:  # before parsing: a million entries cost minutes
                raise DumpError(f"{path}: more than {MAX_TENSOR_ENTRIES} header entries, more than graphdbg reads")
            header = json.loads(raw)
    except DumpError:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise DumpError(f"{path}: not a safetensors file ({_one_line(e)})") from e
    if not isinstance(header, dict):
        raise DumpError(f"{path}: not a safetensors file (the header is not a JSON object)")
    if len(header) > MAX_TENSOR_ENTRIES + 1:  # checked before any entry is looked at
        raise DumpError(f"{path}: {len(header)} header entries, more than the {MAX_TENSOR_ENTRIES} graphdbg reads")
    data_size = size - 8 - n
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise DumpError(f"{path}: __metadata__ must map names to strings")
            continue
        spans.append((*_entry_span(path, name, entry, data_size), name))
    spans.sort()
    for (start, end, name), (next_start, _, next_name) in zip(spans, spans[1:]):
        if next_start < end:
            raise DumpError(f"{path}: tensors {_short(name)} and {_short(next_name)} overlap")
    _check_with_safetensors(path)
    return header


def _entry_span(path: Path, name: str, entry: object, data_size: int) -> tuple[int, int]:
    where = f"{path}: tensor {_short(name)}"
    if not isinstance(entry, dict):
        raise DumpError(f"{where}: not a tensor entry")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _ITEMSIZE:
        raise DumpError(f"{where}: unknown dtype {_short(repr(dtype))}")
    if not isinstance(shape, list) or len(shape) > 64 or not all(type(d) is int and 0 <= d < (1 << 62) for d in shape):
        raise DumpError(f"{where}: shape must be a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise DumpError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
    if offsets[1] > data_size:
        raise DumpError(f"{path}: truncated (tensor {_short(name)} ends at byte {offsets[1]}, the data has {data_size})")
    numel = 1
    for d in shape:
        numel *= d
    if numel * _ITEMSIZE[dtype] != offsets[1] - offsets[0]:
        raise DumpError(f"{where}: {dtype}{shape} needs {numel * _ITEMSIZE[dtype]} bytes, its offsets span {offsets[1] - offsets[0]}")
    return offsets[0], offsets[1]


def _check_with_safetensors(path: Path) -> None:
    """safetensors' own validation (it maps the file; nothing is read until a tensor is asked for)."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            f.keys()
    except Exception as e:
        raise DumpError(f"{path}: not a valid safetensors file ({_one_line(e)})") from None


def _short(name: str, limit: int = 60) -> str:
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
