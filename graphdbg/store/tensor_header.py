"""The header of an inputs.safetensors, checked without torch or numpy: the untrusted file's
size, dtypes, shapes and offsets, by the rules safetensors' own reader applies (the tensors lie
end to end from the start of the data and cover all of it). Loading a dump folder
(``graphdbg.load``, ``ls``, the parent of an isolated replay) checks its tensor file here;
``store/tensor_file.py`` reads the values, through safetensors, which validates the header again.
``rewrite_header`` gives a checked file a new header (``redact``: its ``__metadata__``) with the
data bytes copied as they are.

    >>> check_tensor_file("dumps/rank0/g0-compile_error-1a2b3c4d/inputs.safetensors")["input/l_x_"]["shape"]
    [2, 8, 32]
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Callable

from graphdbg.errors import DumpError
from graphdbg.store.safe_files import Folder, open_stream

MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
MAX_TENSOR_ENTRIES = 200_000  # tensors in one file: a dump stores one per input and attribute
# Bytes per element of each safetensors dtype code (safetensors 0.8's table, and F8_E8M0); once torch
# is imported, store/tensor_file.py adds any other code the installed safetensors writes.
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E5M2FNUZ": 1, "F8_E4M3FNUZ": 1,
            "F8_E8M0": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8,
            "I64": 8, "F64": 8, "C64": 8}


def check_tensor_file(path: str | os.PathLike) -> dict[str, dict]:
    """Validate the header against the file before any tensor is read; returns the header.

    The file is untrusted: the header's size is bounded, every entry's dtype, shape and
    offsets are checked (dtype x shape == byte length, inside the file, no two tensors
    overlapping, no gap before or between them, no byte after the last), as safetensors'
    reader checks them (without importing numpy for it: 0.1 s of every command that loads a dump).
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
            if not raw.startswith(b"{"):
                raise DumpError(f"{path}: not a safetensors file (the header is not a JSON object)")
            header = json.loads(raw.decode("utf-8"))  # UTF-8 only, as safetensors reads it
    except DumpError:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise DumpError(f"{path}: not a safetensors file ({one_line(e)})") from e
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
    at, before = 0, None  # where the tensors so far end, and the last of them
    for start, end, name in spans:
        if start < at:
            raise DumpError(f"{path}: tensors {_short(before)} and {_short(name)} overlap")
        if start > at:
            raise DumpError(f"{path}: tensor {_short(name)} starts at data byte {start}; the data before it ends at {at}")
        at, before = end, name
    if at != data_size:
        raise DumpError(f"{path}: the tensors end at data byte {at}, the file's data has {data_size} bytes")
    return header


def _entry_span(path: Path, name: str, entry: object, data_size: int) -> tuple[int, int]:
    where = f"{path}: tensor {_short(name)}"
    if not isinstance(entry, dict):
        raise DumpError(f"{where}: not a tensor entry")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
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
    if numel * ITEMSIZE[dtype] != offsets[1] - offsets[0]:
        raise DumpError(f"{where}: {dtype}{shape} needs {numel * ITEMSIZE[dtype]} bytes, its offsets span {offsets[1] - offsets[0]}")
    return offsets[0], offsets[1]


def _short(name: str, limit: int = 60) -> str:
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def rewrite_header(path: str | os.PathLike, change: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """Give a tensor file a new header, ``change(header)``, its tensors' bytes unchanged: the
    file is checked first (``check_tensor_file``), the data copied after the new header in
    pieces (no tensor is loaded, nothing is unpickled), into a fresh file renamed over the old
    one (a link planted there is replaced, never written through). ``change`` may rename
    entries and edit ``__metadata__``; each entry keeps its dtype, shape and offsets. Returns
    whether the header changed."""
    path = Path(path)
    header = check_tensor_file(path)
    new = change(json.loads(json.dumps(header)))
    if new == header:
        return False
    entries = sorted((v["data_offsets"], v["dtype"], v["shape"]) for k, v in new.items() if k != "__metadata__")
    if entries != sorted((v["data_offsets"], v["dtype"], v["shape"]) for k, v in header.items() if k != "__metadata__"):
        raise DumpError(f"{path}: a header rewrite may rename tensors, never move or reshape them")
    blob = json.dumps(new, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open_stream(path, follow=False) as old, Folder.open(path.parent) as folder:
        (n,) = struct.unpack("<Q", old.read(8))
        old.seek(8 + n)
        tmp = f".{path.name[:80]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            with os.fdopen(folder.new_fd(tmp), "wb") as out:
                out.write(struct.pack("<Q", len(blob)))
                out.write(blob)
                while chunk := old.read(_COPY_CHUNK):
                    out.write(chunk)
            os.replace(tmp, path.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
        except BaseException:
            folder.remove(tmp)
            raise
    check_tensor_file(path)
    return True


_COPY_CHUNK = 64 << 20
