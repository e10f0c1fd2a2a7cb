"""A residual-add + RMSNorm fusion pass, as SGLang's and vLLM's pass managers write it, and a buggy one.

- ``fuse_add_rmsnorm`` (good): an Inductor pattern-matcher pass over the post-grad graph that
  replaces ``h = x + residual; rmsnorm(h)`` with one fused op, ``fused_add_rmsnorm``, returning
  ``(rmsnorm(x + residual) * w, x + residual)``.
- ``use_flashinfer_kernel`` (buggy): swaps that functional op for flashinfer's in-place kernel
  (``flashinfer.norm.fused_add_rmsnorm`` writes the normalised values into ``x`` and the sum into
  ``residual``), but the wrapper hands back the residual it was given, not the one the kernel
  wrote: the residual is not written back, and every later layer adds the wrong stream.

Where flashinfer is missing (the CPU), the kernels are computed with torch with the same
in-place semantics, so the bug is the same everywhere.

    graphdbg replay DUMP --backend inductor --passes llama_fusion:fuse_add_rmsnorm@post_grad
"""

from __future__ import annotations

import functools

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-6
LIB = torch.library.Library("graphdbg_examples", "FRAGMENT")
LIB.define("fused_add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")
LIB.define("flashinfer_fused_add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")


def _flashinfer():
    try:
        import flashinfer.norm

        return flashinfer.norm
    except Exception:
        return None


def _inplace_fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """flashinfer's contract: residual += x; x = rmsnorm(residual) * weight, both in place."""
    fi = _flashinfer() if x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) else None
    if fi is not None:
        fi.fused_add_rmsnorm(x, residual, weight, eps)
        return
    residual.add_(x)
    h = residual.float()
    x.copy_((h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight)


def _fused(x, residual, weight, eps):
    out, res = x.clone(), residual.clone()
    _inplace_fused_add_rmsnorm(out, res, weight, eps)
    return out, res


def _flashinfer_buggy(x, residual, weight, eps):
    out, res = x.clone(), residual.clone()
    _inplace_fused_add_rmsnorm(out, res, weight, eps)
    return out, residual.clone()  # BUG: the kernel wrote the new residual into `res`; this hands back the old one


for _name, _fn in (("fused_add_rmsnorm", _fused), ("flashinfer_fused_add_rmsnorm", _flashinfer_buggy)):
    LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"graphdbg_examples::{_name}", lambda x, r, w, eps: (torch.empty_like(x), torch.empty_like(r)), lib=LIB)


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        f = h.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype) * self.weight


class DecoderLayer(nn.Module):
    """Llama-style: residual stream carried alongside, add+norm before attention and before the MLP."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.input_layernorm = RMSNorm(dim)
        self.qkv_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_up_proj = nn.Linear(dim, 2 * ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        residual = hidden + residual
        x = self.input_layernorm(residual)
        t, d = x.shape
        q, k, v = self.qkv_proj(x).view(t, 3, self.heads, d // self.heads).permute(1, 2, 0, 3)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = self.o_proj(attn.transpose(0, 1).reshape(t, d))
        residual = x + residual
        x = self.post_attention_layernorm(residual)
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up), residual


class Decoder(nn.Module):
    def __init__(self, layers: int = 2, dim: int = 256, heads: int = 4, ffn: int = 512):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, ffn) for _ in range(layers))

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        return hidden + residual


def decoder(device: str = "cpu", dtype: torch.dtype = torch.float32, tokens: int = 16, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    model = Decoder(layers).to(device=device, dtype=dtype).eval()
    hidden = torch.randn(tokens, 256, device=device, dtype=dtype)
    return model, (hidden, torch.zeros_like(hidden))


def _pattern(x, residual, weight):
    h = x + residual
    f = h.float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype) * weight, h


def _replacement(x, residual, weight):
    out, h = torch.ops.graphdbg_examples.fused_add_rmsnorm(x, residual, weight, EPS)
    return out, h


@functools.cache
def _patterns():
    from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

    patterns = PatternMatcherPass(pass_name="fuse_add_rmsnorm")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        example = [torch.empty(8, 16, dtype=dtype), torch.empty(8, 16, dtype=dtype), torch.empty(16, dtype=dtype)]
        register_replacement(_pattern, _replacement, example, fwd_only, patterns)
    return patterns


def fuse_add_rmsnorm(graph: fx.Graph) -> int:
    """The good pass: returns how many add+RMSNorm pairs it fused."""
    return _patterns().apply(graph)


def use_flashinfer_kernel(graph: fx.Graph) -> int:
    """The buggy pass: runs the fused op on flashinfer's in-place kernel, through a wrapper that
    loses the kernel's residual. Returns how many calls it switched."""
    count = 0
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.graphdbg_examples.fused_add_rmsnorm.default:
            node.target = torch.ops.graphdbg_examples.flashinfer_fused_add_rmsnorm.default
            count += 1
    return count
