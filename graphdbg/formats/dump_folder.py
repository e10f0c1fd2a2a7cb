"""graphdbg's own dump folders: ``manifest.json``, ``graph.py``, ``inputs.safetensors``.

    >>> dump = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d")   # or a folder holding one dump
    >>> dump.contents.read(["input/l_x_"])["input/l_x_"].shape
    torch.Size([2, 8, 32])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphdbg.dump import Contents, Dump
from graphdbg.errors import DumpError
from graphdbg.formats import register
from graphdbg.judge.fatal_signal import FAULT_FILE, resolve_crash
from graphdbg.store.manifest import GRAPH, INPUTS, MANIFEST, MAX_GRAPH_BYTES, find_dumps, read_manifest
from graphdbg.store.safe_files import MAX_TEXT_BYTES, inside, read_inside

if TYPE_CHECKING:
    import torch


class DumpFolder(Contents):
    """A dump folder's graph (``graph.py``) and its stored tensors (``inputs.safetensors``)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]):
        # every file a manifest names stays inside its folder: no absolute path, no `..`, no link out
        super().__init__(folder / str(manifest["graph"].get("file", GRAPH)))
        self.folder, self.graph_name = folder, manifest["graph"].get("file", GRAPH)
        self.tensor_file = inside(folder, manifest.get("inputs_file", INPUTS))

    def text(self) -> str:
        if self._text is None:
            self._text = read_inside(self.folder, self.graph_name, max_bytes=MAX_GRAPH_BYTES, text=True)
        return self._text

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        from graphdbg.store.tensor_file import read_tensors  # torch: not for listing a dump

        return read_tensors(self.tensor_file, keys, device="cpu") if keys else {}

    def check(self) -> None:
        """The tensor file's size and header, without reading values."""
        # lazy: ls imports no torch (listing/)
        from graphdbg.store.tensor_header import check_tensor_file

        check_tensor_file(self.tensor_file)


def detect(path: Path) -> bool:
    return path.is_dir()


def load_dump_folder(path: Path) -> Dump:
    """A dump folder, or a folder holding exactly one dump (a fixture, a one-graph run)."""
    path = Path(path)
    if not (path / MANIFEST).exists():
        found = find_dumps(path)
        if len(found) == 1:
            path = found[0]
        elif len(found) > 1:
            raise DumpError(f"{path}: holds {len(found)} dumps; name one (graphdbg ls {path} lists them)")
    manifest = read_manifest(path)
    resolve_crash(path, manifest, _fault_text(path, manifest))  # an armed dump left by a process a signal killed
    return checked_dump(path, manifest)


def checked_dump(path: Path, manifest: dict[str, Any]) -> Dump:
    """The dump folder ``path`` with its ``manifest`` already read and checked (by
    ``load_dump_folder``, or by the process that started this one: an isolated replay's child
    would otherwise import pydantic and the schema's models again, 0.15 s of every child). Its
    tensor file is checked here."""
    path = Path(path)
    dump = Dump(path, manifest, DumpFolder(path, manifest))
    dump.check()
    return dump


def _fault_text(path: Path, manifest: dict[str, Any]) -> str:
    """An armed crash dump's ``fault.txt``, through the gate: a link, a FIFO or a device there is
    refused (one line, exit 2), a file larger than a fault report is refused."""
    failure = manifest.get("failure") or {}
    if failure.get("kind") != "crash" or failure.get("signature") or not os.path.lexists(path / FAULT_FILE):
        return ""
    data = read_inside(path, FAULT_FILE, max_bytes=MAX_TEXT_BYTES)
    return data.decode("utf-8", errors="replace")


register("dump", detect, load_dump_folder, priority=0)
