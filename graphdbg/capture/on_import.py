"""Call a function on a module right after it is imported, without importing it first.

Capture watches torch's entry points this way: a process that never imports torch (or
Inductor) pays nothing, and one that does gets them patched before its code can bind them by
name (``from torch._inductor.compile_fx import compile_fx``).

    >>> watch("nested", wants=lambda name: name in PATCHES, then=apply)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable


class PatchOnImport(importlib.abc.MetaPathFinder):
    """A finder that lets the normal one load a module, then calls ``then(name, module)``."""

    def __init__(self, key: str, wants: Callable[[str], bool], then: Callable[[str, Any], None]):
        self.key, self.wants, self.then = key, wants, then

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not self.wants(name):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            self.then(name, module)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def watch(key: str, wants: Callable[[str], bool], then: Callable[[str, Any], None]) -> None:
    """Put a ``PatchOnImport`` named ``key`` first on ``sys.meta_path``, once per key."""
    if not any(isinstance(f, PatchOnImport) and f.key == key for f in sys.meta_path):
        sys.meta_path.insert(0, PatchOnImport(key, wants, then))
