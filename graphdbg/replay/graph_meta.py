"""The node meta Dynamo gives a graph it hands a backend, on every graph graphdbg hands one.

A backend's FX passes read what Dynamo wrote on each node: Inductor's and vLLM's passes read
``val`` and ``example_value`` (fake tensors: shape, dtype, stride, device), others
``tensor_meta`` (``torch.fx.passes.shape_prop``'s ``TensorMetadata``), ``stack_trace``,
``source_fn_stack`` and ``nn_module_stack``. A graph parsed from a dump, cut by minify or
bisect, or called directly (``--direct``) carries none of these, so a pass that reads them
fails otherwise than it did (``TypeError`` on ``None``) or skips the node it broke. Every graph
graphdbg hands a backend or a pass goes through ``with_dynamo_meta`` first:

    >>> gm = with_dynamo_meta(case.gm, case.inputs, case.dump)
    >>> gm.graph.find_nodes(op="call_function")[0].meta["val"]
    FakeTensor(..., size=(4, 8))

- Inside Dynamo's compile (a replay through ``torch.compile``) the graph already has Dynamo's
  ``example_value`` from Dynamo's own fake mode: those are kept, and ``val`` and
  ``tensor_meta`` are added from them.
- Any other graph gets them computed: one ``FakeTensorMode`` per graph, the inputs made fake in
  it and every node run in it (fake propagation, as ``fx.passes.fake_tensor_prop`` does); where
  an op has no fake kernel, the nodes' real values (given, or recorded in one eager run on copies
  of the inputs) are made fake in the same mode instead. A graph that already carries fakes of
  one mode on every node (a candidate minify built) keeps them.
- ``stack_trace`` comes from the source line the dump recorded (``graphdbg_source``),
  ``nn_module_stack`` from the module the dump recorded for the node (``node_info``; the module
  type as its qualified name, as ``torch.export`` writes it: graphdbg never imports a dump's
  classes), ``source_fn_stack`` from the node's target, where the node has none.

The fakes of a graph with symbolic sizes are static here (the inputs' sizes); through
``torch.compile`` Dynamo's own are symbolic, as at capture.
"""

from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any

import torch.fx as fx

from graphdbg.replay.mutation import mutated_inputs

if TYPE_CHECKING:
    from graphdbg.store.schema import NodeInfo

# the keys a graph Dynamo hands a backend carries (``val`` and ``tensor_meta`` as AOT and
# ShapeProp add them), in the order tests and docs name them
DYNAMO_META_KEYS = ("example_value", "val", "tensor_meta", "stack_trace", "source_fn_stack", "nn_module_stack")


def with_dynamo_meta(gm: fx.GraphModule, inputs: list[Any], dump: Any = None,
                     values: dict[str, Any] | None = None) -> fx.GraphModule:
    """``gm`` (changed in place) with Dynamo's node meta: see the module's docstring.
    ``dump``: where the recorded modules are read (its manifest's ``graph.node_info``);
    ``values``: every node's real value, when the caller has them (no run is then needed for an
    op without a fake kernel). Never raises for a graph it can't propagate: the nodes it could
    not reach keep no value meta, as a graph Dynamo could not trace would not exist."""
    return dynamo_meta(gm, inputs, recorded_meta(gm, dump), values, lambda: mutated_inputs(gm))


def recorded_meta(gm: fx.GraphModule, dump: Any, name_only: bool = False) -> dict[str, dict[str, Any]]:
    """Per node name, the ``stack_trace`` (from the source line the dump recorded,
    ``graphdbg_source``) and ``nn_module_stack`` (from the module it recorded, ``node_info``) the
    node gets: ``dynamo_meta``'s ``recorded``. ``name_only``: the source file by its name alone
    (a file graphdbg writes for the user has no absolute path)."""
    info = _node_info(dump)
    out: dict[str, dict[str, Any]] = {}
    for node in gm.graph.nodes:
        meta: dict[str, Any] = {}
        trace = _stack_trace(node.meta.get("graphdbg_source"), name_only)
        if trace:
            meta["stack_trace"] = trace
        mod = info.get(node.name)
        if mod is not None and mod.module:
            meta["nn_module_stack"] = {mod.module: (mod.module, mod.module_type or "")}
        if meta:
            out[node.name] = meta
    return out


def meta_source() -> str:
    """``dynamo_meta``'s source with the functions it calls, for the files graphdbg writes
    (repro.py imports nothing of graphdbg): the one definition, written whole into them."""
    return "\n\n".join(inspect.getsource(f) for f in _META_FUNCTIONS)


def reads_meta(backend_name: str, pre_passes: list[Any]) -> bool:
    """Whether anything handed the graph can read its meta: ``eager`` alone reads none (and the
    fakes cost an import of Dynamo, seconds, that a replay under eager never pays)."""
    return bool(pre_passes) or backend_name != "eager"


def _node_info(dump: Any) -> dict[str, NodeInfo]:
    return dump.manifest.graph.node_info if dump is not None else {}


# ---- the definition written whole into repro.py (``meta_source``): no annotations, no name of
# graphdbg's, each function's imports inside it, its names prefixed so that they clash with none
# of the file's own


def dynamo_meta(gm, inputs, recorded=None, values=None, writes=None):  # no annotations: written as is into repro.py
    """``gm`` (changed in place, returned) with the node meta Dynamo gives a backend: the one
    definition of it, for graphdbg's replays (``with_dynamo_meta``) and the repro.py it writes.

    Inside Dynamo's compile (the graph came through ``torch.compile``) Dynamo's own
    ``example_value`` fakes are kept and ``val`` and ``tensor_meta`` follow them; a graph carrying
    fakes of one mode on every node keeps them; any other graph gets them by fake propagation in
    one new ``FakeTensorMode``, or, where an op has no fake kernel, from the nodes' real values
    (``values``, else one eager run on ``inputs``, copying those at the positions ``writes()``
    gives, the random state left as found). ``recorded``: {node name: {"stack_trace": ...,
    "nn_module_stack": ...}}, set where a node has none; ``source_fn_stack`` from its target.
    """
    # here: this function and those it calls are the whole definition in the files they are written into
    from torch._guards import TracingContext

    for node in gm.graph.nodes:
        _meta_sources(gm, node, (recorded or {}).get(node.name) or {})
    ctx = TracingContext.try_get()
    if getattr(ctx, "fake_mode", None) is not None and any("example_value" in n.meta for n in gm.graph.nodes):
        for node in gm.graph.nodes:  # Dynamo's own fakes: ``val`` and ``tensor_meta`` follow them
            if "example_value" in node.meta:
                _meta_set_value(node, node.meta["example_value"], keep_example=True)
        return gm
    if not _meta_one_mode(gm):  # not already given (a candidate built with them), complete, of one mode
        _meta_propagate(gm, list(inputs), values, writes)
    return gm


def _meta_sources(gm, node, recorded):
    """``stack_trace``, ``nn_module_stack`` (as recorded) and ``source_fn_stack`` where the node has none."""
    for key in ("stack_trace", "nn_module_stack"):
        if recorded.get(key) and not node.meta.get(key):
            node.meta[key] = recorded[key]
    if node.op in ("call_function", "call_method", "call_module") and "source_fn_stack" not in node.meta:
        target = node.target
        if node.op == "call_module":
            try:
                target = type(gm.get_submodule(str(node.target)))
            except AttributeError:
                pass
        node.meta["source_fn_stack"] = [(node.name, target)]


def _meta_one_mode(gm):
    """Whether every node's ``example_value`` and ``val`` are fakes of one mode."""
    modes = set()
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if "example_value" not in node.meta or "val" not in node.meta:
            return False
        for value in (node.meta["example_value"], node.meta["val"]):
            for t in _meta_tensors(value):
                if getattr(t, "fake_mode", None) is None:
                    return False
                modes.add(id(t.fake_mode))
    return len(modes) == 1


def _meta_tensors(value):
    # here: written as is into repro.py, with its imports
    import torch

    found = []
    torch.fx.node.map_aggregate(value, lambda v: found.append(v) if isinstance(v, torch.Tensor) else None)
    return found


def _meta_propagate(gm, inputs, values, writes):
    """Every node run on fakes of one new mode; where an op has none, the real values made fake."""
    # here: written as is into repro.py, with its imports
    import torch
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # a shape environment, as Dynamo's mode has: a data-dependent size (nonzero) becomes a symbol
    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    for node in gm.graph.nodes:  # meta a cut or a copy carried over from another graph is not this graph's
        for key in ("example_value", "val", "tensor_meta"):
            node.meta.pop(key, None)

    def fake(v):
        return mode.from_tensor(v, static_shapes=True) if isinstance(v, torch.Tensor) else v

    reached = set()

    class FakeProp(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if n.op != "output":
                _meta_set_value(n, result)
                reached.add(n.name)
            return result

        def fetch_attr(self, target):
            return fake(super().fetch_attr(target))

    try:
        with mode:
            FakeProp(gm).run(*[fake(v) for v in inputs])
        return
    except Exception:  # an op without a fake kernel, a size only data tells: the real values instead
        pass
    if values is None:
        _meta_real_run(gm, inputs, fake, reached, writes)
        return
    for node in gm.graph.nodes:
        if node.op != "output" and node.name not in reached and node.name in values:
            _meta_set_fake(node, values[node.name], fake)


def _meta_real_run(gm, inputs, fake, reached, writes):
    """One eager run of the graph, on copies of the inputs it writes (all, when ``writes`` is
    None); each value made fake as it comes (and freed as eager frees it), for the nodes fake
    propagation did not reach; the random state left as found."""
    # here: written as is into repro.py, with its imports
    import torch
    import torch.fx

    written = writes() if writes is not None else range(len(inputs))

    def copy(v):  # a fresh copy with its autograd standing (requires_grad, non-leaf), as every run gets
        c = v.detach().clone().requires_grad_(v.requires_grad)
        return c if v.is_leaf else c.clone()

    class RealToFake(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if n.op != "output" and n.name not in reached:
                _meta_set_fake(n, result, fake)
            return result

    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda):  # the run the backend's is judged against draws from the same state
        try:
            RealToFake(gm).run(*[copy(v) if i in written and isinstance(v, torch.Tensor) else v for i, v in enumerate(inputs)])
        except Exception:  # as far as it got: the nodes after keep no value meta
            pass


def _meta_set_fake(node, value, fake):
    # here: written as is into repro.py, with its imports
    import torch

    try:
        _meta_set_value(node, torch.fx.node.map_aggregate(value, fake))
    except Exception:  # a value fake tensors can't stand for (a subclass): no value meta, as Dynamo would have none
        pass


def _meta_set_value(node, value, keep_example=False):
    """``example_value`` (unless ``keep_example``), ``val`` and ``tensor_meta`` of ``value``."""
    # here: written as is into repro.py, with its imports
    import torch
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    if not keep_example:
        node.meta["example_value"] = value
    node.meta.setdefault("val", value)
    found = []

    def meta_of(v):
        if isinstance(v, torch.Tensor):
            found.append(v)
            return _extract_tensor_metadata(v)
        return v

    try:
        tensor_meta = torch.fx.node.map_aggregate(value, meta_of)
    except Exception:  # a tensor subclass whose strides or memory format can't be asked
        return
    if found and "tensor_meta" not in node.meta:
        node.meta["tensor_meta"] = tensor_meta


_META_FUNCTIONS = (dynamo_meta, _meta_sources, _meta_one_mode, _meta_tensors, _meta_propagate, _meta_real_run,
                   _meta_set_fake, _meta_set_value)


def stack_trace_from_source(node: fx.Node) -> None:
    """``stack_trace`` from the source line a parsed dump keeps as ``graphdbg_source``, where the
    node has none (``print_readable`` writes its '# File: ...' comments from it)."""
    trace = _stack_trace(node.meta.get("graphdbg_source"))
    if trace and not node.meta.get("stack_trace"):
        node.meta["stack_trace"] = trace


def _stack_trace(src: Any, name_only: bool = False) -> str | None:
    """A ``stack_trace`` of one frame, from a recorded ``graphdbg_source``; None without a file."""
    if not isinstance(src, dict) or not src.get("file"):
        return None
    file = os.path.basename(str(src["file"])) if name_only else src["file"]
    return (f'  File "{file}", line {src.get("line", 0)}, in {src.get("fn") or src.get("function") or "forward"}\n'
            f'    {src.get("code", "")}\n')


__all__ = ["DYNAMO_META_KEYS", "dynamo_meta", "meta_source", "reads_meta", "recorded_meta", "stack_trace_from_source",
           "with_dynamo_meta"]
