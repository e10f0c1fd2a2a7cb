"""Ops that don't check their bounds (issue 42): refused in a replayed graph by a rule read from
the op's schema (``allow_list.unchecked_memory``), swept over every ATen overload; and a method
read with getattr can't be handed to a higher-order op, which would call it unchecked."""

from __future__ import annotations

import pytest
import torch

from graphdbg.graph import allow_list
from graphdbg.graph.index_bounds import index_bound

PRINTED = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 8][8, 1]cpu", L_i_: "i64[3][1]cpu"):
        l_x_ = L_x_
        l_i_ = L_i_
        relu: "f32[4, 8][8, 1]cpu" = torch.relu(l_x_)
{lines}
        return (relu,)
'''

# Attacks of this test's own (the are _reshape_alias, _sparse_coo_tensor_unsafe, ...):
# each reads or writes outside a tensor when run.
ATTACKS = {
    "reshape_alias_copy": "pwn = torch.ops.aten._reshape_alias_copy.default(relu, [4096], [4096])",
    "nested_view": "pwn = torch.ops.aten._nested_view_from_buffer.default(relu.flatten(), l_i_.view(3, 1), l_i_.view(3, 1), l_i_)",
    "csr_unsafe": "pwn = torch.ops.aten._sparse_csr_tensor_unsafe.default(l_i_, l_i_, l_i_.float(), [2, 2])",
    "sparse_packet": "pwn = torch.ops.aten.sparse_coo_tensor(l_i_.view(1, 3), l_i_.float(), [2])",
    "index_put_impl_kw": "pwn = torch.ops.aten._index_put_impl_.default(relu, [l_i_], relu[0], accumulate=False, unsafe=True)",
    "embedding_max_norm": "pwn = torch.nn.functional.embedding(l_i_, relu, None, 1.0)",
    "set_method_source": "pwn = l_x_.set_(relu)",
    "unpool_function": "pwn = torch.nn.functional.max_unpool1d(relu.view(1, 4, 8), l_i_.expand(32).reshape(1, 4, 8), 2)",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_ops_that_read_or_write_unchecked_are_refused_with_one_line(attack, tmp_path, cli):
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines=" " * 8 + ATTACKS[attack]))
    r = cli("replay", path, "--backend", "eager")
    lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
    assert r.code == 2, r
    assert len(lines) == 1 and lines[0].startswith("graphdbg: error: ") and "refusing" in lines[0], r
    assert "Traceback" not in r.err


def test_every_aten_overload_is_judged_by_the_schema_rule():
    """The sweep: every overload the rule refuses is refused as a graph target (and its packet,
    and its torch.* binding if any); ops Dynamo and AOTAutograd write every day are not."""
    refused = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::") or not allow_list.unchecked_memory(schema):
            continue
        name = schema.name.split("::", 1)[1]
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        overload = getattr(packet, schema.overload_name or "default", None)
        assert overload is None or allow_list.refusal(overload), schema
        assert allow_list.refusal(packet), schema
        binding = getattr(torch._C._VariableFunctions, name, None) or getattr(torch._C._nn, name, None)
        assert binding is None or allow_list.refusal(binding), schema
        refused.append(name)
    # the classes the rule covers, by ops the issue does not name
    for name in ("_nested_view_from_buffer", "_reshape_alias_copy", "_sparse_bsr_tensor_unsafe", "sparse_csc_tensor",
                 "max_unpool3d"):
        assert name in refused, name
    every_day = [torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.as_strided.default,
                 torch.ops.aten.index_put_.default, torch.ops.aten._unsafe_index.Tensor, torch.ops.aten.embedding.default,
                 torch.ops.aten.convolution.default, torch.ops.aten.max_pool2d_with_indices.default,
                 torch.ops.aten.index_select.default, torch.ops.aten.gather.default, torch.ops.aten.scatter_add.default,
                 torch.ops.aten.empty_strided.default, torch.ops.aten.new_empty_strided.default, torch.ops.aten.slice.Tensor,
                 torch.ops.aten._index_put_impl_.default, torch.nn.functional.embedding, torch.nn.functional.max_pool2d,
                 torch.Tensor.index_put_, torch.ops.aten.unfold.default]
    # autograd's own index backwards run (every LM's and CNN's training graph calls them): their
    # indices are checked per call before the graph runs (graph/index_bounds.py, tests below)
    every_day += [torch.ops.aten.embedding_dense_backward.default, torch.ops.aten.max_pool2d_with_indices_backward.default,
                  torch.ops.aten.adaptive_max_pool2d_backward.default, torch.ops.aten.max_pool3d_with_indices_backward.default]
    assert [op for op in every_day if allow_list.refusal(op)] == []


@pytest.mark.parametrize("op", sorted(allow_list.BOUNDS_CHECKED))
def test_views_left_to_torch_do_check_their_bounds(op):
    """BOUNDS_CHECKED is a claim about torch: a view past its storage is an error there."""
    ns, name = op.split("::")
    fn = getattr(getattr(torch.ops, ns), name).default
    x = torch.ones(4)
    args = {"as_strided_scatter": (x, torch.ones(64), [64], [64])}.get(name, (x, [64], [64]))
    with pytest.raises(RuntimeError):
        fn(*args)


@pytest.mark.slow
def test_a_method_read_with_getattr_is_not_handed_to_a_higher_order_op(tmp_path, cli):
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines="\n".join(" " * 8 + ln for ln in [
        'sign = getattr(l_x_, "is_signed")',
        "pwn = torch.ops.higher_order.wrap(sign)"])))
    r = cli("replay", path, "--backend", "eager")
    assert r.code == 2 and "a method read through getattr ('is_signed')" in r.err, r
    # the same attribute read as data still works
    path.write_text(PRINTED.format(lines=" " * 8 + 'kind = getattr(l_x_.device, "type")'))
    assert cli("replay", path, "--backend", "eager").code == 0


# An LM's embedding backward and a CNN's pooling backward, as AOTAutograd prints them: the
# indices are graph inputs (saved by the forward), the bound is a literal or an input's shape.
EMBEDDING_BACKWARD = '''class GraphModule(torch.nn.Module):
    def forward(self, primals_1: "i64[2, 6][6, 1]cpu", tangents_1: "f32[2, 6, 8][48, 8, 1]cpu"):
        view: "i64[12][1]cpu" = torch.ops.aten.view.default(primals_1, [12])
        view_1: "f32[12, 8][8, 1]cpu" = torch.ops.aten.view.default(tangents_1, [12, 8])
{lines}
        embedding_dense_backward: "f32[100, 8][8, 1]cpu" = torch.ops.aten.embedding_dense_backward.default(view_1, {index}, 100, -1, False)
        return (embedding_dense_backward,)
'''
POOL_BACKWARD = '''class GraphModule(torch.nn.Module):
    def forward(self, primals_1: "f32[1, 2, 4, 4][32, 16, 4, 1]cpu", getitem_1: "i64[1, 2, 2, 2][8, 4, 2, 1]cpu", tangents_1: "f32[1, 2, 2, 2][8, 4, 2, 1]cpu"):
        max_pool2d_with_indices_backward: "f32[1, 2, 4, 4][32, 16, 4, 1]cpu" = torch.ops.aten.max_pool2d_with_indices_backward.default(tangents_1, primals_1, [2, 2], [2, 2], [0, 0], [1, 1], False, getitem_1)
        return (max_pool2d_with_indices_backward,)
'''


def _saved_with(tmp_path, text, index_input, values):
    """The printed graph as a dump whose input ``index_input`` holds ``values`` (an attack's
    own indices: a printed graph's inputs are synthesized in range)."""
    from graphdbg.case import save_case
    from graphdbg.formats import load

    tmp_path.mkdir()
    path = tmp_path / "rank0_0.py"
    path.write_text(text)
    case = load(path).case()
    case.inputs[index_input] = torch.tensor(values, dtype=torch.int64).reshape(case.inputs[index_input].shape)
    case.modified = True
    return save_case(case, tmp_path / "dump")


@pytest.mark.slow
@pytest.mark.parametrize("text, index_input, good, bad", [
    (EMBEDDING_BACKWARD.format(lines="", index="view"), 0, [3] * 12, [3] * 11 + [100]),
    (EMBEDDING_BACKWARD.format(lines="", index="view"), 0, [0] * 12, [-1] + [0] * 11),
    (POOL_BACKWARD, 1, [0, 5, 10, 15, 1, 6, 11, 14], [0, 5, 10, 15, 1, 6, 11, 16]),
], ids=["embedding-past-the-end", "embedding-negative", "max-pool-past-the-plane"])
def test_an_index_backward_replays_with_indices_in_range_and_refuses_one_out_of_range(text, index_input, good, bad,
                                                                                     tmp_path, cli):
    ok = _saved_with(tmp_path / "good", text, index_input, good)
    r = cli("replay", ok, "--backend", "aot_eager", "--no-isolate")
    assert r.code == 0, r
    attack = _saved_with(tmp_path / "bad", text, index_input, bad)
    for command in (["replay", attack, "--backend", "eager"], ["bisect", "nodes", attack, "--backend", "eager"]):
        r = cli(*command)
        lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
        assert r.code == 2 and len(lines) == 1 and "got an index out of range" in lines[0], (command, r)
        assert text.split("torch.ops.aten.")[-1].split(".")[0] in lines[0]


def test_indices_the_graph_computes_for_an_index_backward_are_refused(tmp_path, cli):
    """A view keeps the values it is given (checked on the input); arithmetic or a cast to
    another dtype makes new ones, which graphdbg can't check before the graph runs."""
    for line, index in (('mul: "i64[12][1]cpu" = torch.ops.aten.mul.Tensor(view, 1000)', "mul"),
                        ('small: "i8[12][1]cpu" = torch.ops.aten._to_copy.default(view, dtype=torch.int8)', "small"),
                        ('as8: "i8[96][1]cpu" = torch.ops.aten.view.dtype(view, torch.int8)', "as8")):
        path = tmp_path / "rank0_0.py"
        path.write_text(EMBEDDING_BACKWARD.format(lines=" " * 8 + line, index=index))
        r = cli("replay", path, "--backend", "eager", "--no-isolate")  # the same check runs in a replay child
        assert r.code == 2 and "embedding_dense_backward writes by indices the graph computes" in r.err, r


def test_index_backwards_without_a_bound_graphdbg_can_derive_are_refused():
    """The embedding-bag backwards also index by offsets and bags graphdbg can't bound: refused."""
    aten = torch.ops.aten
    for op in (aten._embedding_bag_backward.default, aten._embedding_bag_dense_backward.default,
               aten._embedding_bag_per_sample_weights_backward.default):
        assert "can't check" in (allow_list.refusal(op) or ""), op
    bounds = {name: index_bound(getattr(aten, name).default._schema) for name in
              ("embedding_dense_backward", "max_pool3d_with_indices_backward", "adaptive_max_pool2d_backward",
               "cummaxmin_backward", "value_selecting_reduction_backward")}
    assert {k: (b.kind, b.dims) for k, b in bounds.items()} == {
        "embedding_dense_backward": ("count", 0), "max_pool3d_with_indices_backward": ("plane", 3),
        "adaptive_max_pool2d_backward": ("plane", 2), "cummaxmin_backward": ("dim", 0),
        "value_selecting_reduction_backward": ("sizes", 0)}
