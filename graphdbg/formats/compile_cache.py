"""vLLM's and SGLang's ``computation_graph*.py`` compile-cache files, read as dumps.

Both servers split Dynamo's graph at their attention ops (``torch.fx.passes.split_module``,
pieces ``submod_0``, ``submod_1``, ...) and write the split module's ``print_readable()``
under a two-line header into their compile cache:

- vLLM: ``~/.cache/vllm/torch_compile_cache/<hash>/rank_<R>_<DP>/<tag>/computation_graph.py``
  (recent vLLM also replaces SymInt inputs with ``torch.ops.aten.sym_size.int`` calls);
- SGLang: ``~/.cache/sglang/torch_compile_cache/<hash>/rank_<R>_<DP>/<tag>/computation_graph_<time>.py``
  (SymInt inputs like ``s77: "Sym(s77)"`` stay).

The file is a printed graph (parsed, never run; see ``printed_graph``). It holds no values:
every input, parameters included, is synthesised from its annotation with a seed, and every
size symbol gets a value (``sizes=``, default ``DEFAULT_SIZE``). All of them are stand-ins.
Custom ops this machine lacks (``torch.ops.vllm.*``, ``torch.ops.sglang.*``) become stand-ins
returning zeros of the annotated result (or nothing, for in-place ops).

    >>> dump = load_computation_graph(".../rank_0_0/backbone/computation_graph.py")
    >>> dump.manifest["format"], dump.rank, dump.manifest["compile_cache"]["tag"]
    ('vllm_compile_cache', 0, 'backbone')
    >>> case = dump.case("cpu", seed=0, sizes={"s77": 16})
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx as fx

from graphdbg.formats import register
from graphdbg.errors import GraphdbgError
from graphdbg.formats.file_dump import FileDump, manifest_for
from graphdbg.rebuild.inputs import StandIn
from graphdbg.confined import read_regular
from graphdbg.graph_parser import PrintedGraph, parse_printed_graph
from graphdbg.specs import SymSpec, TensorSpec, eval_dim

__all__ = ["CompileCacheDump", "detect_format", "load_computation_graph"]

VLLM, SGLANG = "vllm_compile_cache", "sglang_compile_cache"
DEFAULT_SIZE = 4  # a size symbol's value when nothing says otherwise: small, and not 0 or 1 (which Dynamo specialises)
_NAME = re.compile(r"^computation_graph(?P<stamp>_\d+(?:\.\d+)?)?\.py$")
_HEADER = re.compile(r"\A\s*from __future__ import annotations\s*\n\s*import torch\s*\n")
_RANK_DIR = re.compile(r"^rank_(?P<rank>\d+)_(?P<dp>\d+)$")
_CUDA_LITERAL = re.compile(r"device\(type='cuda', index=(\d+)\)")


MAX_FILE_BYTES = 256 << 20


def detect_format(path: str | Path) -> str | None:
    """``"vllm_compile_cache"`` or ``"sglang_compile_cache"`` for a compile-cache graph file, else None.

    The name decides which (SGLang stamps it with ``time.time()``); the header both write
    (``from __future__ import annotations`` / ``import torch``) must be there.
    """
    path = Path(path)
    m = _NAME.match(path.name)
    if not m or not path.is_file():
        return None
    try:
        with path.open(errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not _HEADER.match(head):
        return None
    return SGLANG if m.group("stamp") else VLLM


def cache_location(path: Path) -> dict[str, Any]:
    """What the cache layout says: rank, data-parallel rank, model tag, cache hash, root."""
    parts = path.resolve().parts if path.exists() else path.parts
    for i in range(len(parts) - 1, -1, -1):
        if m := _RANK_DIR.match(parts[i]):
            tag = parts[i + 1] if i + 2 < len(parts) else None
            return {"rank": int(m["rank"]), "dp_rank": int(m["dp"]), "tag": tag,
                    "hash": parts[i - 1] if i > 0 else None, "root": str(Path(*parts[:i - 1])) if i > 1 else None}
    return {"rank": None, "dp_rank": None, "tag": None, "hash": None, "root": None}


class _MissingOps:
    """The resolve hook: a stand-in for each custom op (``torch.ops.<ns>.<op>``) this torch lacks."""

    def __init__(self):
        self.names: list[str] = []

    def __call__(self, qualname: str) -> Callable[..., Any] | None:
        if not re.fullmatch(r"torch\.ops\.\w+\.\w+(\.\w+)?", qualname) or qualname.startswith(("torch.ops.aten.", "torch.ops.prims.")):
            return None

        def missing_op(*args: Any, **kwargs: Any) -> Any:
            raise GraphdbgError(f"{qualname} is not available here and has no stand-in for this call")

        missing_op.__name__ = missing_op.__qualname__ = qualname.replace(".", "_")
        missing_op._graphdbg_missing = qualname  # type: ignore[attr-defined]
        self.names.append(qualname)
        return missing_op


def _shape_stand_ins(gm: fx.GraphModule, env: dict[str, int]) -> None:
    """Point each missing-op node at a function returning zeros of its annotated result."""
    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            qual = getattr(node.target, "_graphdbg_missing", None)
            if node.op != "call_function" or qual is None:
                continue
            spec = node.meta.get("graphdbg_spec")
            node.target = _zeros_like_spec(qual, spec, env)
        mod.recompile()


def _zeros_like_spec(qual: str, spec: Any, env: dict[str, int]) -> Callable[..., Any]:
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if not isinstance(spec, TensorSpec):
            return None  # in-place or unannotated: the op's effect is lost, which the stand-in list says
        device = next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), torch.device("cpu"))
        return torch.zeros(spec.concrete_shape(env), dtype=spec.torch_dtype, device=device)

    stand_in.__name__ = stand_in.__qualname__ = "stand_in_" + qual.replace(".", "_")
    return stand_in


class CompileCacheDump(FileDump):
    """A vLLM or SGLang ``computation_graph*.py`` as a Dump; every input is synthesised."""

    def __init__(self, path: Path, fmt: str, printed: PrintedGraph, missing_ops: list[str]):
        self.missing_ops = missing_ops
        where = cache_location(path)
        text = read_regular(path, max_bytes=MAX_FILE_BYTES, text=True)
        cuda = _CUDA_LITERAL.search(text)
        captured = f"cuda:{cuda.group(1)}" if cuda else None  # the file has no devices but its literals'
        inputs = []
        for node in printed.graph.find_nodes(op="placeholder"):
            spec = node.meta.get("graphdbg_spec")
            if isinstance(spec, TensorSpec):
                inputs.append({"name": node.name, "node": node.name, "kind": "tensor", **spec.to_dict(),
                               "device": spec.device or captured, "stored": None, "reason": "the file holds no values"})
            elif isinstance(spec, SymSpec):
                inputs.append({"name": node.name, "node": node.name, "kind": spec.kind, "expr": spec.expr, "hint": spec.hint})
            else:
                inputs.append({"name": node.name, "node": node.name, "kind": "opaque", "type": "unannotated"})
        who = "vLLM" if fmt == VLLM else "SGLang"
        message = (f"{who} compile-cache graph (rank {where['rank']}, dp {where['dp_rank']}, {where['tag']}); "
                   "it records the graph, not a failure, and no values")
        rank = where["rank"] if where["rank"] is not None else 0
        manifest = manifest_for(path, printed, fmt=fmt, inputs=inputs, backend="inductor", message=message,
                                rank=rank, rank_source="path" if where["rank"] is not None else "default",
                                extra={"compile_cache": where, "missing_ops": missing_ops})
        super().__init__(path, manifest, printed)

    def symbols(self) -> set[str]:
        """The size symbols the graph's inputs use (``s77``, ...)."""
        names: set[str] = set()
        for d in self.manifest["inputs"]:
            dims = [str(x) for x in d.get("shape", [])] if d["kind"] == "tensor" else [str(d.get("expr", ""))]
            for text in dims:
                names.update(re.findall(r"\b[a-z]\d+\b", text))
        return names

    def case(self, device: str | torch.device | None = None, *, seed: int = 0, sizes: dict[str, int] | None = None):
        """The split graph and synthesised inputs on ``device``; ``sizes`` gives size symbols values."""
        from graphdbg.case import Case, retarget_devices

        dev = self.resolve_device(device)
        stand_ins: list[StandIn] = []
        env = {}
        for name in sorted(self.symbols()):
            if sizes and name in sizes:
                env[name] = int(sizes[name])
            else:
                env[name] = DEFAULT_SIZE
                stand_ins.append(StandIn(name, "size", f"no value recorded; {DEFAULT_SIZE} used (pass sizes= to choose)"))
        inputs = [self._value(d, env, dev, seed, stand_ins) for d in self.manifest["inputs"]]
        gm = self.printed.to_module(missing_attr=lambda q, spec: self._attr(q, spec, env, dev, seed, stand_ins))
        _shape_stand_ins(gm, env)
        for op in self.missing_ops:
            stand_ins.append(StandIn(op, "custom_op", "not on this machine: returns zeros of its annotated result"))
        moved = retarget_devices(gm, self.captured_device, dev)
        if dev != self.captured_device and moved:
            stand_ins.append(StandIn("graph", "device", f"captured on {self.captured_device}, replayed on {dev}; "
                                                        f"device literals moved in {', '.join(moved[:5])}"))
        return Case(gm=gm, inputs=inputs, device=dev, stand_ins=stand_ins, dump=self)

    def _value(self, d: dict[str, Any], env: dict[str, int], dev: torch.device, seed: int, stand_ins: list[StandIn]) -> Any:
        if d["kind"] == "tensor":
            spec = TensorSpec.from_dict(d)
            stand_ins.append(StandIn(d["name"], "regenerated", f"random {spec.annotation()} (the file holds no values)"))
            return _random(spec, env, dev, seed, d["name"])
        if d["kind"] in ("symint", "symfloat", "symbool"):
            return d["hint"] if d.get("hint") is not None else eval_dim(d["expr"], env)
        stand_ins.append(StandIn(d["name"], "opaque", "unannotated input passed as None"))
        return None

    def _attr(self, qualname: str, spec: Any, env, dev, seed, stand_ins: list[StandIn]) -> Any:
        if not isinstance(spec, TensorSpec):
            raise GraphdbgError(f"{self.path}: attribute {qualname} has no annotation to rebuild it from")
        stand_ins.append(StandIn(qualname, "regenerated", f"random {spec.annotation()} (the file holds no values)"))
        return _random(spec, env, dev, seed, qualname)


def _random(spec: TensorSpec, env: dict[str, int], dev: torch.device, seed: int, name: str) -> torch.Tensor:
    import zlib

    shape = spec.concrete_shape(env)
    gen = torch.Generator().manual_seed(seed + (zlib.crc32(name.encode()) & 0x7FFFFFFF))
    dtype = spec.torch_dtype
    n = math.prod(shape)
    if dtype == torch.bool:
        flat = torch.rand(n, generator=gen) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        flat = torch.randn(n, generator=gen)
    else:
        flat = torch.randint(0, 2, (n,), generator=gen)  # valid as an index into any dim of size >= 2
    return flat.reshape(shape).to(dtype).to(dev)


def load_computation_graph(path: str | Path) -> CompileCacheDump:
    """Read a vLLM or SGLang ``computation_graph*.py`` as a Dump, without running it.

        >>> dump = load_computation_graph("~/.cache/vllm/torch_compile_cache/1c65801a3d/rank_0_0/backbone/computation_graph.py")
        >>> dump.case().run("eager").status
    """
    path = Path(path).expanduser()
    fmt = detect_format(path)
    if fmt is None:
        raise GraphdbgError(f"{path}: not a vLLM/SGLang computation_graph*.py (name or header differs)")
    text = read_regular(path, max_bytes=MAX_FILE_BYTES, text=True)
    hook = _MissingOps()
    printed = parse_printed_graph(text, filename=str(path), resolve=hook)
    return CompileCacheDump(path, fmt, printed, sorted(set(hook.names)))


register('compile_cache', lambda p: p.is_file() and detect_format(p) is not None, load_computation_graph, priority=20)
