"""Plain torch references for the kernels serving graphs call most, to judge a kernel by.

A kernel that is wrong in eager too (an int8 attention without smoothing, an RMSNorm with its
epsilon in the wrong place) can't be caught by comparing compiled with eager: both call it.
It can be caught by replacing it with what it is meant to compute. Each function here is that,
written out in plain torch ops at the precision of its inputs (so the float64 reference
interpreter runs them in float64), and checked in tests/test_kernels.py against the op it
replaces on inputs where that op is right.

    >>> swap = adapt(REFERENCES["attention"], schema_args=["q", "k", "v", "is_causal"])
    >>> reference_for("sglang::rmsnorm")            # a built-in by the op's name
    'rms_norm'

Layouts are torch's: attention takes ``[batch, heads, seq, head_dim]`` (SDPA's); a custom op
with another layout gets its reference as a ``module:function`` of the user's.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from graphdbg.errors import GraphdbgError


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              is_causal: bool = False, scale: float | None = None, *, layout: str = "bhsd",
              gqa: str = "consecutive") -> torch.Tensor:
    """Scaled dot-product attention with SDPA's semantics, written out: ``softmax(q k^T * scale
    + mask) v``. ``q`` is ``[..., Hq, Lq, D]`` (``layout="bshd"``: ``[..., Lq, Hq, D]``,
    flash-attention's); ``k``/``v`` may have fewer heads (GQA: with ``gqa="consecutive"`` each
    KV head ``h`` serves query heads ``h*G .. h*G+G-1``, as SDPA's ``enable_gqa`` does; with
    ``"strided"`` query head ``i`` uses KV head ``i mod Hkv``). ``is_causal`` masks
    the upper triangle aligned to the bottom right (the last query sees every key, as in
    decoding with a cache); a boolean ``attn_mask`` keeps True, a float one is added."""
    if layout == "bshd":
        t = [x.transpose(-3, -2) for x in (q, k, v)]
        return attention(*t, attn_mask=attn_mask, is_causal=is_causal, scale=scale, gqa=gqa).transpose(-3, -2)
    if k.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        grow = (lambda x: x.repeat_interleave(rep, dim=-3)) if gqa == "consecutive" else (
            lambda x: x.repeat(*([1] * (x.dim() - 3)), rep, 1, 1))
        k, v = grow(k), grow(v)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale
    if is_causal:
        n, m = scores.shape[-2:]
        keep = torch.ones(n, m, dtype=torch.bool, device=q.device).tril(m - n)
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return scores.softmax(-1) @ v


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                    seq_lens: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Decode attention over a paged KV cache: ``q`` is ``[batch, Hq, D]`` (one new token each),
    ``k_cache``/``v_cache`` are ``[blocks, block_size, Hkv, D]``, ``block_table[b]`` lists the
    blocks of sequence ``b`` in order and ``seq_lens[b]`` its length. Each sequence's keys are
    gathered from its blocks and attended with ``attention`` (no mask: every cached key is past)."""
    block = k_cache.shape[1]
    out = []
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        blocks = block_table[b, : (n + block - 1) // block]
        keys = k_cache[blocks].flatten(0, 1)[:n].transpose(0, 1)  # [Hkv, n, D]
        values = v_cache[blocks].flatten(0, 1)[:n].transpose(0, 1)
        out.append(attention(q[b].unsqueeze(-2), keys, values, scale=scale).squeeze(-2))
    return torch.stack(out)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(mean(x^2 over the last dim) + eps) * weight``, in float32 at least, returned in
    ``x``'s dtype (as fused RMSNorm kernels compute it)."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.to(out.dtype)
    return out.to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual``; returns ``(rms_norm(residual), residual)`` (vLLM's and
    SGLang's fused kernel writes both in place; this returns them)."""
    summed = x + residual
    return rms_norm(summed, weight, eps), summed


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` with ``d`` half the last dim (the gated MLP's activation)."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    """Rotary position embedding of ``x`` (``[..., seq, D]``) with ``cos``/``sin`` broadcastable
    to it (``[seq, D]``, the halves repeated, as HF's ``apply_rotary_pos_emb``). ``interleaved``
    rotates pairs ``(x0, x1), (x2, x3), ...`` (GPT-J) instead of the halves (NeoX)."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def quantized_matmul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                     x_scale: torch.Tensor | None = None) -> torch.Tensor:
    """A quantised GEMM computed in float: ``(x * x_scale) @ (weight * scale)^T + bias``.
    ``weight`` is ``[N, K]`` (int8 or fp8) with ``scale`` per tensor, per output row (``[N]`` or
    ``[N, 1]``); ``x_scale`` dequantises a quantised ``x`` (per tensor or per row)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = weight.to(compute) * scale.to(compute).reshape(-1, 1) if scale.numel() > 1 else weight.to(compute) * scale.to(compute)
    xf = x.to(compute) if x_scale is None else x.to(compute) * x_scale.to(compute).reshape(*x_scale.shape, *([1] if x_scale.dim() else []))
    out = xf @ w.T
    if bias is not None:
        out = out + bias.to(compute)
    return out.to(x.dtype if x.is_floating_point() else torch.float32)


def attention_bshd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                   is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """``attention`` for flash-attention's layout, ``[batch, seq, heads, head_dim]``
    (``attention(layout=bshd)``)."""
    return attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, layout="bshd")


REFERENCES: dict[str, Callable[..., Any]] = {
    "attention": attention, "sdpa": attention, "attention_bshd": attention_bshd, "paged_attention": paged_attention, "rms_norm": rms_norm, "rmsnorm": rms_norm,
    "fused_add_rms_norm": fused_add_rms_norm, "silu_and_mul": silu_and_mul, "rotary_embedding": rotary_embedding,
    "quantized_matmul": quantized_matmul,
}

# An op's name (after its namespace) to the built-in it is matched with; first match wins.
_BY_NAME = [
    (r"paged.*(attn|attention)|(attn|attention).*paged|decode_attention", "paged_attention"),
    (r"(fused_)?add.*rms_?norm", "fused_add_rms_norm"),
    (r"rms_?norm", "rms_norm"),
    (r"attn|attention|sdpa", "attention"),
    (r"silu_and_mul|swiglu", "silu_and_mul"),
    (r"rotary|rope", "rotary_embedding"),
    (r"(int8|fp8|w8a8|scaled|quant).*(mm|gemm|matmul|linear)|(mm|gemm|matmul)_?(int8|fp8|w8a8)", "quantized_matmul"),
]

# The names ops spell their arguments with, to the references' own.
_ALIASES = {
    "q": ("q", "query"), "k": ("k", "key"), "v": ("v", "value"), "x": ("x", "input", "hidden_states", "a", "inp"),
    "weight": ("weight", "w", "gamma", "b", "mat2"), "eps": ("eps", "epsilon", "variance_epsilon"),
    "is_causal": ("is_causal", "causal"), "scale": ("scale", "sm_scale", "softmax_scale"),
    "attn_mask": ("attn_mask", "mask"), "residual": ("residual",), "cos": ("cos",), "sin": ("sin",),
    "k_cache": ("k_cache", "key_cache"), "v_cache": ("v_cache", "value_cache"),
    "block_table": ("block_table", "block_tables", "page_table"), "seq_lens": ("seq_lens", "seqlens", "context_lens"),
    "bias": ("bias",), "x_scale": ("x_scale", "scale_a", "input_scale"), "interleaved": ("interleaved",),
}


def reference_for(op_name: str) -> str | None:
    """The built-in reference for an op named ``ns::name`` (or ``torch.ops.ns.name``), else None."""
    name = re.split(r"::|\.", op_name.removeprefix("torch.ops."))[1 if ("::" in op_name or "." in op_name) else 0]
    for pattern, ref in _BY_NAME:
        if re.search(pattern, name.lower()):
            return ref
    return None


def adapt(reference: Callable[..., Any], schema_args: Sequence[str],
          fixed: dict[str, Any] | None = None) -> Callable[..., Any] | None:
    """``reference`` called with an op's arguments: those named in the op's schema
    (``schema_args``, in order) are passed to the reference's parameter of the same meaning
    (``query`` to ``q``, ``sm_scale`` to ``scale``); arguments the reference doesn't take are
    dropped, and so are those mapped to a parameter of ``fixed`` (the user's own values, passed
    instead). None when a required parameter of the reference has no argument."""
    params = inspect.signature(reference).parameters
    fixed = dict(fixed or {})
    to_param = {}
    for arg in schema_args:
        param = _param_of(arg, params)
        if param is not None and param not in fixed:
            to_param[arg] = param
    required = [p for p, spec in params.items() if spec.default is inspect.Parameter.empty]
    if any(p not in to_param.values() and p not in fixed for p in required):
        return None

    def call(*args: Any, **kwargs: Any) -> Any:
        named = dict(zip(schema_args, args), **kwargs)
        return reference(**{to_param[a]: value for a, value in named.items() if a in to_param}, **fixed)

    call.__name__ = call.__qualname__ = f"reference_{reference.__name__}"
    return call


def _param_of(arg: str, params: Any) -> str | None:
    """The reference's parameter an op's argument named ``arg`` means, else None."""
    for param in params:
        if arg == param or arg.lower() in _ALIASES.get(param, ()):
            return param
    return None


# --- what a built-in reference must assume where an op's schema doesn't say it --------------------
@dataclass(frozen=True)
class Choice:
    """One thing a built-in reference decides that an op may decide otherwise: spelled out as
    ``reference(name=value)``; ``param`` is the reference's parameter it sets."""

    name: str
    param: str
    default: Any
    parse: Callable[[str], Any]
    words: Callable[[Any], str]  # the value, as the verdict says it
    missing: str = ""  # what the op's schema lacks when the default is assumed ("" : no NAME argument)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError("true or false")


def _positive(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError("a positive number")
    return value


def _one_of(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in values:
            raise ValueError(" or ".join(values))
        return text.lower()
    return parse


_CAUSAL = Choice("causal", "is_causal", False, _bool,
                 lambda v: "causal (masked above the diagonal aligned to the last key)" if v else "non-causal")
_SCALE = Choice("scale", "scale", None, _positive, lambda v: "scale 1/sqrt(head_dim)" if v is None else f"scale {v:g}")
_GQA = Choice("gqa", "gqa", "consecutive", _one_of("consecutive", "strided"),
              lambda v: ("GQA grouping consecutive (KV head h serves query heads h*G..h*G+G-1, as SDPA's enable_gqa)"
                         if v == "consecutive" else "GQA grouping strided (query head i uses KV head i mod Hkv)"),
              "doesn't say how query heads share KV heads")
_LAYOUT = Choice("layout", "layout", "bhsd", _one_of("bhsd", "bshd"),
                 lambda v: ("layout bhsd (q, k, v as [batch, heads, seq, head_dim])" if v == "bhsd"
                            else "layout bshd (q, k, v as [batch, seq, heads, head_dim])"), "doesn't say its layout")
_EPS = Choice("eps", "eps", 1e-6, _positive, lambda v: f"eps {v:g}")
_INTERLEAVED = Choice("interleaved", "interleaved", False, _bool,
                      lambda v: "rotation of interleaved pairs (GPT-J)" if v else "rotation of the halves (NeoX)")

CHOICES: dict[str, tuple[Choice, ...]] = {
    "attention": (_CAUSAL, _SCALE, _GQA, _LAYOUT), "attention_bshd": (_CAUSAL, _SCALE, _GQA),
    "paged_attention": (_SCALE,), "rms_norm": (_EPS,), "fused_add_rms_norm": (_EPS,), "rotary_embedding": (_INTERLEAVED,),
}
CHOICES["sdpa"], CHOICES["rmsnorm"] = CHOICES["attention"], CHOICES["rms_norm"]

_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\((.*)\))?\s*$", re.S)


def parse_reference(spec: str) -> tuple[str, dict[str, Any]] | None:
    """``attention(causal=True, scale=0.125)`` -> ``("attention", {"causal": True, "scale": 0.125})``;
    None for a spec that isn't a built-in's name (a ``module:function``). A built-in spelled
    with a choice it doesn't have, or a value that isn't one, is a GraphdbgError of one line."""
    m = _CALL.match(spec)
    if m is None or m.group(1) not in REFERENCES:
        return None
    name, inside = m.group(1), m.group(2)
    choices = {c.name: c for c in CHOICES.get(name, ())}
    given: dict[str, Any] = {}
    for part in (p.strip() for p in (inside or "").split(",")):
        if not part:
            continue
        key, sep, text = (x.strip() for x in part.partition("="))
        if not sep or key not in choices:
            spelled = ", ".join(f"{c}=..." for c in choices) or "none"
            raise GraphdbgError(f"{name}({inside}): {part!r} is not one of its choices ({spelled})")
        try:
            given[key] = choices[key].parse(text)
        except ValueError as e:
            raise GraphdbgError(f"{name}({inside}): {key}={text} is not {e or 'a number'}") from None
    return name, given


def fit(name: str, schema_args: Sequence[str], given: dict[str, Any] | None = None, *,
        by_position: bool = False) -> tuple[Callable[..., Any] | None, list[dict[str, Any]]]:
    """The built-in ``name`` fitted to an op's schema (``adapt``), with the user's spelled-out
    choices ``given``; and what it rests on, per choice of the reference (``CHOICES``):
    ``{"choice", "value", "source", "says", "spelled"}`` (``causal=False``) where ``source`` is ``given`` (spelled out),
    ``op`` (the op's own argument decides it, per call), ``position`` (an op known by position
    only: its argument there, where it passes one) or ``assumed`` (the op's schema doesn't say:
    the reference's default, and ``says`` how to spell it out)."""
    reference, given = REFERENCES[name], dict(given or {})
    params = inspect.signature(reference).parameters
    fixed = {c.param: given[c.name] for c in CHOICES.get(name, ()) if c.name in given}
    assumptions = []
    for c in CHOICES.get(name, ()):
        from_op = next((a for a in schema_args if _param_of(a, params) == c.param), None)
        if c.name in given:
            value, source = given[c.name], "given"
            says = f"{c.words(value)}: spelled out" + (f" (the op's argument {from_op} is not used)" if from_op else "")
        elif from_op is not None:
            value, source = None, "position" if by_position else "op"
            says = (f"{c.name}: the op's argument {from_op}" if not by_position
                    else f"{c.name}: the op's argument at position {list(schema_args).index(from_op)} where it passes one "
                         f"(no schema on this machine), else {c.words(c.default)}")
        else:
            value, source = c.default, "assumed"
            says = (f"assumed {c.words(c.default)}: the op's schema {c.missing or f'has no {c.name} argument'}; "
                    f"spell it out with {name}({c.name}=...)")
        spelled = f"{c.name}={'1/sqrt(head_dim)' if value is None and c.name == 'scale' else value}" if source != "op" else ""
        assumptions.append({"choice": c.name, "value": value, "source": source, "says": says, "spelled": spelled})
    return adapt(reference, schema_args, fixed), assumptions


__all__ = ["CHOICES", "REFERENCES", "Choice", "adapt", "fit", "parse_reference", "attention", "attention_bshd", "fused_add_rms_norm", "paged_attention", "quantized_matmul",
           "reference_for", "rms_norm", "rotary_embedding", "silu_and_mul"]
