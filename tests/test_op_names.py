"""One definition of a node's target's name (judge/op_names): it gives, on every node of the
bundled dumps and on targets of each kind, exactly what the copies it replaced gave.

The copies below are the former definitions, kept here only as the reference (issue 52, part 3):
graph/hashing.target_name, replay/mutation.call_name (= judge/randomness._name),
rebuild/stand_ins._node_fn_name (= replay/uninitialised._fn_name), rebuild/synthesize._fn_name, and
the OpOverload/packet splits once inline in graph/kernels, graph/allow_list, graph/index_bounds,
rebuild/stand_ins, replay/uninitialised and minify/repro.
"""

from __future__ import annotations

import functools
import operator
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx as fx

import graphdbg
from graphdbg.graph.kernels import qualified_name
from graphdbg.judge.op_names import call_name, op_name, op_parts
from graphdbg.rebuild import synthesize

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# The former definitions ------------------------------------------------------------------------

def old_target_name(node: fx.Node) -> str:  # graph/hashing.target_name
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if node.op in ("call_module", "get_attr", "placeholder", "output"):
        return str(t)
    if isinstance(t, torch._ops.OpOverload):
        return f"torch.ops.{t.namespace}.{t._schema.name.split('::')[-1]}.{t._overloadname}"
    if isinstance(t, torch._ops.OpOverloadPacket):
        return f"torch.ops.{t._qualified_op_name.replace('::', '.')}"
    if isinstance(t, torch._ops.HigherOrderOperator):
        return f"torch.ops.higher_order.{t.name()}"
    module = getattr(t, "__module__", None) or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or repr(t)
    if module in ("_operator", "operator"):
        module = "operator"
    if name.startswith("_VariableFunctionsClass."):
        module, name = "torch", name.split(".", 1)[1]
    if module.startswith("torch._C._VariableFunctions") or module == "torch._C":
        module = "torch"
    return f"{module}.{name}" if module else name


def old_call_name(node: fx.Node) -> str:  # replay/mutation.call_name, judge/randomness._name
    target = node.target
    if node.op == "call_method":
        return str(target)
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    return getattr(target, "__name__", "") or ""


def old_fn_name(node: fx.Node) -> str:  # rebuild/stand_ins._node_fn_name, replay/uninitialised._fn_name
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        return getattr(node.target, "__name__", "")
    return ""


def old_synthesize_name(target: Any) -> str:  # rebuild/synthesize._fn_name, graph/index_bounds inline
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    return getattr(target, "__name__", "")


def old_op_splits(t: Any) -> dict[str, Any]:
    """The inline splits, on an OpOverload or OpOverloadPacket."""
    schema = t._schema.name if isinstance(t, torch._ops.OpOverload) else t._qualified_op_name
    ns, _, op = schema.partition("::")
    out = {
        "collective": f"torch.ops.{ns}.{op}",  # rebuild/stand_ins
        "allow_name": schema,  # graph/allow_list._op_refusal
        "allow_full": f"{schema}.{t._overloadname}" if isinstance(t, torch._ops.OpOverload) and t._overloadname else schema,
        "index_bounds": schema.split("::")[-1],  # graph/index_bounds
        "allocator": t.__name__.split(".")[0],  # replay/uninitialised
    }
    if isinstance(t, torch._ops.OpOverload):  # minify/repro._global_line; graph/kernels.qualified_name
        out["repro"] = f"torch.ops.{t.namespace}.{t._schema.name.split('::')[-1]}.{t._overloadname}"
        out["qualified"] = t._schema.name if t._overloadname == "default" else f"{t._schema.name}.{t._overloadname}"
    else:
        out["repro"] = f"torch.ops.{t._qualified_op_name.replace('::', '.')}"
    return out


def new_op_splits(t: Any) -> dict[str, Any]:
    ns, op, over = op_parts(t)
    out = {
        "collective": op_name(t, python=True),
        "allow_name": f"{ns}::{op}",
        "allow_full": f"{ns}::{op}.{over}" if over else f"{ns}::{op}",
        "index_bounds": op_name(t),
        "allocator": op_name(t),
        "repro": op_name(t, overload=True, python=True),
    }
    if isinstance(t, torch._ops.OpOverload):
        out["qualified"] = qualified_name(t)
    return out


def check(nodes: list[fx.Node]) -> int:
    """Assert old == new on every node (and its target); the number of nodes compared."""
    for n in nodes:
        assert call_name(n, overload=True, python=True) == old_target_name(n), n.format_node()
        assert call_name(n) == old_call_name(n), n.format_node()
        assert call_name(n, overload=True) == old_fn_name(n), n.format_node()
        if n.op == "call_function":
            assert op_name(n.target) == old_synthesize_name(n.target), n.format_node()
            if op_parts(n.target) is not None:
                assert new_op_splits(n.target) == old_op_splits(n.target), n.format_node()
    return len(nodes)


# Targets of each kind --------------------------------------------------------------------------

@torch.library.custom_op("graphdbg_names_test::scale", mutates_args=())
def _scale(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


def _python_function(x: Any) -> Any:
    return x


class _Holder:
    def method(self, x: Any) -> Any:
        return x

    @staticmethod
    def static(x: Any) -> Any:
        return x


def _own_targets() -> list[Any]:
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_functional, triton_kernel_wrapper_mutation
    aten = torch.ops.aten
    return [
        aten.add.Tensor, aten.add, aten.add_.Tensor, aten.empty.memory_format, aten.zeros.default, aten.view.default,
        aten.native_dropout.default, aten.sum.dim_IntList, aten.copy_.default, torch.ops.prims.convert_element_type.default,
        torch.ops._c10d_functional.all_reduce.default, torch.ops._c10d_functional.all_reduce,
        torch.ops.graphdbg_names_test.scale.default, torch.ops.graphdbg_names_test.scale,
        torch.ops.higher_order.cond, torch.ops.higher_order.wrap_with_autocast, triton_kernel_wrapper_mutation,
        triton_kernel_wrapper_functional,
        len, getattr, isinstance, operator.getitem, operator.add, operator.setitem, torch.relu, torch.add, torch.empty,
        torch.nn.functional.relu, torch.nn.functional.dropout, torch._C._nn.linear, torch.sym_int, torch._assert,
        _python_function, lambda x: x, _Holder().method, _Holder.static, functools.partial(_python_function),
        torch.Tensor.add, torch.Tensor.add_,
    ]


def _own_graph() -> fx.Graph:
    g = fx.Graph()
    x = g.placeholder("x")
    for i, t in enumerate(_own_targets()):
        g.call_function(t, (x,), name=f"call{i}")  # a partial has no __name__ for fx to name the node after
    for method in ("add", "add_", "view", "__getitem__", "copy_", "new_empty"):
        g.call_method(method, (x,))
    g.call_module("layer.0", (x,))
    g.get_attr("weight")
    g.output(x)
    return g


def test_one_name_per_target_kind_gives_what_each_copy_gave():
    assert check(list(_own_graph().nodes)) == len(_own_targets()) + 10
    assert call_name(next(iter(_own_graph().nodes))) == ""  # a placeholder calls nothing
    assert op_name(torch.ops.aten.add.Tensor, overload=True) == "add.Tensor"
    assert op_name(torch.ops.graphdbg_names_test.scale, python=True) == "torch.ops.graphdbg_names_test.scale"
    assert op_parts(len) is None


def _fixture_graphs() -> list[fx.GraphModule]:
    """Every dump under fixtures/ that loads and rebuilds: folders, and files one of a folder."""
    skip = {"make_fixture.py", "build.py", "__init__.py", "programs.py", "training.py", "training_steps.py",
            "split_backend.py", "side_stream_program.py"}
    out, loaded = [], []
    for root, _, files in sorted(os.walk(FIXTURES)):
        if any(root.startswith(f"{d}{os.sep}") for d in loaded):
            continue
        try:
            out.append(graphdbg.load(root).case().gm)
            loaded.append(root)
            continue
        except Exception:  # not a dump folder: try its files
            pass
        for f in sorted(files):
            if f.endswith((".py", ".txt")) and f not in skip:
                try:
                    out.append(graphdbg.load(os.path.join(root, f)).case().gm)
                except Exception:  # not a dump, or one this machine can't rebuild
                    continue
    return out


@pytest.mark.slow
def test_one_name_gives_what_each_copy_gave_on_every_node_of_the_bundled_dumps(monkeypatch):
    # Only the graphs' nodes are compared: the synthesized inputs are zeros (no random fill of the
    # real models' weights, which was most of this test's time), the nodes are the same.
    monkeypatch.setattr(synthesize, "_random_limit", lambda device, given: 0)
    graphs = _fixture_graphs()
    nodes = [n for gm in graphs for m in gm.modules() if isinstance(m, fx.GraphModule) for n in m.graph.nodes]
    assert len(graphs) >= 150 and check(nodes) >= 8000
    kinds = {type(n.target).__name__ for n in nodes if n.op == "call_function"}
    assert {"OpOverload", "builtin_function_or_method"} <= kinds, kinds
