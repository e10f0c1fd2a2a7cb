"""What each name a printed graph may call resolves to, known without torch: the table
``formats/scan.py`` judges a file's names by, so that ``graphdbg ls`` reads printed graphs
without importing torch. It is made with torch by the code the full reader runs (the parser's
resolution, the allow-list's ``refusal`` and ``check_value``, ``stand_ins.resolver`` and
``construct_of``) and kept beside this module (``python -m graphdbg.formats.names_table``
rewrites it), and used only for the torch and sources it was made from (its ``stamp``). A name it
doesn't hold, or no table at all, sends the file to the full reader.

An entry is flags, then after ``|`` the construct it stands for (if any) and its ``__name__``
where that is not the name's last part (fx names nodes by it): ``c`` a call target the
allow-list accepts, ``v`` a value a graph argument may hold, ``g`` the builtin ``getattr`` (the
parser checks its arguments), ``k`` a constant (dtype, layout, ...), ``m`` a stand-in for an op
this machine lacks (``MissingOp``), ``r`` refused; ``-`` none of these.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("names_table.json")
OPS_ENV = "GRAPHDBG_OPS"  # as graph/allow_list.OPS_ENV: registered op modules change what resolves
_PACKAGE = Path(__file__).resolve().parent.parent
# the sources whose rules the table holds
_JUDGES = ("graph/allow_list.py", "graph/parser.py", "rebuild/stand_ins.py", "formats/names_table.py")


def torch_version() -> str:
    """The installed torch's version without importing torch (2 s) or ``importlib.metadata``
    (0.04 s, a third of a cached ``ls``): its ``torch/version.py``, read as text."""
    try:
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            text = (Path(spec.origin).parent / "version.py").read_text(errors="replace")[:4096]
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            if m:
                return m[1]
    except (OSError, ImportError, ValueError):
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version  # lazy: only where version.py didn't say

        return version("torch")
    except PackageNotFoundError:  # pragma: no cover - torch is a dependency
        return "?"


def source_stamp() -> str:
    """The installed torch's version and a hash of the sources that judge names."""
    installed = torch_version()
    h = hashlib.sha256(installed.encode())
    for rel in _JUDGES:
        h.update((_PACKAGE / rel).read_bytes())
    return f"{installed}:{h.hexdigest()[:16]}"


@functools.lru_cache(maxsize=1)
def names() -> NameTable | None:
    """The table for this torch and these sources, or None (then every file is read in full)."""
    if os.environ.get(OPS_ENV, "").strip():
        return None  # the user's op modules: what resolves depends on importing them
    try:
        data = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return None
    if data.get("stamp") != source_stamp():
        return None
    return NameTable(data)


class NameTable:
    def __init__(self, data: dict[str, Any]):
        self.entries: dict[str, str] = data["names"]
        self.methods: frozenset[str] = frozenset(data["methods"])
        self.op_namespaces: frozenset[str] = frozenset(data["op_namespaces"])
        self.attributes: frozenset[str] = frozenset(data["attributes"])

    def get(self, qualname: str) -> tuple[str, str | None, str] | None:
        """``(flags, construct, __name__)`` for a name, or None where the table can't say."""
        entry = self.entries.get(qualname)
        if entry is None:
            entry = self._missing_op(qualname)
        if entry is None:
            return None
        flags, construct, name = (entry.split("|") + ["", ""])[:3]
        return flags, construct or None, name or qualname.rsplit(".", 1)[-1]

    def _missing_op(self, qualname: str) -> str | None:
        # torch.ops.<ns>.<op>[.<overload>] this torch lacks: the full reader's resolver makes it
        # a MissingOp stand-in for torch.ops.<ns>.<op>, whatever the namespace.
        parts = qualname.split(".")
        if parts[:2] != ["torch", "ops"] or len(parts) not in (4, 5) or parts[2] == "higher_order":
            return None
        if not all(p.isidentifier() and not (p.startswith("__") and p.endswith("__")) for p in parts):
            return None
        packet = self.entries.get(".".join(parts[:4]))
        if packet is not None and (len(parts) == 4 or "c" not in packet):
            return None  # an op that exists has its own entry; a refused one's overloads are not judged here
        op = ".".join(parts[:4])
        return f"cvm|{op}|" + re.sub(r"\W+", "_", op.removeprefix("torch.ops."))  # stand_ins.MissingOp's __name__


# Making the table (with torch) ------------------------------------------------------------

def _candidates() -> list[str]:
    # lazy: making the table needs torch; reading it must not
    import math
    import operator

    import torch

    from graphdbg.graph.allow_list import ALLOWED_BUILTINS, FUNCTION_MODULES, NAMED_FUNCTIONS, walk_torch
    from graphdbg.graph.parser import CONSTANT_NAMES, mangled_name

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
    # lazy: making the table needs torch; reading it must not
    import builtins

    import torch

    from graphdbg.graph.allow_list import allow_target, check_value, refusal
    from graphdbg.graph.parser import Refused, resolve_name
    from graphdbg.rebuild.stand_ins import MissingOp, construct_of

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
    # lazy: making the table needs torch; reading it must not
    import torch

    from graphdbg.graph.allow_list import ALLOWED_ATTRIBUTES, allowed_methods
    from graphdbg.rebuild.stand_ins import resolver

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
    TABLE.write_text(json.dumps(table, separators=(",", ":"), sort_keys=True))
    print(f"{TABLE}: {len(table['names'])} names, stamp {table['stamp']}")
