"""User programs for benchmarks/fidelity.py, on model families tests/helpers/real_programs.py does not use:
each builds a tiny model from a transformers config (random weights, nothing downloaded), compiles
it with a backend defined here (in the user's script, as users do) that fails one way, and lets the
error reach the top (the program exits 1, or dies by a signal).

    python benchmarks/fidelity_programs.py SCENARIO

Scenarios:

- ``bert_refuses_gelu``: BERT (encoder-only) inference; the forward compiler has no kernel for
  aten.gelu (compile-time error).
- ``t5_rsqrt_fails_when_run``: T5 (encoder-decoder) inference; the forward compiler compiles, but
  its code fails when it runs on a graph holding aten.rsqrt (T5's RMS norm) (run-time error).
- ``whisper_refuses_attention_backward``: a Whisper encoder (audio, conv front end) training step;
  the backward compiler has no kernel for the backward of SDPA's CPU flash attention (backward
  compile error).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.fx as fx


def _has(gm: fx.GraphModule, name: str) -> bool:
    return any(n.op == "call_function" and name in str(n.target) for n in gm.graph.nodes)


def boxed(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    from functorch.compile import make_boxed_func

    return make_boxed_func(gm.forward)


def fw_refuses_gelu(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A forward compiler with no kernel for aten.gelu (BERT's intermediate activation)."""
    from functorch.compile import make_boxed_func

    if _has(gm, "aten.gelu"):
        raise NotImplementedError("no kernel for aten.gelu")
    return make_boxed_func(gm.forward)


def fw_rsqrt_fails_when_run(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A forward compiler whose code for a graph with aten.rsqrt fails when it runs."""
    from functorch.compile import make_boxed_func

    broken = _has(gm, "rsqrt")

    def run(*args: Any) -> Any:
        if broken:
            raise RuntimeError("rsqrt kernel: misaligned address")
        return gm(*args)

    return make_boxed_func(run)


def bw_refuses_attention_backward(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backward compiler with no kernel for the backward of CPU flash attention (SDPA)."""
    from functorch.compile import make_boxed_func

    if _has(gm, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        raise NotImplementedError("no kernel for aten._scaled_dot_product_flash_attention_for_cpu_backward")
    return make_boxed_func(gm.forward)


def bert_refuses_gelu() -> None:
    from torch._dynamo.backends.common import aot_autograd
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                     intermediate_size=64, max_position_embeddings=64, num_labels=3)).eval()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        torch.compile(model, backend=aot_autograd(fw_compiler=fw_refuses_gelu))(input_ids=ids, attention_mask=torch.ones_like(ids))


def t5_rsqrt_fails_when_run() -> None:
    from torch._dynamo.backends.common import aot_autograd
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1,
                                                num_heads=4, decoder_start_token_id=0, pad_token_id=0)).eval()
    ids = torch.randint(1, 64, (2, 8))
    with torch.no_grad():
        torch.compile(model, backend=aot_autograd(fw_compiler=fw_rsqrt_fails_when_run))(input_ids=ids, labels=ids)


def whisper_refuses_attention_backward() -> None:
    from torch._dynamo.backends.common import aot_autograd
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    encoder = WhisperEncoder(WhisperConfig(num_mel_bins=8, d_model=32, encoder_layers=1, encoder_attention_heads=4,
                                           encoder_ffn_dim=64, max_source_positions=8, decoder_layers=1,
                                           decoder_attention_heads=4, decoder_ffn_dim=64, vocab_size=64))
    features = torch.randn(2, 8, 16)  # (batch, mel bins, frames): two conv layers, the second of stride 2, give 8 positions
    compiled = torch.compile(encoder, backend=aot_autograd(fw_compiler=boxed, bw_compiler=bw_refuses_attention_backward))
    compiled(features).last_hidden_state.pow(2).mean().backward()


SCENARIOS = {"bert_refuses_gelu": bert_refuses_gelu, "t5_rsqrt_fails_when_run": t5_rsqrt_fails_when_run,
             "whisper_refuses_attention_backward": whisper_refuses_attention_backward}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print("survived")
