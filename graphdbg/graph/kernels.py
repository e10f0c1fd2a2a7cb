"""What a graph's own kernels are: the custom ops and user Triton kernels it calls.

A serving graph is mostly kernels that torch does not define (``torch.ops.sglang.*``,
``torch.ops.vllm.*``, attention libraries, ``@triton.jit`` kernels Dynamo keeps by index). A
bug inside one of them can't be found without knowing what it was, so capture records, per
custom op, its schema, the module that registered it and that module's package version, and
whether it has a fake (meta) implementation; per Triton kernel, its source text, name, module,
constexpr arguments, grid, autotune configs and Triton's version. All plain text: a dump never
holds code that loading it runs.

    >>> custom_ops(gm)
    [{'name': 'kt::attention', 'schema': 'kt::attention(Tensor q, ...) -> Tensor', 'module': 'mymodel.ops',
      'package': 'mymodel', 'version': '0.3.1', 'has_fake': True, 'calls': 2}]

Read at compile time (``GraphSnapshot.take``): Dynamo's kernel side table is reset later.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from typing import Any

import torch
import torch.fx as fx

from graphdbg.judge.op_names import op_parts

# Namespaces torch itself defines: their ops are torch's, not the model's own kernels.
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_quantized", "rngprims", "debugprims", "higher_order",
                              "_c10d_functional", "_c10d_functional_autograd", "c10d", "c10d_functional", "_dtensor",
                              "profiler", "inductor", "_inductor_test", "symm_mem", "fsdp", "mkldnn", "onednn", "_higher_order_ops"})
TRITON_WRAPPERS = ("triton_kernel_wrapper_mutation", "triton_kernel_wrapper_functional")
MAX_SOURCE = 1 << 20  # one kernel's source text


def custom_op_of(node: fx.Node) -> torch._ops.OpOverload | None:
    """The model's own op a node calls (an overload; Dynamo may keep the packet), else None."""
    if node.op != "call_function":
        return None
    t = node.target
    if isinstance(t, torch._ops.OpOverloadPacket):
        t = getattr(t, "default", None)
    if isinstance(t, torch._ops.OpOverload) and t.namespace not in TORCH_NAMESPACES:
        return t
    return None


def qualified_name(op: torch._ops.OpOverload) -> str:
    """``ns::op`` (the default overload) or ``ns::op.overload``."""
    namespace, name, overload = op_parts(op)
    return f"{namespace}::{name}" if overload == "default" else f"{namespace}::{name}.{overload}"


def _graph_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for mod in gm.modules() if isinstance(mod, fx.GraphModule) for n in mod.graph.nodes]


def custom_ops(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Each custom op ``gm`` (and its nested graphs) calls, once, with where it came from."""
    found: dict[str, dict[str, Any]] = {}
    for node in _graph_nodes(gm):
        op = custom_op_of(node)
        if op is None:
            continue
        name = qualified_name(op)
        if name not in found:
            found[name] = {"name": name, "schema": str(op._schema), **_registered_by(op), "has_fake": _has_fake(op), "calls": 0}
        found[name]["calls"] += 1
    return sorted(found.values(), key=lambda e: e["name"])


def _registered_by(op: torch._ops.OpOverload) -> dict[str, Any]:
    """The module that registered ``op`` (where torch.library knows it), its package and version."""
    module = None
    try:
        from torch._library.custom_ops import OPDEFS  # private: an older torch answers without it

        opdef = OPDEFS.get(op._schema.name)
        if opdef is not None:
            module = getattr(getattr(opdef, "_init_fn", None), "__module__", None)
    except ImportError:
        pass
    if module is None:
        kernel = _fake_kernel(op)
        module = getattr(kernel, "__module__", None) if kernel is not None else None
    out: dict[str, Any] = {"module": module}
    if module and module not in ("__main__", "__mp_main__"):
        package = module.split(".")[0]
        dists = _distributions().get(package, [])
        if dists:
            out["package"] = dists[0]
            try:
                out["version"] = importlib.metadata.version(dists[0])
            except importlib.metadata.PackageNotFoundError:
                pass
    return out


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _fake_kernel(op: torch._ops.OpOverload) -> Any:
    try:
        from torch._library.simple_registry import singleton  # private: an older torch answers without it

        return singleton.find(op._schema.name).fake_impl.kernel
    except (ImportError, AttributeError):
        return None


def _has_fake(op: torch._ops.OpOverload) -> bool:
    name = op._schema.name
    if _fake_kernel(op) is not None:
        return True
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in ("Meta", "CompositeImplicitAutograd"))


def triton_kernels(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """Each user Triton kernel ``gm`` calls through Dynamo's wrappers, by ``kernel_idx``: its
    source, name, module, constexpr arguments, grid and autotune configs, and Triton's version.
    Without Triton (a CPU machine) or the side table, only the index and the calls."""
    found: dict[int, dict[str, Any]] = {}
    for node in _graph_nodes(gm):
        if node.op != "call_function" or getattr(node.target, "__name__", "") not in TRITON_WRAPPERS:
            continue
        idx = node.kwargs.get("kernel_idx")
        if not isinstance(idx, int):
            continue
        entry = found.setdefault(idx, {"kernel_idx": idx, "calls": 0, **_side_table_entry(idx, node)})
        entry["calls"] += 1
        const_idx, constants = node.kwargs.get("constant_args_idx"), _constants(node)
        if isinstance(const_idx, int) and constants is not None:  # each call's own: a swap passes them to the reference
            entry.setdefault("constant_args_by_call", {})[str(const_idx)] = constants
    return [found[i] for i in sorted(found)]


def _constants(node: fx.Node) -> dict[str, Any] | None:
    """The non-tensor arguments (constexprs, sizes, eps) Dynamo kept aside for this call."""
    const_idx = node.kwargs.get("constant_args_idx")
    if not isinstance(const_idx, int):
        return None
    try:
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table  # Triton's wrapper: only for such a graph

        constants = kernel_side_table.get_constant_args(const_idx)
    except Exception:  # the table was reset, or this torch has none
        return None
    return {str(k): _plain(v) for k, v in (constants or {}).items()}


def _side_table_entry(idx: int, node: fx.Node) -> dict[str, Any]:
    entry: dict[str, Any] = {"grid": _plain(node.kwargs.get("grid"))}
    try:
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table  # Triton's wrapper: only for such a graph

        kernel = kernel_side_table.get_kernel(idx)
    except Exception:  # no Triton here, or the table was reset: the index is all there is
        return entry
    entry["constant_args"] = _constants(node) or {}  # the first call's
    fn = kernel  # the JITFunction (it has .src), under any Autotuner or heuristics wrapping it (.fn)
    for _ in range(8):
        if hasattr(fn, "src") or not hasattr(fn, "fn"):
            break
        fn = fn.fn
    py = getattr(fn, "fn", None) or (fn if inspect.isfunction(fn) else None)  # Triton's interpreter keeps the function bare
    entry["name"] = getattr(py, "__name__", None) or getattr(fn, "__name__", None)
    entry["module"] = getattr(py, "__module__", None) or getattr(fn, "__module__", None)
    source = getattr(fn, "src", None)
    if not isinstance(source, str) and py is not None:
        source = _source(py)
    if isinstance(source, str):
        entry["source"] = source[:MAX_SOURCE]
    names = kernel_globals(py)
    if names:
        entry["globals"] = names
    configs = getattr(kernel, "configs", None)
    if configs:
        entry["autotune_configs"] = [_config(c) for c in configs]
    best = getattr(kernel, "best_config", None)
    if best is not None:
        entry["chosen_config"] = _config(best)
    try:
        import triton  # present whenever the side table held a kernel

        entry["triton_version"] = triton.__version__
    except ImportError:
        pass
    return entry


def kernel_globals(py: Any, depth: int = 4) -> list[dict[str, Any]]:
    """What a kernel's source refers to by a global name, so that a replay can define it again
    from text alone: a module (``tl`` is ``triton.language``), a constant (``tl.constexpr`` or a
    number), or another ``@triton.jit`` function (its source, and what it refers to, first)."""
    out: dict[str, dict[str, Any]] = {}

    def visit(fn: Any, left: int) -> None:
        code, glb = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if code is None or not isinstance(glb, dict):
            return
        for name in code.co_names:
            if name in out or name not in glb:
                continue
            value = glb[name]
            if inspect.ismodule(value):
                out[name] = {"name": name, "module": value.__name__}
            elif isinstance(getattr(value, "value", None), (bool, int, float)) and type(value).__name__ == "constexpr":
                out[name] = {"name": name, "constexpr": value.value}
            elif isinstance(value, (bool, int, float)):
                out[name] = {"name": name, "value": value}
            elif _is_jit(value) and left > 0:  # a helper @triton.jit function
                visit(value.fn, left - 1)  # its own globals first: defined before it
                source = value.src if isinstance(getattr(value, "src", None), str) else _source(value.fn)
                if source is not None:
                    out[name] = {"name": name, "source": source[:MAX_SOURCE]}

    visit(py, depth)
    return list(out.values())


def _is_jit(value: Any) -> bool:
    """A ``@triton.jit`` function (Triton's JITFunction, or its interpreter's stand-in)."""
    return inspect.isfunction(getattr(value, "fn", None)) and type(value).__module__.startswith("triton")


def _source(fn: Any) -> str | None:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _config(c: Any) -> dict[str, Any]:
    out = {"kwargs": {str(k): _plain(v) for k, v in (getattr(c, "kwargs", None) or {}).items()}}
    for key in ("num_warps", "num_stages", "num_ctas"):
        if isinstance(getattr(c, key, None), int):
            out[key] = getattr(c, key)
    return out


def _plain(value: Any) -> Any:
    """A JSON value: numbers, strings and lists of them as they are, anything else its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)[:MAX_SOURCE]


__all__ = ["TORCH_NAMESPACES", "custom_op_of", "custom_ops", "kernel_globals", "qualified_name", "triton_kernels"]
