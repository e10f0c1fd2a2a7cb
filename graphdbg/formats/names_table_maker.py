"""The names table ``formats/names_table.py`` reads, made with torch by the full reader's own
rules (the parser's resolution, the allow-list's ``refusal`` and ``check_value``,
``stand_ins.resolver`` and ``construct_of``): ``python -m graphdbg.formats.names_table_maker``
rewrites ``names_table-<torch version>.json`` for the installed torch. ``ls`` never imports this module.
"""

from __future__ import annotations

import builtins
import json
import math
import operator
from pathlib import Path
from typing import Any

import torch

from graphdbg.formats.names_table import source_stamp, table_for, torch_version
from graphdbg.graph.allow_list import (
    ALLOWED_ATTRIBUTES,
    ALLOWED_BUILTINS,
    FUNCTION_MODULES,
    NAMED_FUNCTIONS,
    allow_target,
    allowed_methods,
    check_value,
    refusal,
    walk_torch,
)
from graphdbg.graph.parser import CONSTANT_NAMES, Refused, mangled_name, resolve_name
from graphdbg.rebuild.stand_ins import MissingOp, construct_of, resolver


def _candidates() -> list[str]:
    out: set[str] = {"device", *ALLOWED_BUILTINS, *CONSTANT_NAMES, *NAMED_FUNCTIONS}
    out.update(f"builtins_{n}" for n in ALLOWED_BUILTINS)
    for path in ("torch", "torch.cuda", "torch.nn", *FUNCTION_MODULES):
        mod = torch if path == "torch" else walk_torch(path)
        out.update(f"{path}.{n}" for n in dir(mod or object()) if not n.startswith("__"))
    for root, mod in (("operator", operator), ("_operator", operator), ("math", math)):
        out.update(f"{root}.{n}" for n in dir(mod) if not n.startswith("_"))
    out.update(mangled_name(q) for q in [*NAMED_FUNCTIONS, *(q for q in out if q.startswith(("math.", "operator.")))])
    for schema in torch._C._jit_get_all_schemas():
        ns, _, name = schema.name.partition("::")
        out.add(f"torch.ops.{ns}.{name}")
        out.add(f"torch.ops.{ns}.{name}.{schema.overload_name or 'default'}")
    hops = Path(torch.__file__).parent / "_higher_order_ops"
    out.update(f"torch.ops.higher_order.{p.stem}" for p in hops.glob("*.py") if not p.stem.startswith("_"))
    out.update(f"torch.ops.higher_order.{n}" for n in torch._ops._higher_order_ops)
    out.update(("torch.ops.higher_order.triton_kernel_wrapper_mutation", "torch.ops.higher_order.triton_kernel_wrapper_functional"))
    return sorted(out)


def _verdict(qualname: str, hook: Any) -> str | None:
    """The flags the full reader's rules give ``qualname`` (as ``_Reader.resolve`` and
    ``_ForwardReader._create`` judge it), or None where it doesn't resolve."""
    try:
        target = resolve_name(qualname)
    except Refused:
        return "r"
    except Exception:  # LookupError, or an import a walk made that failed
        target = hook(qualname) if "." in qualname else None
        if target is None:
            return None
        allow_target(target)
    flags = ("c" if callable(target) and refusal(target) is None else "") + ("v" if check_value(target) is None else "")
    flags += "g" if target is builtins.getattr else ""
    flags += "k" if isinstance(target, (torch.dtype, torch.layout, torch.memory_format, int, float, bool, str)) else ""
    flags += "m" if isinstance(target, MissingOp) else ""
    try:
        construct = construct_of(target) if "c" in flags else None
    except Exception:
        construct = None
    name = getattr(target, "__name__", None) if callable(target) else None
    name = name if isinstance(name, str) and name != qualname.rsplit(".", 1)[-1] else ""
    return f"{flags}|{construct or ''}|{name}".rstrip("|")


def build() -> dict[str, Any]:
    """The table for the installed torch (imports torch, the parser and the stand-ins)."""
    hook = resolver()
    entries = {}
    for q in _candidates():
        v = _verdict(q, hook)
        if v is not None:
            entries[q] = v or "-"
    namespaces = sorted({s.name.split("::")[0] for s in torch._C._jit_get_all_schemas()})
    return {"stamp": source_stamp(), "names": entries, "methods": sorted(allowed_methods()),
            "op_namespaces": namespaces, "attributes": sorted(ALLOWED_ATTRIBUTES)}


if __name__ == "__main__":
    table = build()
    path = table_for(torch_version())
    path.write_text(json.dumps(table, separators=(",", ":"), sort_keys=True))
    print(f"{path}: {len(table['names'])} names, stamp {table['stamp']}")
