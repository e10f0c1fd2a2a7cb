"""An attention backend that is silently wrong: int8 q/k without rescaling the scores.

Serving engines pick an attention kernel when they compile: the graph says
``scaled_dot_product_attention``, a pass swaps in the backend's own op. This backend quantises
q and k to int8 per tensor to save bandwidth, and forgets to multiply the int8 dot products
back by the two scales. Softmax then sees scores off by ``scale_q * scale_k``: the output
still has the right shape and a plausible range, and is wrong.

    graphdbg replay DUMP                                    # the dump's backend: mismatch
    graphdbg replay DUMP --backend inductor                 # plain Inductor: pass
    graphdbg bisect nodes DUMP --backend inductor --passes int8_attention:select_int8_attention
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn.functional as F

LIB = torch.library.Library("graphdbg_attention", "FRAGMENT")
LIB.define("int8_attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor")


def _quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = t.abs().amax().float().clamp_min(1e-8) / 127.0
    return torch.round(t.float() / scale).clamp(-127, 127).to(torch.int8), scale


def _int8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    q8, _q_scale = _quantize(q)
    k8, _k_scale = _quantize(k)
    scores = (q8.float() @ k8.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])  # BUG: no * q_scale * k_scale
    if is_causal:
        t, s = scores.shape[-2:]
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(v.dtype)


LIB.impl("int8_attention", _int8_attention, "CompositeExplicitAutograd")
torch.library.register_fake("graphdbg_attention::int8_attention", lambda q, k, v, is_causal: q.new_empty(q.shape), lib=LIB)


def select_int8_attention(gm: fx.GraphModule) -> int:
    """The attention-backend selection pass: every causal SDPA call runs on int8_attention."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is F.scaled_dot_product_attention:
            q, k, v = node.args[:3]
            with gm.graph.inserting_before(node):
                new = gm.graph.call_function(torch.ops.graphdbg_attention.int8_attention.default,
                                             (q, k, v, bool(node.kwargs.get("is_causal", False))))
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
            count += 1
    gm.recompile()
    return count


def inductor_with_int8_attention(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The compile backend the serving engine uses: select its attention kernel, then Inductor."""
    from torch._inductor.compile_fx import compile_fx

    select_int8_attention(gm)
    return compile_fx(gm, example_inputs)
