"""Dump: one graph and what is known about it, from whatever file it came from.

    >>> dump = graphdbg.load("dumps/rank5/g0-compile_error-1a2b3c4d")   # or a printed graph, a repro.py, ...
    >>> dump.failure_kind, dump.error_type, dump.rank, dump.format
    ('compile_error', 'NotImplementedError', 5, 'dump')
    >>> dump.nodes().head()        # name, op, target, dtype, shape, source, module
    >>> case = dump.case()         # GraphModule + inputs, on cuda:5 if this machine has it, else CPU

Every reader (``graphdbg.formats``) returns this one class: a ``manifest`` (the schema's
``Manifest`` model, the same fields for every source; format-specific facts a typed sub-model
under their own key; ``manifest_data`` is the same as JSON data) and the file's
``Contents`` (the graph, and whatever values the file stored). ``case()`` is one code path
for every source. No pickle, no exec: graphs are parsed, tensors come from safetensors or
raw storage bytes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphdbg.backends.recipe import shown_backend
from graphdbg.display import Displayed
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.store.manifest import MAX_GRAPH_BYTES
from graphdbg.store.safe_files import read_regular

if TYPE_CHECKING:
    import torch

    from graphdbg.graph.parser import PrintedGraph
    from graphdbg.store.schema import Manifest

# torch is imported where a Dump's values, devices or graph are used, not here: ``ls`` of dump
# folders reads manifests only and stays a fraction of a second (listing/).


NOT_FAILURES = frozenset({"captured", "foreign", "pass"})  # kinds that record a graph, not a failure


def is_failure(kind: str | None) -> bool:
    """Whether a dump's failure kind is a failure (``captured``: a graph recorded on request)."""
    return kind is not None and kind not in NOT_FAILURES


class Contents:
    """What a file holds besides its manifest: the graph (source text, parsed) and stored values.

    This base serves files that hold a graph and no values (printed graphs, compile caches);
    a reader whose files store values subclasses it and overrides ``read`` (and ``check``).

        >>> contents = Contents(Path("rank0_0.py"))
        >>> contents.graph().graphs()[0]          # parsed on first use, never run
    """

    def __init__(self, graph_file: Path, text: str | None = None, printed: PrintedGraph | None = None):
        self.graph_file = graph_file if isinstance(graph_file, Path) else Path(graph_file)  # Path(a Path) parses it again
        self._text = text
        self._printed = printed

    def text(self) -> str:
        if self._text is None:
            try:
                self._text = read_regular(self.graph_file, max_bytes=MAX_GRAPH_BYTES, text=True)
            except UnicodeDecodeError as e:
                raise DumpError(f"{self.graph_file}: cannot read the graph ({type(e).__name__})") from e
        return self._text

    def peek_text(self) -> str:
        """``text()``, not kept after if it wasn't held before (``ls`` looks into thousands of files)."""
        if self._text is not None:
            return self._text
        text = self.text()
        self._text = None
        return text

    def graph(self) -> PrintedGraph:
        # lazy: torch-free at import, so that ls reads manifests without torch (listing/)
        from graphdbg.graph.parser import parse_printed_graph
        from graphdbg.rebuild.stand_ins import resolver
        if self._printed is None:
            # ops this machine lacks (a custom op of the user's server) parse into named stand-ins
            self._printed = parse_printed_graph(self.text(), filename=str(self.graph_file), resolve=resolver())
        return self._printed

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        """The stored values named ``keys`` (tensors, or a storage's bytes as uint8), on the CPU."""
        if keys:
            raise DumpError(f"{self.graph_file}: holds no stored values (asked for {keys[0]!r})")
        return {}

    def check(self) -> None:
        """Validate what can be validated without loading values (nothing, for a bare graph file)."""


class Dump(Displayed):
    """One graph: its manifest, its file's contents, and how to make a Case of it.

    ``manifest`` is the checked ``Manifest`` model (``store/schema.py``): every field typed, its
    default defined once there; ``manifest_data`` is the same manifest as JSON data, what is
    written to a dump folder or sent to a replay child."""

    def __init__(self, path: Path, manifest: dict[str, Any], contents: Contents):
        self.path = path if isinstance(path, Path) else Path(path)
        self.manifest_data = manifest
        self.contents = contents
        self._model: Manifest | None = None

    @property
    def manifest(self) -> Manifest:
        """The manifest as the schema's model, made on first use (a reader checked its data already)."""
        if self._model is None:
            # lazy: pydantic and the schema's models only where a manifest's fields are read
            from graphdbg.store.schema import manifest_model

            self._model = manifest_model(self.manifest_data, str(self.path))
        return self._model

    def change_manifest(self, **keys: Any) -> None:
        """Set top-level manifest keys (a printed graph's failure found in a run's log); checked on the next read."""
        self.manifest_data.update(keys)
        self._model = None

    # What failed, where --------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def format(self) -> str:
        """``dump`` for graphdbg's own folders, else the reader's name (``printed_graph``, ...)."""
        return self.manifest.fmt

    @property
    def rank(self) -> int:
        return self.manifest.dist.rank

    @property
    def world_size(self) -> int:
        return self.manifest.dist.world_size

    @property
    def backend(self) -> str:
        return self.manifest.backend or "?"

    @property
    def failure_kind(self) -> str:
        return self.manifest.failure_kind

    @property
    def error_type(self) -> str | None:
        exception = self.manifest.failure.exception
        return (exception.type if exception else None) or ("AccuracyError" if self.failure_kind == "accuracy" else None)

    @property
    def message(self) -> str:
        failure = self.manifest.failure
        return (failure.exception.message if failure.exception else None) or failure.message or ""

    @property
    def signature(self) -> str | None:
        return self.manifest.failure.signature

    @property
    def graph_hash(self) -> str:
        return self.manifest.graph.hash

    @property
    def node_count(self) -> int:
        return self.manifest.graph.nodes

    @property
    def captured_device(self) -> torch.device:
        """Where the graph ran: a printed graph's baked-in device, else its first GPU input's."""
        import torch  # lazy: torch-free at import, so that ls reads manifests without torch

        return torch.device(self.captured_device_name)

    @property
    def captured_device_name(self) -> str:
        """``captured_device`` as written (``cuda:3``, ``cpu``), read without torch."""
        m = self.manifest
        if m.is_printed:  # a printed graph: only its device literals say (its annotations may not)
            return m.printed.captured_device or "cpu"
        for d in m.inputs:
            if d.kind == "tensor" and (d.device or "cpu").startswith("cuda"):
                return d.device
        # a piece may be handed only runtime objects on the GPU (a side stream, its events)
        for d in [*m.inputs, *m.external_objects]:
            where = str(d.device or (d.model_extra or {}).get("value") or "")
            if d.kind in ("stream", "event", "device") and where.startswith("cuda"):
                return where
        return "cpu"

    def symbols(self) -> set[str]:
        """The size symbols the inputs' shapes use (``s77``, ...): what ``case(sizes=...)`` can set."""
        names: set[str] = set()
        for d in self.manifest.inputs:
            dims = (d.symbolic_shape or d.shape or []) if d.kind == "tensor" else [d.expr or ""]
            for text in map(str, dims):
                names.update(re.findall(r"\b[a-z]\d+\b", text))
        return names

    # The graph --------------------------------------------------------------------
    @property
    def source(self) -> str:
        return self.contents.text()

    @property
    def printed(self) -> PrintedGraph:
        return self.contents.graph()

    def check(self) -> None:
        """Validate what can be validated without loading values (a dump's tensor file header)."""
        self.contents.check()

    def default_device(self) -> torch.device:
        # lazy: ls imports no torch (listing/)
        import torch

        dev = self.captured_device
        if dev.type == "cuda" and torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count():
            return dev
        return torch.device("cpu")

    def cpu_replay(self, device: str | torch.device | None) -> bool:
        """Whether a replay on ``device`` surely runs on the CPU, decided without torch: the CPU
        named, or nothing named and a graph captured on the CPU. (Anything else asks torch.)"""
        if device is None:
            return self.captured_device_name == "cpu"
        return str(device) == "cpu"

    def resolve_device(self, device: str | torch.device | None) -> torch.device:
        # lazy: ls imports no torch (listing/)
        import torch

        try:
            dev = torch.device(device) if device is not None else self.default_device()
        except RuntimeError as e:
            raise GraphdbgError(f"{device!r} is not a device") from e
        if dev.type == "cuda" and not (torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count()):
            raise GraphdbgError(f"device {dev} is not available on this machine (captured on {self.captured_device})")
        if dev.type not in ("cpu", "cuda"):
            raise GraphdbgError(f"device {dev} is not supported for replay")
        return dev

    def case(self, device: str | torch.device | None = None, *, seed: int | None = None,
             sizes: dict[str, int] | None = None, trust_kernels: bool = False):
        """The graph and its inputs on ``device`` (default: the capture device if present, else CPU).

        The same steps for every source: give size symbols values (``sizes``, else recorded
        hints, else a default); build the module (attributes the file stores or constructs,
        the rest from annotations); build the inputs (stored values, storage views, statistics,
        else index-aware synthesis seeded by ``seed``, default ``$GRAPHDBG_SEED`` or 0);
        install stand-ins for what this machine lacks; move device literals. Every value or
        call that is not the captured one is in ``case.stand_ins``. ``trust_kernels``: user Triton
        kernels are defined from the source the dump recorded (code from the dump: only in a
        sandboxed replay child, ``rebuild/kernel_source.py``), not stood in for.
        """
        # lazy: torch-free at import, so that ls reads manifests without torch (listing/)
        from graphdbg.case import Case
        from graphdbg.rebuild.inputs import default_seed
        from graphdbg.rebuild.steps import (
            Rebuild,
            arrange_synthesis,
            build_inputs,
            build_module,
            enter_caller_autocast,
            install_for_one_rank,
            move_device_literals,
        )
        dev = self.resolve_device(device)
        data = self.manifest_data  # the steps read the descriptors as JSON data (rebuild/inputs.py)
        rb = Rebuild.start(self.printed, data, self.contents.read, dev, default_seed(seed), sizes,
                           where=str(self.path))
        gm = build_module(rb, self.printed, data)
        enter_caller_autocast(rb, gm, data)
        arrange_synthesis(rb, gm, data["inputs"])
        inputs = build_inputs(rb, gm, data)
        if trust_kernels:
            from graphdbg.rebuild.kernel_source import install_kernels  # lazy, as the steps above

            install_kernels(gm, data)
        if not _distributed():
            install_for_one_rank(rb, gm)
        move_device_literals(rb, gm, self.captured_device)
        return Case(gm=gm, inputs=inputs, device=dev, stand_ins=rb.stand_ins, dump=self)

    # Tables -----------------------------------------------------------------------
    def nodes(self):
        """A pandas DataFrame, one row per node: name, op, target, dtype, shape, source, code, module.
        A custom op this machine lacks shows under its own name."""
        # lazy: torch-free at import, so that ls reads manifests without torch (listing/)
        import pandas as pd

        from graphdbg.graph.hashing import target_name
        from graphdbg.rebuild.stand_ins import MissingOp
        from graphdbg.store.specs import SymSpec, TensorSpec
        from graphdbg.tables import typed_table

        modules = self.manifest.graph.node_modules
        rows = []
        for node in self.printed.graph.nodes:
            spec = node.meta.get("graphdbg_spec")
            src = (node.meta.get("graphdbg_source") or {}) if node.op not in ("placeholder", "output") else {}
            rows.append({
                "name": node.name,
                "op": node.op,
                "target": node.target.qualname if isinstance(node.target, MissingOp) else target_name(node),
                "dtype": spec.dtype if isinstance(spec, TensorSpec) else ("sym" if isinstance(spec, SymSpec) else None),
                "shape": _shape_text(spec),
                "source": f"{src['file']}:{src['line']}" if src.get("file") else None,
                "code": src.get("code"),
                "module": modules.get(node.name),
            })

        return typed_table(pd.DataFrame(rows, columns=["name", "op", "target", "dtype", "shape", "source", "code", "module"]).astype(object), self)

    def inputs_table(self):
        """A pandas DataFrame of the inputs: name, kind, dtype, shape, device, value, stored, and
        statistics. ``value`` says how an input nothing recorded will be synthesized."""
        # lazy: torch-free at import, so that ls reads manifests without torch (listing/)
        import pandas as pd

        from graphdbg.rebuild.inputs import made_up
        from graphdbg.store.specs import TensorSpec
        from graphdbg.tables import typed_table

        descs = self.manifest_data["inputs"]  # as JSON data: the specs and synthesis plans read it so
        plans = self._plans() if any(made_up(d) for d in descs) else {}
        names = [n.name for n in self.printed.graph.nodes if n.op == "placeholder"] if plans else []
        rows = []
        for i, d in enumerate(descs):
            stats = d.get("stats") or {}
            plan = plans.get(names[i]) if i < len(names) else None
            rows.append({
                "name": d.get("node") or d.get("name"),
                "kind": d.get("kind"),
                "dtype": d.get("dtype"),
                "shape": _shape_text(TensorSpec.from_dict(d)) if d.get("kind") == "tensor" else None,
                "device": d.get("device"),
                "value": f"synthesized: {plan.how}" if plan is not None and made_up(d) else _scalar_text(d),
                "stored": bool(d.get("stored")) if d.get("kind") == "tensor" else None,
                "min": stats.get("min"),
                "max": stats.get("max"),
                "mean": stats.get("mean"),
                "std": stats.get("std"),
            })

        return typed_table(pd.DataFrame(rows, columns=_INPUT_COLUMNS).astype(object), self)

    def _plans(self) -> dict[str, Any]:
        # lazy: torch-free at import, so that ls reads manifests without torch (listing/)
        from graphdbg.rebuild.synthesize import plan_inputs
        return {p.name: p for p in plan_inputs(self.printed.to_module(missing_attr=lambda q, s: None))}

    def summary(self) -> dict[str, Any]:
        """The stable JSON row of ``graphdbg ls --json`` and ``show --json``. Other tools' files
        add ``format``; printed graphs ``model``, ``graph``, ``rank_source``, ``group_hash``,
        ``constructs``, and where a run's log gave their failure ``log`` (its path), ``log_line``,
        ``log_inferred`` and ``log_how`` (else None; the backend is then the log's). A captured
        dump's row adds ``frame`` and ``compile_id`` (capture/origin.py), ``module`` (the module
        path all its nodes share), its nested compile's ``parent``, ``piece`` and ``children``,
        and the ``custom_ops`` and ``triton_kernels`` it calls (graph/kernels.py)."""
        m = self.manifest
        row = {
            "path": str(self.path),
            "rank": self.rank,
            "world_size": self.world_size,
            "id": self.id,
            "nodes": self.node_count,
            "kind": self.failure_kind,
            "backend": shown_backend(m) if m.backend_recipe is not None else self.backend,  # aot_autograd(...), partial
            "error_type": self.error_type,
            "message": (self.message.strip().splitlines() or [""])[0],
            "signature": self.signature,
            "graph_hash": self.graph_hash,
        }
        if m.format is not None:
            row["format"] = self.format
        if m.is_printed:
            p = m.printed
            row.update({"model": p.model, "graph": p.graph_number, "rank_source": m.dist.source or "default",
                        "group_hash": p.group_hash, "constructs": list(p.constructs)})
        if self.format == "dump":
            origin, parent = m.origin, m.parent
            row.update(frame=f"{origin.function} ({Path(origin.file).name}:{origin.line})" if origin and origin.function else None,
                       compile_id=origin.compile_id if origin else None, module=module_prefix(m.graph.node_modules),
                       parent=str(Path(self.path).parent / parent.dir) if parent and parent.dir else None,
                       piece=parent.piece if parent and parent.dir else None,
                       children=[os.path.normpath(Path(self.path).parent / c.dir) for c in m.children if c.dir],
                       custom_ops=[o.name for o in m.custom_ops],
                       triton_kernels=[k.name or f"kernel_idx={k.kernel_idx}" for k in m.triton_kernels])
            return row
        log = m.failure.from_log
        row.update({"log": log.path, "log_line": log.line, "log_inferred": log.inferred, "log_how": log.how} if log
                   else dict.fromkeys(LOG_KEYS))
        if log and m.failure.backend:
            row["backend"] = m.failure.backend
        return row

    def __repr__(self) -> str:
        where = f"{self.format}, " if self.format != "dump" else ""
        return f"Dump({str(self.path)!r}, {where}{self.failure_kind}, {self.error_type})"


LOG_KEYS = ("log", "log_line", "log_inferred", "log_how")  # where a run log gave a printed graph its failure
_INPUT_COLUMNS = ["name", "kind", "dtype", "shape", "device", "value", "stored", "min", "max", "mean", "std"]


def _distributed() -> bool:
    try:
        import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

        return dist.is_available() and dist.is_initialized()
    except Exception:
        return False


def _shape_text(spec: Any) -> str | None:
    # lazy: ls imports no torch (listing/)
    from graphdbg.store.specs import SymSpec, TensorSpec

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


def module_prefix(node_modules: dict[str, str]) -> str | None:
    """The module path every node of a graph shares (``transformer.h.2``), or None."""
    paths = [module.split(".") for module in node_modules.values()]
    return ".".join(os.path.commonprefix(paths)) or None  # commonprefix compares lists item by item


def natural_key(text: str) -> list[Any]:
    """Sort key with the numbers in ``text`` compared as numbers: g2-... before g10-..."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
