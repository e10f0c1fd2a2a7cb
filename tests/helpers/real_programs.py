"""Programs a user would run, for tests/test_same_failure.py: each builds a tiny model from a
transformers config (random weights, nothing downloaded), compiles it with a backend that fails
one way, and prints what the user sees (the traceback's frames, as JSON) on its last line.

Run as ``python real_programs.py SCENARIO`` alone, or under ``graphdbg capture --``: the user's
program must not change.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import torch
import torch.fx as fx


def _has(gm: fx.GraphModule, name: str) -> bool:
    return any(n.op == "call_function" and name in str(n.target) for n in gm.graph.nodes)


def fw_refuses_relu(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A forward compiler with no kernel for relu (OPT's MLP activation)."""
    from functorch.compile import make_boxed_func

    if _has(gm, "relu"):
        raise NotImplementedError("no kernel for aten.relu")
    return make_boxed_func(gm.forward)


def boxed(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    from functorch.compile import make_boxed_func

    return make_boxed_func(gm.forward)


def bw_refuses_threshold_backward(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backward compiler with no kernel for relu's gradient."""
    from functorch.compile import make_boxed_func

    if _has(gm, "threshold_backward"):
        raise NotImplementedError("no kernel for aten.threshold_backward")
    return make_boxed_func(gm.forward)


def bw_fails_when_run(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backward compiler whose compiled code fails when the backward runs."""
    from functorch.compile import make_boxed_func

    def run(*args: Any) -> Any:
        raise RuntimeError("backward kernel launch failed: invalid configuration argument")

    return make_boxed_func(run)


def bw_refuses_gelu_backward(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backward compiler with no kernel for aten.gelu_backward (ViT's MLP)."""
    from functorch.compile import make_boxed_func

    if _has(gm, "gelu_backward"):
        raise NotImplementedError("no kernel for aten.gelu_backward")
    return make_boxed_func(gm.forward)


def bw_gelu_kernel_fails_when_run(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backward compiler returning boxed code (one list of inputs, as AOTAutograd calls it) whose
    gelu_backward kernel fails when it runs."""
    broken = _has(gm, "gelu_backward")

    def run(args: list[Any]) -> Any:
        if broken:
            raise RuntimeError("gelu_backward kernel: invalid configuration argument")
        return gm(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def tiny_gpt_neox() -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=4, max_position_embeddings=64, hidden_act="gelu"))


def neox_training_step() -> None:
    """One training step of a tiny GPT-NeoX; its compiled backward fails when it runs."""
    from torch._dynamo.backends.common import aot_autograd

    model = tiny_gpt_neox()
    ids = torch.randint(0, 64, (2, 8))
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=boxed, bw_compiler=bw_gelu_kernel_fails_when_run))
    compiled(input_ids=ids, labels=ids).loss.backward()


def tiny_vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    return ViTForImageClassification(ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
                                               num_attention_heads=4, intermediate_size=64, num_labels=5))


def vit_training_step() -> None:
    """One training step of a tiny ViT; the backward compiler has no kernel for gelu_backward."""
    from torch._dynamo.backends.common import aot_autograd

    model = tiny_vit()
    pixels, labels = torch.randn(2, 3, 16, 16), torch.tensor([1, 3])
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=boxed, bw_compiler=bw_refuses_gelu_backward))
    compiled(pixel_values=pixels, labels=labels).loss.backward()


def nested_refuses_relu(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A backend that hands its graph to an aot_autograd backend (a nested piece) that refuses relu."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=fw_refuses_relu)(gm, example_inputs)


def segfaults_when_called(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Compiles fine; the compiled code reads address 0 (a kernel's bad pointer)."""
    import ctypes

    def run(*args: Any) -> Any:
        ctypes.string_at(0)

    return run


def tiny_qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)).eval()


def segfault() -> None:
    """A tiny Qwen2 whose compiled code segfaults; the backend is defined here, in the script."""
    model = tiny_qwen2()
    with torch.no_grad():
        torch.compile(model, backend=segfaults_when_called)(input_ids=torch.randint(0, 64, (1, 8)))
    print("survived")


def backend_for(scenario: str) -> Any:
    from torch._dynamo.backends.common import aot_autograd

    return {
        "forward": lambda: aot_autograd(fw_compiler=fw_refuses_relu),
        "backward_compile": lambda: aot_autograd(fw_compiler=boxed, bw_compiler=bw_refuses_threshold_backward),
        "backward_run": lambda: aot_autograd(fw_compiler=boxed, bw_compiler=bw_fails_when_run),
        "nested": lambda: nested_refuses_relu,
    }[scenario]()


def tiny_opt() -> torch.nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    return OPTForCausalLM(OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=64, num_hidden_layers=1, num_attention_heads=4,
                                    max_position_embeddings=64, word_embed_proj_dim=32))


def traceback_frames(scenario: str) -> list[list[Any]] | None:
    """One training step of a tiny OPT under the scenario's backend; the frames of the traceback the
    user gets (file name, function, line), or None if nothing failed."""
    model = tiny_opt()
    ids = torch.randint(0, 64, (2, 8))
    try:
        out = torch.compile(model, backend=backend_for(scenario))(input_ids=ids, labels=ids)
        out.loss.backward()
    except Exception as e:
        return [[f.filename.rsplit("/", 1)[-1], f.name, f.lineno] for f in traceback.extract_tb(e.__traceback__)]
    return None


if __name__ == "__main__":
    if sys.argv[1] == "segfault":
        segfault()
    elif sys.argv[1] == "vit_training_step":
        vit_training_step()
    elif sys.argv[1] == "neox_training_step":
        neox_training_step()
    else:
        print(json.dumps(traceback_frames(sys.argv[1])))
