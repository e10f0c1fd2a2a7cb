"""Which ``--ops`` module would provide a custom op this machine lacks, when its package is here.

A graph from a server calls ``torch.ops.<ns>.<op>``; if a package named ``<ns>`` is importable
but the op is not registered (nothing imported the module that defines it), replay uses a
stand-in. The stand-in's note then names the module to pass to ``--ops``: the first file of
the package that spells ``"<ns>::<op>"``.

    >>> ops_module_for("torch.ops.mylib.scale.default")
    'mylib.kernels'
"""

from __future__ import annotations

import functools
import importlib.util
import os

_MAX_FILES = 5000  # a big package (transformers: ~2000 files) is read once, on a miss only


def ops_module_for(qualname: str) -> str | None:
    """The importable module that defines ``qualname``'s op, else its package when importable."""
    parts = qualname.removeprefix("torch.ops.").split(".")
    if len(parts) < 2:
        return None
    return _find(parts[0], parts[1])


@functools.lru_cache(maxsize=None)
def _find(namespace: str, op: str) -> str | None:
    try:
        spec = importlib.util.find_spec(namespace)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not roots:
        return namespace
    needle = f"{namespace}::{op}"
    seen = 0
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            for name in sorted(f for f in filenames if f.endswith(".py")):
                seen += 1
                if seen > _MAX_FILES:
                    return namespace
                path = os.path.join(dirpath, name)
                try:
                    with open(path, encoding="utf-8", errors="ignore") as f:
                        if needle not in f.read():
                            continue
                except OSError:
                    continue
                rel = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".")
                rel = rel.removesuffix(".__init__").removesuffix("__init__")
                return f"{namespace}.{rel}".rstrip(".")
    return namespace
