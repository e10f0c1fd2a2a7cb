"""Wrap a torch.compile backend so that its failures leave a dump behind.

    >>> compiled = torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps"))
    >>> compiled(x)   # if Inductor fails, dumps/rank0/<id>/ holds the graph and its inputs

The wrapper is transparent: the backend sees the same graph and inputs, the user sees the
same result or the same exception (type, message and traceback). Everything graphdbg does
on top is guarded, so a failure to dump costs one line on stderr and nothing else.
"""

from __future__ import annotations

import copy
import itertools
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx as fx

from graphdbg.accuracy import OutputMismatch, compare_outputs
from graphdbg.capture.write import write_dump
from graphdbg.graph_hash import module_hash, op_histogram, target_name
from graphdbg.replay.inputs import clone_values

MODES = ("error", "accuracy", "always")
DEFAULT_BUDGET = 4 << 30  # bytes of input values stored per graph; past it, spec and statistics only
ENV_DUMP_DIR = "GRAPHDBG_DUMP_DIR"


def capture(
    backend: str | Callable[..., Any] = "inductor",
    dump_dir: str | os.PathLike | None = None,
    *,
    mode: str = "error",
    budget_bytes: int = DEFAULT_BUDGET,
    rtol: float | None = None,
    atol: float | None = None,
) -> CapturingBackend:
    """A backend for ``torch.compile`` that runs ``backend`` and dumps the graphs it fails on.

    ``mode``: ``"error"`` dumps on a compile error or a run-time error of the compiled code;
    ``"accuracy"`` also runs each graph eagerly on copies of the inputs and dumps when the
    outputs disagree; ``"always"`` also dumps every graph when it is compiled.
    ``dump_dir`` defaults to ``$GRAPHDBG_DUMP_DIR``, else ``./graphdbg_dumps``.
    """
    if isinstance(backend, CapturingBackend):
        return backend
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return CapturingBackend(backend, dump_dir, mode=mode, budget_bytes=budget_bytes, rtol=rtol, atol=atol)


def backend_reference(backend: Any) -> str:
    """How a backend is named in a manifest: its registered name or ``module:qualname``."""
    if isinstance(backend, str):
        return backend
    name = getattr(backend, "compiler_name", None)
    if isinstance(name, str):
        return name
    target = backend if hasattr(backend, "__qualname__") else type(backend)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"


@dataclass
class GraphSnapshot:
    """The graph as the backend received it, taken before the backend can change it."""

    seq: int
    source: str
    graph_hash: str
    node_count: int
    ops: dict[str, int]
    placeholders: list[fx.Node]
    node_info: dict[str, dict[str, Any]]
    attrs: dict[str, torch.Tensor]
    external_objects: list[dict[str, Any]]
    collectives: list[dict[str, Any]] = field(default_factory=list)
    eager: fx.GraphModule | None = None
    dumped: set[str] = field(default_factory=set)

    @classmethod
    def take(cls, seq: int, gm: fx.GraphModule, keep_eager: bool) -> GraphSnapshot:
        source = gm.print_readable(print_output=False, include_stride=True, include_device=True)
        return cls(
            seq=seq,
            source=source,
            graph_hash=module_hash(gm),
            node_count=len(gm.graph.nodes),
            ops=op_histogram(gm.graph),
            placeholders=[n for n in gm.graph.nodes if n.op == "placeholder"],
            node_info=_node_info(gm),
            attrs=_tensor_attrs(gm),
            external_objects=_external_objects(gm),
            collectives=collective_groups(gm),
            eager=copy.deepcopy(gm) if keep_eager else None,
        )


def _node_info(gm: fx.GraphModule) -> dict[str, dict[str, Any]]:
    info: dict[str, dict[str, Any]] = {}
    for node in gm.graph.nodes:
        entry: dict[str, Any] = {}
        stack = node.meta.get("nn_module_stack")
        if stack:
            path, mod_type = list(stack.values())[-1]
            entry["module"] = _clean_module_path(path)
            entry["module_type"] = mod_type if isinstance(mod_type, str) else f"{mod_type.__module__}.{mod_type.__qualname__}"
        if entry:
            info[node.name] = entry
    return info


def _clean_module_path(path: str) -> str:
    # Dynamo spells paths as L['self'].layers[0].attn; people read layers.0.attn.
    import re

    path = re.sub(r"^L\['[^']+'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']+)'\]", r".\1", path)
    return path.strip(".")


def _tensor_attrs(gm: fx.GraphModule) -> dict[str, torch.Tensor]:
    """Tensors the graphs reach with get_attr, by qualified name from the root module."""
    attrs: dict[str, torch.Tensor] = {}
    for prefix, mod in gm.named_modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            if node.op != "get_attr":
                continue
            obj = mod
            try:
                for part in str(node.target).split("."):
                    obj = getattr(obj, part)
            except AttributeError:
                continue
            if isinstance(obj, torch.Tensor):
                attrs[f"{prefix}.{node.target}" if prefix else str(node.target)] = obj
    return attrs


def _external_objects(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Objects Dynamo keeps out of the inputs and fetches by index (torch 2.11+ streams, events).

    The side table holds weak references that may be dead by the time a failure is dumped,
    so it is read now, while the graph is being compiled.
    """
    from graphdbg.capture.describe import describe_value

    try:
        from torch._dynamo import graph_bytecode_inputs as side_table
    except ImportError:
        return []
    used: dict[int, list[str]] = {}
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for node in mod.graph.nodes:
                if node.op == "call_function" and getattr(node.target, "__name__", "") == "get_external_object_by_index":
                    idx = node.args[0] if node.args else node.kwargs.get("index")
                    if isinstance(idx, int):
                        used.setdefault(idx, []).append(node.name)
    table = getattr(side_table, "index_to_external_object_weakref", {})
    out = []
    for idx in sorted(set(table) | set(used)):
        ref = table.get(idx)
        obj = ref() if ref is not None else None
        desc = describe_value(obj) if obj is not None else {"kind": "missing"}
        out.append({"index": idx, **desc, "used_by": used.get(idx, [])})
    return out


# Attributes Dynamo looks up on a backend; copied from the wrapped one so it behaves the same.
_FORWARDED = ("compiler_name", "get_compiler_config", "reset", "backend_ctx_ctor", "dynamic", "kwargs", "_export")


def _group_name_args(node: fx.Node) -> list[str]:
    """The string arguments a collective names its process group with."""
    names = [v for k, v in node.kwargs.items() if k in ("group_name", "tag", "group") and isinstance(v, str)]
    target = node.target
    if isinstance(target, torch._ops.OpOverloadPacket):  # Dynamo keeps the packet: all_reduce, not .default
        target = getattr(target, "default", target)
    schema = getattr(target, "_schema", None)
    if schema is not None:
        for arg, value in zip(schema.arguments, node.args):
            if arg.name in ("group_name", "tag") and isinstance(value, str):
                names.append(value)
    return names


def collective_groups(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Each process group the graph's collectives use: its name, the ops, and (when this process
    can resolve it) its ranks. Covers torch.ops._c10d_functional.* and custom ops such as
    torch.ops.sglang.inplace_all_reduce(x, group_name='tp:0')."""
    groups: dict[str, dict[str, Any]] = {}
    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            if node.op != "call_function":
                continue
            for name in _group_name_args(node):
                g = groups.setdefault(name, {"name": name, "ops": []})
                op = target_name(node)
                if op not in g["ops"]:
                    g["ops"].append(op)
    for g in groups.values():
        try:
            import torch.distributed as dist
            from torch.distributed.distributed_c10d import _resolve_process_group

            if dist.is_initialized():
                pg = _resolve_process_group(g["name"])
                g["ranks"] = dist.get_process_group_ranks(pg)
                g["size"] = pg.size()
        except Exception:
            pass
    return sorted(groups.values(), key=lambda g: g["name"])


class CapturingBackend:
    """The callable ``capture`` returns, carrying the wrapped backend's Dynamo-visible attributes.

    No ``__getattr__`` forwarding: Dynamo reads backend attributes from inside its frame
    callback, where running Python code for a missing attribute crashes the interpreter.
    """

    def __init__(self, backend, dump_dir, *, mode, budget_bytes, rtol, atol):
        self.backend_ref = backend_reference(backend)
        if isinstance(backend, str):
            from torch._dynamo import lookup_backend

            resolved = lookup_backend(backend)
            self.compiler_name = backend
        else:
            resolved = backend
        self.backend = resolved
        for name in _FORWARDED:
            if name not in self.__dict__ and hasattr(resolved, name):
                setattr(self, name, getattr(resolved, name))
        # Dynamo names the backend in BackendCompilerFailed by __name__; keep the user's name
        # there, and none where the backend has none (a ThunderCompiler() instance), as Dynamo would.
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", None)
        if name is not None:
            self.__name__ = name
        self.dump_dir = Path(dump_dir or os.environ.get(ENV_DUMP_DIR) or "graphdbg_dumps")
        self.mode = mode
        self.budget_bytes = budget_bytes
        self.rtol, self.atol = rtol, atol
        self.dumps: list[Path] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        # Dynamo prints a backend without __name__ by its repr; the user should see theirs.
        return repr(self.backend) if not isinstance(self.backend_ref, str) or ":" in self.backend_ref else self.backend_ref

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        with self._lock:
            seq = next(self._seq)
        snap = self._guarded(lambda: GraphSnapshot.take(seq, gm, keep_eager=self.mode == "accuracy"), "snapshot the graph")
        if snap is not None and self.mode == "always":
            self._dump(snap, list(example_inputs), "captured", None, inputs_state="at_compile")
        try:
            compiled = self.backend(gm, example_inputs, **kwargs)
        except Exception as e:
            if snap is not None:
                self._dump(snap, list(example_inputs), "compile_error", e, inputs_state="at_compile")
            raise
        if snap is None:
            return compiled
        return self._wrap(compiled, snap)

    def _wrap(self, compiled: Callable[..., Any], snap: GraphSnapshot) -> Callable[..., Any]:
        boxed = bool(getattr(compiled, "_boxed_call", False))
        accuracy = self.mode == "accuracy" and snap.eager is not None

        def run(*args: Any) -> Any:
            # Dynamo calls with positional inputs even when the compiled function is boxed; an
            # AOT caller passes one list, which a boxed callee may empty: keep our own references.
            boxed_list = boxed and len(args) == 1 and isinstance(args[0], list)
            inputs = list(args[0]) if boxed_list else list(args)
            before = self._guarded(lambda: clone_values(inputs), "copy inputs") if accuracy and "accuracy" not in snap.dumped else None
            try:
                out = compiled(*args)
            except Exception as e:
                if "runtime_error" not in snap.dumped:
                    snap.dumped.add("runtime_error")
                    self._dump(snap, inputs, "runtime_error", e, inputs_state="after_failed_call")
                raise
            if before is not None:
                self._check_accuracy(snap, before, out)
            return out

        if boxed:
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def _check_accuracy(self, snap: GraphSnapshot, before: list[Any], out: Any) -> None:
        def check() -> list[OutputMismatch]:
            with torch.no_grad():
                expected = snap.eager(*clone_values(before))
            return compare_outputs(expected, out, rtol=self.rtol, atol=self.atol)

        bad = self._guarded(check, "run the eager reference")
        if bad:
            snap.dumped.add("accuracy")
            self._dump(snap, before, "accuracy", None, inputs_state="before_call", mismatches=bad)

    def _dump(self, snap: GraphSnapshot, inputs: list[Any], kind: str, exc: BaseException | None, **extra: Any) -> None:
        def write() -> Path:
            return write_dump(
                self.dump_dir, snap=snap, inputs=inputs, kind=kind, exc=exc,
                backend=self.backend_ref, mode=self.mode, budget_bytes=self.budget_bytes, **extra,
            )

        path = self._guarded(write, "write a dump")
        if path is not None:
            self.dumps.append(path)
            what = f"{type(exc).__name__}" if exc is not None else kind
            _say(f"graphdbg: {kind} in backend {self.backend_ref!r} ({what}); dump written to {path}")

    def _guarded(self, fn: Callable[[], Any], what: str) -> Any:
        try:
            return fn()
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            _say(f"graphdbg: could not {what} ({type(e).__name__}: {first}); the original behaviour is unchanged")
            return None



def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def format_exception(exc: BaseException) -> dict[str, Any]:
    t = type(exc)
    return {
        "type": t.__name__,
        "qualified_type": f"{t.__module__}.{t.__qualname__}",
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(t, exc, exc.__traceback__)),
    }


__all__ = ["capture", "CapturingBackend", "GraphSnapshot", "DEFAULT_BUDGET", "target_name"]
