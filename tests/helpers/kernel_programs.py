"""Programs whose graphs call their own kernels (custom ops), some with a seeded bug that eager
shares: the held-out style cases of tests/test_kernels.py and docs/kernels.md.

- ``kt_attn::int8_attention``: attention with Q and K quantised to int8 per tensor, without
  smoothing K (SageAttention subtracts K's mean over tokens first). A key channel with a large
  constant offset sets K's scale, so the other channels round to a few levels and the scores
  are wrong; without such a channel it is close to SDPA.
- ``kt_norm::rms_norm``: RMSNorm, right. ``kt_norm::rms_norm_eps_bug``: RMSNorm that adds its
  epsilon outside the square root (``x / (sqrt(mean(x^2)) + eps)``), with a big epsilon.
- ``kt_act::silu_and_mul``: right.

Replay finds them with ``--ops kernel_programs``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.library.custom_op("kt_attn::int8_attention", mutates_args=())
def int8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    def quant(x: torch.Tensor) -> torch.Tensor:  # per-tensor symmetric int8, dequantised
        scale = x.abs().amax().clamp(min=1e-8) / 127.0
        return torch.round(x / scale).clamp(-127, 127).to(torch.int8).float() * scale

    scores = quant(q.float()) @ quant(k.float()).transpose(-1, -2) / q.shape[-1] ** 0.5
    if is_causal:
        n, m = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(n, m, dtype=torch.bool, device=q.device).triu(m - n + 1), float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


@int8_attention.register_fake
def _(q, k, v, is_causal):
    return q.new_empty(q.shape)  # contiguous, as the real one returns


@torch.library.custom_op("kt_norm::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("kt_norm::rms_norm_eps_bug", mutates_args=())
def rms_norm_eps_bug(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + 0.5) * weight.float()).to(x.dtype)  # the seeded bug


@rms_norm_eps_bug.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("kt_act::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


@silu_and_mul.register_fake
def _(x):
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


class Layer(torch.nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, attention: str, norm: str):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.k = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=True)
        self.v = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)
        self.up = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.down = torch.nn.Linear(2 * dim, dim, bias=False)
        self.norm1 = torch.nn.Parameter(torch.ones(dim))
        self.norm2 = torch.nn.Parameter(torch.ones(dim))
        self.attention, self.norm = attention, norm

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.norm == "eager":
            return F.rms_norm(x, (x.shape[-1],), w, 1e-6)
        return getattr(torch.ops.kt_norm, self.norm)(x, w, 1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self._norm(x, self.norm1)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.attention == "int8":
            a = torch.ops.kt_attn.int8_attention(q, k, v, True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(torch.ops.kt_act.silu_and_mul(self.up(self._norm(x, self.norm2))))


class Decoder(torch.nn.Module):
    """Embedding, ``layers`` layers, a norm and the logits; ``outlier`` adds a constant offset to
    one channel of every key (what SageAttention's smoothing removes and per-tensor int8 can't take)."""

    def __init__(self, attention: str = "int8", norm: str = "rms_norm", layers: int = 2, dim: int = 64, heads: int = 4,
                 kv_heads: int = 2, vocab: int = 128, outlier: float = 0.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Layer(dim, heads, kv_heads, attention, norm) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        with torch.no_grad():
            for layer in self.layers:
                layer.q.weight.mul_(4)  # peaked attention, as a trained model's: the scores matter
                layer.k.weight.mul_(4)
                layer.k.bias.zero_()
                layer.k.bias[3] = outlier  # channel 3 of KV head 0: every key's, the same offset

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def tokens(batch: int = 2, seq: int = 16, vocab: int = 128, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def same_weights(src: torch.nn.Module, dst: torch.nn.Module) -> torch.nn.Module:
    dst.load_state_dict(src.state_dict())
    return dst


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """A user's own reference for ``kt_attn::int8_attention`` (``--swap OP=kernel_programs:sdpa_attention``)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def relu_into(X: torch.Tensor, Y: torch.Tensor) -> None:
    """A user's reference for a Triton kernel ``relu_kernel(X, Y)`` that writes ``relu(X)`` into ``Y``."""
    Y.copy_(X.relu())


def relu_kernel_reference(X: torch.Tensor, Y: torch.Tensor, n: int, **constexprs) -> None:
    """A user's reference for a Triton kernel ``relu_kernel(X, Y, n, BLOCK)``: ``Y[:n] = relu(X[:n])``."""
    Y[:n].copy_(X[:n].relu())


try:  # a GPU machine's: the user Triton kernel of tests/test_kernels.py's gpu test
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def rms_norm_kernel(X, W, Y, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols) + eps  # the seeded bug: eps outside the root
        tl.store(Y + row * n_cols + cols, x / rms * w, mask=mask)


class TritonNorm(torch.nn.Module):
    """A linear layer and an RMSNorm computed by the user's Triton kernel (needs CUDA and Triton)."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        y = torch.empty_like(h)
        rms_norm_kernel[(h.shape[0],)](h, self.weight, y, h.shape[1], 0.5, BLOCK=triton.next_power_of_2(h.shape[1]))
        return y


if triton is not None:
    SOFTMAX_EPS = tl.constexpr(0.05)  # the seeded bug: added to the denominator (a global the kernel's source names)

    @triton.jit
    def _row_max(x):  # a helper @triton.jit function the kernel calls
        return tl.max(x, axis=0)

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=4)],
                     key=["n_cols"])
    @triton.jit
    def softmax_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - _row_max(x))
        tl.store(Y + row * n_cols + cols, e / (tl.sum(e, axis=0) + SOFTMAX_EPS), mask=mask)


class TritonSoftmax(torch.nn.Module):
    """A linear layer and a row softmax by an autotuned user Triton kernel that calls a helper and
    names a global constexpr, with a seeded bug (needs CUDA and Triton)."""

    def __init__(self, dim: int = 96):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        y = torch.empty_like(h)
        softmax_kernel[(h.shape[0],)](h, y, h.shape[1])
        return y


def softmax_into(X: torch.Tensor, Y: torch.Tensor, n_cols: int, **constexprs) -> None:
    """The user's reference for ``softmax_kernel``: writes softmax(X) into Y."""
    Y.copy_(X.float().softmax(-1))


@torch.library.custom_op("kt_fi::rmsnorm", mutates_args=())
def flashinfer_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """flashinfer's RMSNorm wrapped in a custom op, as serving engines wrap it (needs CUDA and flashinfer)."""
    import flashinfer  # the GPU machine's, carried there as a wheel: only a run of this op needs it

    return flashinfer.norm.rmsnorm(x, weight, eps)


@flashinfer_rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


class FlashinferNorm(torch.nn.Module):
    def __init__(self, dim: int = 256):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.kt_fi.rmsnorm(self.proj(x), self.weight, 1e-6) * 2


def rms_norm_into(X: torch.Tensor, W: torch.Tensor, Y: torch.Tensor, n_cols: int, eps: float, **constexprs) -> None:
    """The user's reference for ``rms_norm_kernel``: writes RMSNorm(X) * W into Y."""
    Y.copy_(X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps) * W)


# vLLM-style kernels that write their results into their arguments and return nothing.
@torch.library.custom_op("kt_vllm::rms_norm", mutates_args=("result",))
def vllm_rms_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    result.copy_(input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + epsilon) * weight)


@torch.library.custom_op("kt_vllm::fused_add_rms_norm", mutates_args=("input", "residual"))
def vllm_fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    residual.add_(input)
    input.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + epsilon))  # the seeded bug: no * weight


class InPlaceNorms(torch.nn.Module):
    """Two linear layers, each followed by one of the in-place vLLM-style norms."""

    def __init__(self, dim: int = 64, seed: int = 2):
        super().__init__()
        torch.manual_seed(seed)
        self.a, self.b = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, dim)
        self.w1, self.w2 = torch.nn.Parameter(torch.rand(dim) + 0.5), torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x)
        normed = torch.empty_like(h)
        torch.ops.kt_vllm.rms_norm(normed, h, self.w1, 1e-6)
        y = self.b(normed)
        residual = x.clone()
        torch.ops.kt_vllm.fused_add_rms_norm(y, residual, self.w2, 1e-6)
        return y, residual


class JITFunction:  # Triton's shape where Triton isn't installed: the source in .src, the function in .fn
    def __init__(self, fn, src):
        self.fn, self.src = fn, src


def relu_kernel_dump(root, source: str):
    """A dump written by capture of a graph that calls a user Triton kernel through Dynamo's
    wrapper, the kernel in the side table as Triton keeps one (its ``source`` in ``.src``): the
    dump records its source and constants; Triton itself isn't needed to write it."""
    import torch.fx as fx  # here: the --ops children that import this module need none of it
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    import graphdbg
    from graphdbg.store.manifest import find_dumps

    def relu_kernel(X, Y, n, BLOCK):
        pass

    # the graph calls kernel 0 with constants 0, as in a fresh process: a test run after others
    # that traced Triton kernels (where Triton is installed) finds the side table already filled
    kernel_side_table.reset_table()
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.empty_like, (x,))
    g.call_function(torch.ops.higher_order.triton_kernel_wrapper_mutation, (), {
        "kernel_idx": kernel_side_table.add_kernel(JITFunction(relu_kernel, source)),
        "constant_args_idx": kernel_side_table.add_constant_args({"n": 32, "BLOCK": 32}),
        "grid": [(1, 1, 1)], "tma_descriptor_metadata": {}, "kwargs": {"X": x, "Y": y}})
    g.output((g.call_function(torch.mul, (y, 2)),))
    graphdbg.capture("eager", dump_dir=root, mode="always")(fx.GraphModule(torch.nn.Module(), g), [torch.randn(32)])
    (path,) = find_dumps(root)
    return path
