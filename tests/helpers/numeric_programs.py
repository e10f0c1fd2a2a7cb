"""Healthy programs made by a seeded generator (issue 50, section 2), the custom ops they call
(no float64 kernel: one refuses float64, one computes in float32 inside and refuses float64),
and a backend with a seeded error of a few ulps in one op's output.

    >>> program = generate(seed=7)          # a Program: fn, inputs, dtype, what it does
    >>> program.fn(*program.inputs)

Importable by child processes (tests/helpers/ is on their PYTHONPATH): replay's child defines
the custom ops by importing this module (``--ops numeric_programs``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree


@torch.library.custom_op("numeric_test::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU times 1.5, computed in float32 and returned in ``x``'s dtype; no float64 kernel."""
    if x.dtype == torch.float64:
        raise RuntimeError("numeric_test::scaled_gelu has no float64 kernel")
    return (torch.nn.functional.gelu(x.float()) * 1.5).to(x.dtype)


@scaled_gelu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("numeric_test::rms_scale", mutates_args=())
def rms_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMS normalisation over the last dim times ``w``, in float32 inside; refuses float64."""
    if x.dtype == torch.float64:
        raise NotImplementedError("numeric_test::rms_scale: float64 is not supported")
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


@rms_scale.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("numeric_test::mul_add_into", mutates_args=("z",))
def mul_add_into(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, alpha: float) -> None:
    """``z = x * alpha + y`` written into ``z`` (an out buffer, as a user Triton kernel writes
    its output), in float32 inside; refuses float64. The CPU's stand-in for ``fused_mul_add``."""
    if x.dtype == torch.float64:
        raise RuntimeError("numeric_test::mul_add_into has no float64 kernel")
    z.copy_((x.float() * alpha + y.float()).to(z.dtype))


@mul_add_into.register_fake
def _(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, alpha: float) -> None:
    return None


DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp_clamped": lambda x: torch.exp(x.clamp(-4, 4)),
    "square": lambda x: x * x, "recip": lambda x: 1.0 / (1.0 + x * x), "relu": torch.relu, "neg_half": lambda x: x * -0.5,
    "gelu_op": lambda x: torch.ops.numeric_test.scaled_gelu(x),
}
_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum,
}


@dataclass
class Program:
    """One generated program: ``fn(*inputs)`` returns a tuple of tensors of ``dtype``."""

    fn: Callable[..., Any]
    inputs: list[torch.Tensor]
    dtype: torch.dtype
    recipe: list[str]

    def __repr__(self) -> str:
        return f"Program({str(self.dtype).removeprefix('torch.')}: {' '.join(self.recipe)})"


def generate(seed: int, dtype: torch.dtype | None = None) -> Program:
    """A healthy program from ``seed``: a pointwise chain, then a reduction, a matmul or a
    normalisation (some through the custom ops), then more pointwise ops; two outputs."""
    rng = random.Random(seed)
    dtype = dtype or rng.choice(DTYPES)
    rows, cols = rng.choice([(8, 32), (16, 64), (4, 128), (32, 16)])
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen).to(dtype)
    y = torch.randn(rows, cols, generator=gen).to(dtype)
    w = (torch.randn(cols, cols, generator=gen) / cols ** 0.5).to(dtype)
    g = (1 + 0.1 * torch.randn(cols, generator=gen)).to(dtype)
    first = [rng.choice(list(_UNARY)) for _ in range(rng.randint(1, 4))]
    binary = rng.choice(list(_BINARY))
    middle = rng.choice(["sum", "mean", "softmax", "layer_norm", "matmul", "rms_op", "amax", "matmul_rms"])
    last = [rng.choice(list(_UNARY)) for _ in range(rng.randint(0, 3))]

    def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x
        for name in first:
            h = _UNARY[name](h)
        h = _BINARY[binary](h, y)
        if middle == "sum":
            m = h.sum(-1, keepdim=True) * 0.1 + h
        elif middle == "mean":
            m = h - h.mean(0, keepdim=True)
        elif middle == "softmax":
            m = torch.softmax(h, -1) * cols
        elif middle == "layer_norm":
            m = torch.nn.functional.layer_norm(h, (cols,), g)
        elif middle == "matmul":
            m = h @ w
        elif middle == "rms_op":
            m = torch.ops.numeric_test.rms_scale(h, g)
        elif middle == "amax":
            m = h / (h.abs().amax(-1, keepdim=True) + 1)
        else:
            m = torch.ops.numeric_test.rms_scale(h @ w, g)
        out = m
        for name in last:
            out = _UNARY[name](out)
        return out, m.sum(0)

    return Program(fn, [x, y, w, g], dtype, [*first, binary, middle, *last])


def _off_by_ulps(t: torch.Tensor) -> torch.Tensor:
    """``t`` times (1 + ``seeded_ulps`` eps of its dtype): every element off by a few ulps, the
    same way. Traced by the backend (the dtype is the value's, whatever the graph's metadata)."""
    return t * (1.0 + seeded_ulps(t.dtype) * torch.finfo(t.dtype).eps)


def _seeded_error(gm: fx.GraphModule, outputs: Callable[[int], bool] = lambda i: i == 0) -> fx.GraphModule:
    """``gm`` with the output leaves whose index ``outputs`` selects (the first by default) off
    by a few ulps (``_off_by_ulps``). The product is taken right before the output, on the
    value returned: the node that returns it may be a buffer that a later op writes into
    (``z = empty_like(x)``, then a user Triton kernel or an out-writing custom op fills ``z``),
    so scaling that node where it is made would scale an empty buffer the write then overwrites."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    leaves, spec = pytree.tree_flatten(out.args[0])
    with gm.graph.inserting_before(out):
        leaves = [gm.graph.call_function(_off_by_ulps, (leaf,)) if isinstance(leaf, fx.Node) and outputs(i) else leaf
                  for i, leaf in enumerate(leaves)]
    out.args = (pytree.tree_unflatten(leaves, spec),)
    gm.recompile()
    return gm


def seeded_ulps(dtype: torch.dtype) -> float:
    """The seeded error, in ulps at magnitude 1: a few for 16-bit floats; float32's bound in
    ulps is 109 (its rtol, made for reordered reductions), so its error is a quarter of that."""
    return 32.0 if dtype == torch.float32 else 4.0


def off_by_ulps(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, after the seeded error (``seeded_ulps`` of its dtype) in the first output."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(_seeded_error(gm), example_inputs)


def off_by_ulps_in_every_other(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, after the seeded error in every other program of ``generate_many``'s graph
    (output leaves 0, 4, 8, ...: the first output of programs 0, 2, 4, ...)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(_seeded_error(gm, lambda i: i % 4 == 0), example_inputs)


def quantizing(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Outputs of every kind a quantized layer has: float8 values (a cast and a view of stored
    bytes), bits, bool, integers, complex."""
    y = (x * 2).to(torch.float8_e4m3fn)
    s = scale.view(torch.float8_e4m3fn)
    return y, s, x > 0, x.to(torch.int32), torch.view_as_complex(torch.stack([x, x], -1)), scale.view(torch.bits8)


@torch.library.custom_op("numeric_test::to_fp8", mutates_args=())
def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """``x * 2`` in float8_e4m3fn: a quantizing kernel whose outputs are not floats of any arithmetic."""
    return (x * 2).to(torch.float8_e4m3fn)


@to_fp8.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.float8_e4m3fn)


def to_fp8_reference(x: torch.Tensor) -> torch.Tensor:
    """``to_fp8``'s reference: the same values (a swap that moves nothing)."""
    return (x.double() * 2).to(torch.float8_e4m3fn)


def to_fp8_coarser(x: torch.Tensor) -> torch.Tensor:
    """A reference ``to_fp8`` differs from: float8_e5m2's coarser steps, back in e4m3fn."""
    return (x * 2).to(torch.float8_e5m2).to(torch.float8_e4m3fn)


def quantizing_op(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``to_fp8``'s output seen as float8, bools, integers and bits: four outputs of one kernel."""
    q = torch.ops.numeric_test.to_fp8(x)
    return q, q.float() > 0.5, q.view(torch.uint8), q.view(torch.bits8)


def quantizing_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(8, 4, generator=g), torch.randint(0, 120, (8, 4), dtype=torch.uint8, generator=g)]


def _flip_first_byte(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a high bit of its first element's most significant byte flipped (a float's
    exponent: far off, not a rounding)."""
    raw = t.contiguous().view(torch.uint8).clone()
    raw.view(-1)[min(t.element_size(), 4) - 1] ^= 0x40
    return raw.view(t.dtype)


def flips_a_byte_of_each_output(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend whose every output has one byte wrong (bools: the first one negated)."""
    def run(*args: Any) -> tuple[Any, ...]:
        outs = gm(*args)
        return tuple((~o if o.dtype == torch.bool else _flip_first_byte(o)) for o in outs)
    return run


try:  # a GPU machine's: the user Triton kernel the generated programs call on CUDA
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def fused_mul_add_kernel(X, Y, Z, n, alpha, BLOCK: tl.constexpr):
        """z = x * alpha + y, computed in float32, stored in Z's dtype."""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(Z + offs, (x * alpha + y).to(Z.dtype.element_ty), mask=mask)


def fused_mul_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """``x * alpha + y`` written into a new buffer: by the user Triton kernel on CUDA, by the
    out-writing custom op ``mul_add_into`` elsewhere (the same graph shape: ``empty_like``, then
    an op that writes into it, the buffer returned)."""
    z = torch.empty_like(x)
    if x.is_cuda and triton is not None:
        n = x.numel()
        fused_mul_add_kernel[(triton.cdiv(n, 256),)](x, y, z, n, alpha, BLOCK=256)
    else:
        torch.ops.numeric_test.mul_add_into(x, y, z, alpha)
    return z


def generate_with_kernel(seed: int, dtype: torch.dtype = torch.float16, device: str = "cuda") -> Program:
    """``generate``'s program with the user's kernel called in the middle (on CUDA the Triton
    kernel, elsewhere the out-writing custom op): its first output goes through
    ``fused_mul_add`` before the rest of the chain, and the graph's first output is the buffer
    that ``fused_mul_add`` writes into."""
    inner = generate(seed, dtype)
    alpha = random.Random(seed).choice([0.5, -1.25, 2.0])

    def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = fused_mul_add(x, y, alpha)
        out, total = inner.fn(x, y, w, g)
        return fused_mul_add(out, out.flip(-1).contiguous(), alpha), total

    return Program(fn, [v.to(device) for v in inner.inputs], dtype, ["fused_mul_add", *inner.recipe, "fused_mul_add"])


def generate_many(programs: list[Program]) -> Program:
    """One program running each of ``programs`` on its own inputs, in one compiled region (one
    graph, one dump): outputs ``2k`` and ``2k + 1`` are program ``k``'s."""
    sizes = [len(p.inputs) for p in programs]

    def fn(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        at = 0
        for p, n in zip(programs, sizes):
            outs += p.fn(*inputs[at:at + n])
            at += n
        return tuple(outs)

    return Program(fn, [v for p in programs for v in p.inputs], programs[0].dtype,
                   [f"[{p!r}]" for p in programs])
