"""A missing custom op's stand-in returns what the graph reads from it.

The graphs here are printed the way Thunder's splitter prints SGLang's gpt-oss graphs: the fused
AllReduce+RMSNorm op returns ``(out, residual)`` in one piece and the next piece indexes it. The
op's name says "allreduce", but the graph's use of its result decides the stand-in's outputs.
"""

from __future__ import annotations

import pytest

import graphdbg

SPLIT = '''
class GraphModule(torch.nn.Module):
    def forward(self, l_x_: "bf16[{n}, 64]", l_residual_: "bf16[{n}, 64]", l_weight_: "bf16[64]"):
        inductor_0 = self.inductor_0(l_x_, l_residual_, l_weight_);  l_x_ = l_residual_ = l_weight_ = None
        thunder_1 = self.thunder_1(inductor_0);  inductor_0 = None
        return (thunder_1,)

    class inductor_0(torch.nn.Module):
        def forward(self, l_x_: "bf16[{n}, 64]", l_residual_: "bf16[{n}, 64]", l_weight_: "bf16[64]"):
            fused = torch.ops.sglang.flashinfer_allreduce_residual_rmsnorm(input_tensor = l_x_, residual = l_residual_, weight = l_weight_, eps = 1e-05)
            return fused

    class thunder_1(torch.nn.Module):
        def forward(self, fused):
            getitem{a0} = fused[0]
            getitem_1{a1} = fused[1];  fused = None
            add: "bf16[{n}, 64]" = getitem + getitem_1
            return add
'''


def _load(tmp_path, text):
    path = tmp_path / "rank0_7.py"
    path.write_text("# Rank: 0, Graph 7\n" + text)
    return graphdbg.load(path)


@pytest.mark.parametrize("n", [1, 5])
def test_a_tuple_indexed_in_the_next_piece_comes_back_as_a_tuple(tmp_path, n):
    """Both items annotated: zeros of those annotations, whatever the batch (at 5 rows, returning
    the input would have silently indexed rows instead of failing)."""
    text = SPLIT.format(n=n, a0=f': "bf16[{n}, 64]"', a1=f': "bf16[{n}, 64]"')
    case = _load(tmp_path, text).case("cpu", seed=0)
    (line,) = [s for s in case.stand_ins if "flashinfer_allreduce_residual_rmsnorm" in s.detail]
    assert line.kind == "custom_op" and f"a tuple of 2 as the graph indexes it: zeros bf16[{n}, 64]; zeros bf16[{n}, 64]" in line.detail
    outcome = case.run("eager")
    assert outcome.status == "pass", outcome.summary()


def test_items_nothing_annotates_are_copies_of_the_arguments_and_the_line_says_so(tmp_path):
    text = SPLIT.format(n=3, a0="", a1="")
    case = _load(tmp_path, text).case("cpu", seed=0)
    (line,) = [s for s in case.stand_ins if "flashinfer_allreduce_residual_rmsnorm" in s.detail]
    assert "nothing tells item 0's dtype and shape" in line.detail and "nothing tells item 1's" in line.detail
    outcome = case.run("eager")
    assert outcome.status == "pass", outcome.summary()
    out = case.gm(*case.inputs)
    assert out[0].shape == (3, 64) and out[0].dtype.itemsize == 2


def test_the_index_is_followed_through_a_tuple_a_piece_returns(tmp_path):
    """The piece returns the op's tuple as one item of its own result: the outer graph reads
    ``inductor_0[1]`` and the third piece indexes that."""
    text = '''
class GraphModule(torch.nn.Module):
    def forward(self, l_x_: "f32[4, 8]"):
        inductor_0 = self.inductor_0(l_x_);  l_x_ = None
        getitem = inductor_0[0]
        getitem_1 = inductor_0[1];  inductor_0 = None
        thunder_1 = self.thunder_1(getitem_1);  getitem_1 = None
        return (getitem, thunder_1)

    class inductor_0(torch.nn.Module):
        def forward(self, l_x_: "f32[4, 8]"):
            relu: "f32[4, 8]" = torch.relu(l_x_)
            topk = torch.ops.sgl_kernel.fused_topk(relu, 2)
            return (relu, topk)

    class thunder_1(torch.nn.Module):
        def forward(self, topk):
            getitem: "f32[4, 2]" = topk[0]
            getitem_1: "i32[4, 2]" = topk[1];  topk = None
            to: "i64[4, 2]" = getitem_1.to(torch.int64)
            return (getitem, to)
'''
    case = _load(tmp_path, text).case("cpu", seed=0)
    (line,) = [s for s in case.stand_ins if "fused_topk" in s.detail]
    assert "zeros f32[4, 2]; zeros i32[4, 2]" in line.detail, line.detail
    assert case.run("eager").status == "pass"


def test_an_annotation_on_the_ops_own_line_wins(tmp_path):
    text = '''
class GraphModule(torch.nn.Module):
    def forward(self, l_x_: "bf16[2, 16]"):
        q: "f8e4m3fn[2, 16]" = torch.ops.sglang.all_reduce_and_quantize(l_x_, group_name = 'tp:0')
        return (q,)
'''
    case = _load(tmp_path, text).case("cpu", seed=0)
    (line,) = [s for s in case.stand_ins if "all_reduce_and_quantize" in s.detail]
    assert "f8e4m3fn[2, 16]" in line.detail, line.detail
    (out,) = case.gm(*case.inputs)
    assert str(out.dtype) == "torch.float8_e4m3fn" and tuple(out.shape) == (2, 16)
