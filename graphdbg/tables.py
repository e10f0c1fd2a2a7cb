"""The pandas tables of a dump, typed: numbers as numbers, shapes as tuples, and which node failed.

``Dump.nodes()`` and ``Dump.inputs_table()`` build their rows and hand them here, so that
``.describe()`` counts the statistics and a shape can be compared with ``tensor.shape``:

    >>> t = dump.inputs_table()
    >>> t["mean"].dtype, t.loc[0, "shape"]
    (dtype('float64'), (2, 8, 32))
    >>> nodes = dump.nodes(); nodes[nodes.failed]
"""

from __future__ import annotations

from typing import Any

from graphdbg.errors import GraphdbgError
from graphdbg.judge.failing_node import node_of_traceback
from graphdbg.store.safe_files import inside

NUMBER_COLUMNS = ("min", "max", "mean", "std")


def shape_tuple(text: Any) -> Any:
    """``"[2, s0, 32]"`` -> ``(2, 's0', 32)``; a symbolic scalar's expression stays as it is."""
    if not isinstance(text, str) or not text.startswith("["):
        return text
    inner = text[1:-1].strip()
    if not inner:
        return ()
    return tuple(int(d) if d.strip().lstrip("-").isdigit() else d.strip() for d in inner.split(","))


def failing_node_names(dump: Any) -> set[str]:
    """The nodes a dump says failed: the manifest's ``failure.node`` when capture knew it, else
    the node fx's generated code was running in the recorded traceback, else the nodes whose
    target the signature names (``... @ torch._C._nn.linear``), when it names one node only;
    empty when the dump doesn't say. Only nodes of the dump's graph count."""
    from graphdbg.graph.hashing import target_name  # this module loads without torch (fast CLI start); this brings torch in

    failure = dump.manifest.failure
    computing = {n.name: n for n in dump.printed.graph.nodes if n.op not in ("placeholder", "output")}
    for name in (failure.node, node_of_traceback((failure.exception.traceback if failure.exception else None) or "")):
        if isinstance(name, str) and name in computing:
            return {name}
    target = (dump.signature or "").partition(" @ ")[2].strip()
    if not target:
        return set()
    names = {name for name, n in computing.items() if target_name(n) == target}
    return names if len(names) == 1 else set()


STATS_READ_LIMIT = 256 << 20  # bytes of stored values read to fill the statistics of one table


def stored_stats(dump: Any) -> list[dict[str, float] | None]:
    """min/max/mean/std of each stored input (None where not stored or not numeric): the
    manifest keeps statistics only for the inputs it could not store. Reads at most
    ``STATS_READ_LIMIT`` bytes, one tensor at a time."""
    import torch  # this module loads without torch (fast CLI start); this brings torch in

    from graphdbg.store.tensor_file import read_tensors  # this module loads without torch (fast CLI start); this brings torch in

    entries = dump.manifest_data.get("inputs") or []
    found: list[dict[str, float] | None] = [None] * len(entries)
    try:  # through the gate: the tensor file the manifest names, inside the dump

        path = inside(dump.path, dump.manifest.inputs_file) if dump.path.is_dir() else None
    except GraphdbgError:
        path = None
    if path is None:
        return found
    budget = STATS_READ_LIMIT
    for i, d in enumerate(entries):
        key = d.get("stored")
        if d.get("kind") != "tensor" or not isinstance(key, str) or d.get("stats"):
            continue
        try:
            t = read_tensors(path, [key])[key]
        except Exception:  # a damaged file is reported by check(); the table stays readable
            return found
        budget -= t.numel() * t.element_size()
        if budget < 0:
            break
        if t.numel() == 0 or t.is_complex() or t.dtype == torch.bool:
            continue
        v = t.detach().to(torch.float64)
        found[i] = {"min": v.min().item(), "max": v.max().item(), "mean": v.mean().item(),
                    "std": v.std().item() if v.numel() > 1 else 0.0}
    return found


def typed_table(df: Any, dump: Any = None) -> Any:
    """``df`` with statistics as float64, shapes as tuples; given the dump, a node table gets a
    boolean ``failed`` column and an input table the statistics of its stored values."""
    import pandas as pd  # pandas costs about 1 s: imported only when needed

    df = df.copy()
    if dump is not None and "stored" in df.columns and len(df) == len(dump.manifest.inputs):
        for i, stats in enumerate(stored_stats(dump)):
            if stats is not None:
                for col, value in stats.items():
                    df.at[i, col] = value
    for col in NUMBER_COLUMNS:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    if "shape" in df.columns:
        df["shape"] = df["shape"].map(shape_tuple).astype(object)
    if dump is not None and "op" in df.columns:
        failed = failing_node_names(dump)
        df["failed"] = df["name"].isin(failed).astype(bool)
    return df
