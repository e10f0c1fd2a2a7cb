"""Cheap looks at a file's first bytes, without torch: what ``ls`` uses to pick the files worth
reading (``ls`` of a folder of dumps imports no torch at all; listing/)."""

from __future__ import annotations

from pathlib import Path

from graphdbg.errors import GraphdbgError
from graphdbg.store.safe_files import read_head


def looks_like_printed_graph(path: Path) -> bool:
    """A cheap check for listing folders: a ``.py`` file whose first code line is a
    ``class ...(torch.nn.Module):``, as ``print_readable()`` writes it (comments may come first).
    A module with imports or a docstring first (a program, a minifier repro) is not one."""
    if path.suffix != ".py":
        return False
    try:
        head = read_head(path, 4096)
    except (OSError, GraphdbgError):
        return False
    for raw in head.splitlines():
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        return line.startswith(b"class ") and b"(torch.nn.Module)" in line
    return False


def may_be_torch_repro(path: Path) -> bool:
    """PyTorch's minifier ``repro.py`` or Inductor's ``fx_graph_runnable.py`` may be this file:
    it defines ``load_args`` and ``class Repro`` near its start (torch_repro.detect_format decides)."""
    try:
        head = read_head(path, 1 << 18, follow=False)
    except (OSError, GraphdbgError):
        return False
    return b"def load_args(" in head and b"class Repro(" in head
