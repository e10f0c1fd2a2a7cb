"""What each name a printed graph may call resolves to, known without torch: the table
``formats/scan.py`` judges a file's names by, so that ``graphdbg ls`` reads printed graphs
without importing torch. It is made with torch by the code the full reader runs
(``names_table_maker``: ``python -m graphdbg.formats.names_table_maker`` rewrites the installed
torch's) and kept beside this module, one file per torch release graphdbg is tested on
(``names_table-<torch version>.json``), and used only for the torch and sources it was made from
(its ``stamp``). A name it doesn't hold, or no table for this torch, sends the file to the full reader.

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


def table_for(installed: str) -> Path:
    """The file of the table made with torch ``installed`` (``2.13.0+cpu``, ``2.11.0+cu130``)."""
    return Path(__file__).with_name(f"names_table-{re.sub(r'[^0-9A-Za-z.+_-]', '_', installed)}.json")


OPS_ENV = "GRAPHDBG_OPS"  # as graph/allow_list.OPS_ENV: registered op modules change what resolves
_PACKAGE = Path(__file__).resolve().parent.parent
# the sources whose rules the table holds
_JUDGES = ("graph/allow_list.py", "graph/parser.py", "rebuild/stand_ins.py", "formats/names_table_maker.py")


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


def source_stamp(installed: str | None = None) -> str:
    """The installed torch's version (or ``installed``) and a hash of the sources that judge names."""
    installed = installed or torch_version()
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
        data = json.loads(table_for(torch_version()).read_text())
    except (OSError, ValueError):
        return None
    return NameTable(data) if data.get("stamp") == source_stamp() else None


class NameTable:
    def __init__(self, data: dict[str, Any]):
        self.entries: dict[str, str] = data["names"]
        self.methods: frozenset[str] = frozenset(data["methods"])
        self.op_namespaces: frozenset[str] = frozenset(data["op_namespaces"])
        self.attributes: frozenset[str] = frozenset(data["attributes"])

    def get(self, qualname: str) -> tuple[str, str | None, str] | None:
        """``(flags, construct, __name__)`` for a name, or None where the table can't say."""
        entry = self.entries.get(qualname) or self._missing_op(qualname)  # an entry is never empty (``-``: no flags)
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
