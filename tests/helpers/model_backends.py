"""Backends that fail on real models, for tests/test_real_models.py. Importable by child
processes (repro.py, isolated replays) as ``model_backends:<name>``."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable

import torch
import torch.fx as fx


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name  # a dump's backend reference imports it again
    return fn


def argmax_off_by_one(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A 'fused argmax' that returns the index one past the right one (clamped to the last)."""
    for node in list(gm.graph.nodes):
        if node.op in ("call_function", "call_method") and getattr(node.target, "__name__", node.target) == "argmax":
            with gm.graph.inserting_after(node):
                shifted = gm.graph.call_function(torch.add, (node, 1))
            with gm.graph.inserting_after(shifted):
                clamped = gm.graph.call_function(torch.clamp, (shifted,), {"max": 63})
            node.replace_all_uses_with(clamped, delete_user_cb=lambda user: user is not shifted)
    gm.recompile()
    return gm.forward


def aborts_when_called(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Compiles fine; the compiled code aborts the process (a failed assert in a C++ kernel)."""
    def run(*args: Any) -> Any:
        os.abort()

    return run


def segfaults_when_called(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Compiles fine; the compiled code reads address 0 (a kernel's bad pointer)."""
    def run(*args: Any) -> Any:
        ctypes.string_at(0)

    return run


def refuses_silu(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """No lowering for SiLU (Llama's and Mixtral's MLP activation)."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and getattr(node.target, "__name__", node.target) == "silu":
            raise NotImplementedError("no lowering for silu")
    return gm.forward


def refuses_gelu(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """No lowering for GELU (GPT-2's MLP activation, which transformers writes out as tanh math:
    refuses its ``tanh``)."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and getattr(node.target, "__name__", node.target) in ("gelu", "tanh"):
            raise NotImplementedError(f"no lowering for {getattr(node.target, '__name__', node.target)}")
    return gm.forward


def inductor_with_relu_compile_error(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor with its test-only bug switched on: C++ for relu that doesn't compile."""
    import torch._inductor.config as config
    from torch._inductor.compile_fx import compile_fx

    with config.patch({"cpp.inject_relu_bug_TESTING_ONLY": "compile_error"}):
        return compile_fx(gm, example_inputs)


def refuses_non_leaf_inputs(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A backend whose calling convention can't take activations (tensors with autograd history)."""
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.requires_grad and not x.is_leaf:
            raise NotImplementedError("input is a non-leaf tensor that requires grad")
    return gm.forward


def fw_refusing_silu(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """An AOT forward compiler with no lowering for aten.silu (for ``aot_autograd(fw_compiler=...)``)."""
    for node in gm.graph.nodes:
        if "silu" in str(node.target):
            raise NotImplementedError(f"no lowering for {node.target}")
    return gm.forward


def compile_with_options(gm: fx.GraphModule, example_inputs: list[Any], *, refuse: str = "silu") -> Callable[..., Any]:
    """A backend taking options, as users bind them with ``functools.partial``."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and getattr(node.target, "__name__", node.target) == refuse:
            raise NotImplementedError(f"no lowering for {refuse}")
    return gm.forward


def fw_adds_a_hundredth(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """An AOT forward compiler whose kernel for the first output is off by 1e-2 (for
    ``aot_autograd(fw_compiler=...)``); it draws the same random numbers as eager."""
    from functorch.compile import make_boxed_func  # functorch brings AOT autograd: only when a test compiles

    def run(*args: Any) -> Any:
        out = list(gm(*args))
        out[0] = out[0] + 1e-2
        return out

    return make_boxed_func(run)


def bw_scales_a_gradient(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """An AOT backward compiler whose first gradient comes out 1.5 times too large."""
    from functorch.compile import make_boxed_func  # functorch brings AOT autograd: only when a test compiles

    def run(*args: Any) -> Any:
        grads = list(gm(*args))
        first = next(i for i, g in enumerate(grads) if isinstance(g, torch.Tensor))
        grads[first] = grads[first] * 1.5
        return grads

    return make_boxed_func(run)
