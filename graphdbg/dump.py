"""Dump: a dump folder on disk, read without executing anything from it.

    >>> dump = graphdbg.load("dumps/rank5/g0-compile_error-1a2b3c4d")
    >>> dump.failure_kind, dump.error_type, dump.rank
    ('compile_error', 'NotImplementedError', 5)
    >>> dump.nodes().head()        # name, op, target, dtype, shape, source, module
    >>> case = dump.case()         # GraphModule + inputs, on cuda:5 if this machine has it, else CPU

The graph comes from parsing ``graph.py`` (``printed_graph``), tensors from
``inputs.safetensors`` (``tensor_file``); the manifest is JSON. No pickle, no exec.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from graphdbg.display import Displayed
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.graph_hash import target_name
from graphdbg.manifest import GRAPH, INPUTS
from graphdbg.specs import SymSpec, TensorSpec
from graphdbg.tensor_file import check_tensor_file, read_tensors


class Dump(Displayed):
    """One captured failure: manifest, printed graph, stored tensors."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest

    # What failed, where --------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.manifest["id"]

    @property
    def rank(self) -> int:
        return int(self.manifest.get("dist", {}).get("rank", 0))

    @property
    def world_size(self) -> int:
        return int(self.manifest.get("dist", {}).get("world_size", 1))

    @property
    def backend(self) -> str:
        return str(self.manifest.get("backend", "?"))

    @property
    def failure_kind(self) -> str:
        return self.manifest["failure"].get("kind", "?")

    @property
    def exception(self) -> dict[str, Any]:
        return self.manifest["failure"].get("exception") or {}

    @property
    def error_type(self) -> str | None:
        return self.exception.get("type") or ("AccuracyError" if self.failure_kind == "accuracy" else None)

    @property
    def message(self) -> str:
        return self.exception.get("message") or self.manifest["failure"].get("message", "")

    @property
    def signature(self) -> str | None:
        return self.manifest["failure"].get("signature")

    @property
    def graph_hash(self) -> str:
        return self.manifest["graph"].get("hash", "")

    @property
    def node_count(self) -> int:
        return int(self.manifest["graph"].get("nodes", 0))

    @property
    def captured_device(self) -> torch.device:
        for d in self.manifest.get("inputs", []):
            if d.get("kind") == "tensor" and str(d.get("device", "cpu")).startswith("cuda"):
                return torch.device(d["device"])
        return torch.device("cpu")

    # The graph --------------------------------------------------------------------
    @property
    def source(self) -> str:
        path = self.path / self.manifest["graph"].get("file", GRAPH)
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise DumpError(f"{path}: cannot read the graph ({type(e).__name__})") from e

    @functools.cached_property
    def printed(self):
        from graphdbg.graph_parser import parse_printed_graph

        from graphdbg.rebuild.stand_ins import resolver

        # ops this machine lacks (a custom op of the user's server) parse into named stand-ins
        return parse_printed_graph(self.source, filename=str(self.path / GRAPH), resolve=resolver())

    def check(self) -> None:
        """Validate what can be validated without loading values: the tensor file's size and header."""
        check_tensor_file(self.path / self.manifest.get("inputs_file", INPUTS))

    def default_device(self) -> torch.device:
        dev = self.captured_device
        if dev.type == "cuda" and torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count():
            return dev
        return torch.device("cpu")

    def resolve_device(self, device: str | torch.device | None) -> torch.device:
        try:
            dev = torch.device(device) if device is not None else self.default_device()
        except RuntimeError as e:
            raise GraphdbgError(f"{device!r} is not a device") from e
        if dev.type == "cuda" and not (torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count()):
            raise GraphdbgError(f"device {dev} is not available on this machine (captured on {self.captured_device})")
        if dev.type not in ("cpu", "cuda"):
            raise GraphdbgError(f"device {dev} is not supported for replay")
        return dev

    def case(self, device: str | torch.device | None = None, *, seed: int = 0):
        """The graph and its inputs on ``device`` (default: the capture device if present, else CPU)."""
        from graphdbg.case import Case, lift_external_objects, retarget_devices
        from graphdbg.rebuild.inputs import InputBuilder, symbol_env

        dev = self.resolve_device(device)
        tensor_path = self.path / self.manifest.get("inputs_file", INPUTS)
        descs = self.manifest["inputs"]
        builder = InputBuilder(dev, lambda keys: read_tensors(tensor_path, keys, device="cpu"), symbol_env(descs), seed=seed)
        printed = self.printed
        placeholders = [n for n in printed.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(descs):
            raise DumpError(f"{self.path}: graph.py has {len(placeholders)} inputs, the manifest describes {len(descs)}")
        inputs = builder.build_all(descs, names=[n.name for n in placeholders])

        attr_descs = self.manifest.get("attrs", {})
        stored_attrs = [d["stored"] for d in attr_descs.values() if d.get("stored")]
        attr_tensors = read_tensors(tensor_path, stored_attrs) if stored_attrs else {}
        attr_values = {q: builder.build(q, d, attr_tensors) for q, d in attr_descs.items()}
        gm = printed.to_module(attr_values)

        externals: dict[int, Any] = {}
        for d in self.manifest.get("external_objects", []):
            if d.get("kind") not in ("missing", None):
                externals[int(d["index"])] = builder.build(f"external object {d['index']}", d, {})
        inputs += lift_external_objects(gm, externals)
        stand_ins = list(builder.stand_ins)
        if not _distributed():
            # one rank on its own: collectives act as on a world of one, missing ops are stood in for
            from graphdbg.rebuild.stand_ins import install_stand_ins

            stand_ins += install_stand_ins(gm, dev, zero_uninitialized=False)
        moved = retarget_devices(gm, self.captured_device, dev)
        case = Case(gm=gm, inputs=inputs, device=dev, stand_ins=stand_ins, dump=self)
        if dev != self.captured_device:
            from graphdbg.rebuild.inputs import StandIn

            what = f"captured on {self.captured_device}, replayed on {dev}"
            if moved:
                what += f"; device literals moved in {', '.join(moved[:5])}" + (" ..." if len(moved) > 5 else "")
            case.stand_ins.append(StandIn("graph", "device", what))
        return case

    # Tables -----------------------------------------------------------------------
    def nodes(self):
        """A pandas DataFrame, one row per node: name, op, target, dtype, shape, source, code, module."""
        import pandas as pd

        info = self.manifest["graph"].get("node_info", {})
        rows = []
        for node in self.printed.graph.nodes:
            spec = node.meta.get("graphdbg_spec")
            src = (node.meta.get("graphdbg_source") or {}) if node.op not in ("placeholder", "output") else {}
            rows.append({
                "name": node.name,
                "op": node.op,
                "target": target_name(node),
                "dtype": spec.dtype if isinstance(spec, TensorSpec) else ("sym" if isinstance(spec, SymSpec) else None),
                "shape": _shape_text(spec),
                "source": f"{src['file']}:{src['line']}" if src.get("file") else None,
                "code": src.get("code"),
                "module": info.get(node.name, {}).get("module"),
            })
        from graphdbg.tables import typed_table

        return typed_table(pd.DataFrame(rows, columns=["name", "op", "target", "dtype", "shape", "source", "code", "module"]).astype(object), self)

    def inputs_table(self):
        """A pandas DataFrame of the inputs: name, kind, dtype, shape, stored, and statistics."""
        import pandas as pd

        rows = []
        for d in self.manifest["inputs"]:
            stats = d.get("stats") or {}
            rows.append({
                "name": d.get("node") or d.get("name"),
                "kind": d.get("kind"),
                "dtype": d.get("dtype"),
                "shape": _shape_text(TensorSpec.from_dict(d)) if d.get("kind") == "tensor" else None,
                "device": d.get("device"),
                "value": _scalar_text(d),
                "stored": bool(d.get("stored")) if d.get("kind") == "tensor" else None,
                "min": stats.get("min"),
                "max": stats.get("max"),
                "mean": stats.get("mean"),
                "std": stats.get("std"),
            })
        from graphdbg.tables import typed_table

        return typed_table(pd.DataFrame(rows).astype(object), self)

    def summary(self) -> dict[str, Any]:
        """The stable JSON row used by ``graphdbg ls --json``."""
        return {
            "path": str(self.path),
            "rank": self.rank,
            "world_size": self.world_size,
            "id": self.id,
            "nodes": self.node_count,
            "kind": self.failure_kind,
            "backend": self.backend,
            "error_type": self.error_type,
            "message": (self.message.strip().splitlines() or [""])[0],
            "signature": self.signature,
            "graph_hash": self.graph_hash,
        }

    def __repr__(self) -> str:
        return f"Dump({str(self.path)!r}, {self.failure_kind}, {self.error_type})"



def _distributed() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()
    except Exception:
        return False


def _shape_text(spec: Any) -> str | None:
    if isinstance(spec, TensorSpec):
        return "[" + ", ".join(str(d) for d in spec.shape) + "]"
    if isinstance(spec, SymSpec):
        return spec.expr
    return None


def _scalar_text(d: dict[str, Any]) -> str | None:
    kind = d.get("kind")
    if kind in ("int", "float", "bool", "str", "device", "dtype"):
        return str(d.get("value"))
    if kind in ("symint", "symfloat", "symbool"):
        return f"{d.get('expr')}={d.get('hint')}"
    if kind in ("stream", "event", "process_group"):
        return ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("kind", "name", "node", "index", "type"))
    if kind == "opaque":
        return d.get("type")
    return None
