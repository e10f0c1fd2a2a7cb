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

from typing import Any

import torch
import torch.fx as fx
from torch.fx.node import map_aggregate

from graphdbg.judge.randomness import rng_state, set_rng_state
from graphdbg.rebuild.inputs import clone_value
from graphdbg.replay.mutation import mutated_inputs

# the keys a graph Dynamo hands a backend carries (``val`` and ``tensor_meta`` as AOT and
# ShapeProp add them), in the order tests and docs name them
DYNAMO_META_KEYS = ("example_value", "val", "tensor_meta", "stack_trace", "source_fn_stack", "nn_module_stack")
_VALUE_KEYS = ("example_value", "val", "tensor_meta")


def with_dynamo_meta(gm: fx.GraphModule, inputs: list[Any], dump: Any = None,
                     values: dict[str, Any] | None = None) -> fx.GraphModule:
    """``gm`` (changed in place) with Dynamo's node meta: see the module's docstring.
    ``dump``: where the recorded modules are read (its manifest's ``graph.node_info``);
    ``values``: every node's real value, when the caller has them (no run is then needed for an
    op without a fake kernel). Never raises for a graph it can't propagate: the nodes it could
    not reach keep no value meta, as a graph Dynamo could not trace would not exist."""
    info = _node_info(dump)
    for node in gm.graph.nodes:
        _source_meta(gm, node, info.get(node.name))
    dynamo_mode = _dynamo_fake_mode()
    if dynamo_mode is not None and _has_example_values(gm):
        for node in gm.graph.nodes:  # Dynamo's own fakes: ``val`` and ``tensor_meta`` follow them
            if "example_value" in node.meta:
                _set_value(node, node.meta["example_value"], keep_example=True)
        return gm
    if _one_mode(gm) is not None:  # already given (a candidate built with them), complete, of one mode
        return gm
    _propagate(gm, inputs, values)
    return gm


def reads_meta(backend_name: str, pre_passes: list[Any]) -> bool:
    """Whether anything handed the graph can read its meta: ``eager`` alone reads none (and the
    fakes cost an import of Dynamo, seconds, that a replay under eager never pays)."""
    return bool(pre_passes) or backend_name != "eager"


def _node_info(dump: Any) -> dict[str, dict[str, Any]]:
    manifest = getattr(dump, "manifest", None) or {}
    info = (manifest.get("graph") or {}).get("node_info") or {}
    return info if isinstance(info, dict) else {}


def _dynamo_fake_mode() -> Any:
    """The fake mode of the Dynamo compile this backend call is inside, else None."""
    from torch._guards import TracingContext  # lazy: a replay under eager never imports Dynamo's machinery

    ctx = TracingContext.try_get()
    return getattr(ctx, "fake_mode", None) if ctx is not None else None


def _has_example_values(gm: fx.GraphModule) -> bool:
    return any("example_value" in n.meta for n in gm.graph.nodes)


def _one_mode(gm: fx.GraphModule) -> Any:
    """The fake mode every node's ``example_value`` and ``val`` belong to, when each node has
    both and they share one; else None."""
    modes: set[int] = set()
    mode = None
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if "example_value" not in node.meta or "val" not in node.meta:
            return None
        for v in (node.meta["example_value"], node.meta["val"]):
            for t in _tensors(v):
                m = getattr(t, "fake_mode", None)
                if m is None:
                    return None
                modes.add(id(m))
                mode = m
    return mode if len(modes) == 1 else None


def _tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_aggregate(value, lambda v: found.append(v) if isinstance(v, torch.Tensor) else None)
    return found


class _FakeProp(fx.Interpreter):
    """Runs the graph on fakes of one mode; each node's fake value is written as it comes."""

    def __init__(self, gm: fx.GraphModule, mode: Any):
        super().__init__(gm)
        self.mode = mode
        self.reached: set[str] = set()

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "output":
            _set_value(n, result)
            self.reached.add(n.name)
        return result

    def fetch_attr(self, target: str) -> Any:
        value = super().fetch_attr(target)
        return self.mode.from_tensor(value, static_shapes=True) if isinstance(value, torch.Tensor) else value


def _new_fake_mode() -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode  # lazy: only a graph handed over directly needs one
    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # lazy: half a second of import, for the same graphs

    # a shape environment, as Dynamo's mode has: a data-dependent size (nonzero) becomes a symbol
    return FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)


def _propagate(gm: fx.GraphModule, inputs: list[Any], values: dict[str, Any] | None) -> None:
    mode = _new_fake_mode()
    for node in gm.graph.nodes:  # meta a cut or a copy carried over from another graph is not this graph's
        for key in _VALUE_KEYS:
            node.meta.pop(key, None)
    fake = lambda v: mode.from_tensor(v, static_shapes=True) if isinstance(v, torch.Tensor) else v  # noqa: E731
    prop = _FakeProp(gm, mode)
    try:
        with mode:
            prop.run(*[fake(v) for v in inputs])
        return
    except Exception:  # an op without a fake kernel, a size only data tells: the real values instead
        pass
    if values is None:  # one eager run, each value made fake as it comes (and freed as eager frees it)
        _RealToFake(gm, fake, prop.reached).run_quietly(inputs)
        return
    for node in gm.graph.nodes:
        if node.op != "output" and node.name not in prop.reached and node.name in values:
            _set_fake(node, values[node.name], fake)


def _set_fake(node: fx.Node, value: Any, fake: Any) -> None:
    try:
        _set_value(node, map_aggregate(value, fake))
    except Exception:  # a value fake tensors can't stand for (a subclass): no value meta, as Dynamo would have none
        pass


class _RealToFake(fx.Interpreter):
    """One eager run of the graph, on copies of the inputs it writes; each node's value is made
    fake as it comes, for the nodes fake propagation did not reach."""

    def __init__(self, gm: fx.GraphModule, fake: Any, reached: set[str]):
        super().__init__(gm)  # values freed after their last use, as in an eager run
        self.fake = fake
        self.reached = reached

    def run_node(self, n: fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "output" and n.name not in self.reached:
            _set_fake(n, result, self.fake)
        return result

    def run_quietly(self, inputs: list[Any]) -> None:
        mutated = mutated_inputs(self.module)
        state = rng_state()  # the run the backend's is judged against draws from the same state
        try:
            self.run(*[clone_value(v) if i in mutated else v for i, v in enumerate(inputs)])
        except Exception:  # as far as it got: the nodes after keep no value meta
            pass
        finally:
            set_rng_state(state)


def _set_value(node: fx.Node, value: Any, keep_example: bool = False) -> None:
    if not keep_example:
        node.meta["example_value"] = value
    node.meta.setdefault("val", value)
    from torch.fx.passes.shape_prop import _extract_tensor_metadata  # lazy: with the fakes that need it

    found = []

    def meta_of(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            found.append(v)
            return _extract_tensor_metadata(v)
        return v

    try:
        tensor_meta = map_aggregate(value, meta_of)
    except Exception:  # a tensor subclass whose strides or memory format can't be asked
        return
    if found and "tensor_meta" not in node.meta:
        node.meta["tensor_meta"] = tensor_meta


def _source_meta(gm: fx.GraphModule, node: fx.Node, info: dict[str, Any] | None) -> None:
    """``stack_trace``, ``nn_module_stack`` and ``source_fn_stack`` where the node has none."""
    stack_trace_from_source(node)
    if info and info.get("module") and not node.meta.get("nn_module_stack"):
        path = str(info["module"])
        node.meta["nn_module_stack"] = {path: (path, str(info.get("module_type") or ""))}
    if node.op in ("call_function", "call_method", "call_module") and "source_fn_stack" not in node.meta:
        target: Any = node.target
        if node.op == "call_module":
            try:
                target = type(gm.get_submodule(str(node.target)))
            except AttributeError:
                pass
        node.meta["source_fn_stack"] = [(node.name, target)]


def stack_trace_from_source(node: fx.Node) -> None:
    """``stack_trace`` from the source line a parsed dump keeps as ``graphdbg_source``, where the
    node has none (``print_readable`` writes its '# File: ...' comments from it)."""
    src = node.meta.get("graphdbg_source")
    if not src or node.meta.get("stack_trace") or not src.get("file"):
        return
    node.meta["stack_trace"] = (f'  File "{src["file"]}", line {src.get("line", 0)}, in {src.get("fn") or src.get("function") or "forward"}\n'
                                f'    {src.get("code", "")}\n')


__all__ = ["DYNAMO_META_KEYS", "reads_meta", "stack_trace_from_source", "with_dynamo_meta"]
