"""vLLM's and SGLang's ``computation_graph*.py`` compile-cache files, read as dumps.

Both servers split Dynamo's graph at their attention ops (``torch.fx.passes.split_module``,
pieces ``submod_0``, ``submod_1``, ...) and write the split module's ``print_readable()``
under a two-line header into their compile cache:

- vLLM: ``~/.cache/vllm/torch_compile_cache/<hash>/rank_<R>_<DP>/<tag>/computation_graph.py``
  (recent vLLM also replaces SymInt inputs with ``torch.ops.aten.sym_size.int`` calls);
- SGLang: ``~/.cache/sglang/torch_compile_cache/<hash>/rank_<R>_<DP>/<tag>/computation_graph_<time>.py``
  (SymInt inputs like ``s77: "Sym(s77)"`` stay).

The file is a printed graph (parsed, never run; see ``printed_graph``). It holds no values:
``Dump.case()`` synthesises every input, parameters included, from its annotation with a
seed, and gives every size symbol a value (``sizes=``, else ``DEFAULT_SYMBOL_SIZE``). All of
them are stand-ins. Custom ops this machine lacks (``torch.ops.vllm.*``,
``torch.ops.sglang.*``) become stand-ins returning zeros of the annotated result (or nothing,
for in-place ops); the manifest lists them under ``missing_ops``.

    >>> dump = load_computation_graph(".../rank_0_0/backbone/computation_graph.py")
    >>> dump.manifest_data["format"], dump.rank, dump.manifest_data["compile_cache"]["tag"]
    ('vllm_compile_cache', 0, 'backbone')
    >>> case = dump.case("cpu", seed=0, sizes={"s77": 16})
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from graphdbg.dump import Contents, Dump
from graphdbg.errors import GraphdbgError
from graphdbg.formats import manifest_for, register
from graphdbg.rebuild.stand_ins import MissingOp
from graphdbg.store.safe_files import open_stream, read_regular
from graphdbg.store.specs import SymSpec, TensorSpec

__all__ = ["detect_format", "load_computation_graph", "cache_location"]

VLLM, SGLANG = "vllm_compile_cache", "sglang_compile_cache"
MAX_FILE_BYTES = 256 << 20  # a compile-cache graph of a real model is well under a MB
_NAME = re.compile(r"^computation_graph(?P<stamp>_\d+(?:\.\d+)?)?\.py$")
_HEADER = re.compile(r"\A\s*from __future__ import annotations\s*\n\s*import torch\s*\n")
_RANK_DIR = re.compile(r"^rank_(?P<rank>\d+)_(?P<dp>\d+)$")
_CUDA_LITERAL = re.compile(r"device\(type='cuda', index=(\d+)\)")


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
        with open_stream(path) as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except (OSError, GraphdbgError):
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


def load_computation_graph(path: str | Path) -> Dump:
    """Read a vLLM or SGLang ``computation_graph*.py`` as a Dump, without running it.

        >>> dump = load_computation_graph("~/.cache/vllm/torch_compile_cache/1c65801a3d/rank_0_0/backbone/computation_graph.py")
        >>> dump.case().run("eager").status
    """
    path = Path(path).expanduser()
    fmt = detect_format(path)
    if fmt is None:
        raise GraphdbgError(f"{path}: not a vLLM/SGLang computation_graph*.py (name or header differs)")
    text = read_regular(path, max_bytes=MAX_FILE_BYTES, text=True)
    contents = Contents(path, text=text)
    printed = contents.graph()  # custom ops this machine lacks parse into MissingOp markers
    return Dump(path, compile_cache_manifest(path, fmt, text, printed), contents)


def compile_cache_manifest(path: Path, fmt: str, text: str, printed: Any) -> dict[str, Any]:
    """Rank and model tag from the cache's folders; inputs from the annotations; the ops it lacks."""
    where = cache_location(path)
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
    missing = sorted({n.target.qualname for g in printed.graphs() for n in g.nodes if isinstance(n.target, MissingOp)})
    who = "vLLM" if fmt == VLLM else "SGLang"
    message = (f"{who} compile-cache graph (rank {where['rank']}, dp {where['dp_rank']}, {where['tag']}); "
               "it records the graph, not a failure, and no values")
    rank = where["rank"] if where["rank"] is not None else 0
    return manifest_for(path, printed, fmt=fmt, inputs=inputs, backend="inductor", message=message,
                        rank=rank, world_size=rank + 1,  # at least: the other ranks' folders are not looked at
                        rank_source="path" if where["rank"] is not None else "default",
                        extra={"compile_cache": where, "missing_ops": missing})


register('compile_cache', lambda p: p.is_file() and detect_format(p) is not None, load_computation_graph, priority=20)
