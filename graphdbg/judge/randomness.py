"""Which outputs of a graph flow from random ops, and did a backend draw what eager drew?

Accuracy mode replays eager from the random state the compiled call started in, so an eager
backend draws the same dropout masks. Inductor doesn't: its random ops are its own (a seed
drawn once, then its Philox numbers), and only ``torch._inductor.config.fallback_random``
makes it call eager's. An output that depends on a draw (``aten.native_dropout``, ``rand``,
``bernoulli``, ``scaled_dot_product_attention`` with ``dropout_p``, ...) can then differ by
the whole value of a dropped element while nothing is wrong.

Whether the backend drew the same numbers is read from the generators: after the same
draws from the same state they are in the same state again; after other draws (Inductor's
one seed instead of eager's masks) they are not.

    >>> random_outputs(gm)                       # output leaves that depend on a draw
    {0}
    >>> same_generators(rng_after_compiled, rng_after_eager)
    False
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.judge.op_names import call_name

# What random ops are called where no op tag says so (Dynamo's graphs call torch functions).
RANDOM_NAMES = frozenset({
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "feature_dropout",
    "native_dropout", "_fused_dropout", "fused_dropout", "rand", "randn", "randint", "rand_like", "randn_like",
    "randint_like", "randperm", "bernoulli", "multinomial", "normal", "poisson", "rrelu", "rrelu_with_noise",
    "exponential", "cauchy", "geometric", "log_normal", "uniform", "random", "gumbel_softmax", "inductor_random",
    "inductor_seeds", "inductor_randint", "philox_rand", "run_and_save_rng_state", "run_with_rng_state",
})
_DROPOUT_P = {"scaled_dot_product_attention": 4, "_scaled_dot_product_attention_math": 4,
              "_scaled_dot_product_flash_attention": 3, "_scaled_dot_product_flash_attention_for_cpu": 3,
              "_scaled_dot_product_efficient_attention": 5, "_scaled_dot_product_cudnn_attention": 5,
              "multi_head_attention_forward": 10}


def _arg(node: fx.Node, index: int, *names: str) -> Any:
    for name in names:
        if name in node.kwargs:
            return node.kwargs[name]
    return node.args[index] if len(node.args) > index else None


def is_random(node: fx.Node, modules: dict[str, Any] | None = None) -> bool:
    """Whether ``node`` draws random numbers (a dropout in eval mode, or with p 0, doesn't)."""
    if node.op == "call_module":
        sub = (modules or {}).get(str(node.target))
        return "Dropout" in type(sub).__name__ and bool(getattr(sub, "training", True)) and getattr(sub, "p", 1) != 0
    if node.op not in ("call_function", "call_method"):
        return False
    name = call_name(node)
    if name in _DROPOUT_P:
        p = _arg(node, _DROPOUT_P[name], "dropout_p")
        training = _arg(node, 13, "training") if name == "multi_head_attention_forward" else True
        return not (isinstance(p, (int, float)) and p == 0) and training is not False
    tags = getattr(node.target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return True
    base = name.rstrip("_")
    if base not in RANDOM_NAMES:
        return False
    if "dropout" in base:  # F.dropout(x, p, training, inplace), torch.dropout(x, p, train)
        p, training = _arg(node, 1, "p"), _arg(node, 2, "training", "train")
        return not (isinstance(p, (int, float)) and p == 0) and training is not False
    return True


def random_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    modules = dict(gm.named_modules())
    return [n for n in gm.graph.nodes if is_random(n, modules)]


def random_outputs(gm: fx.GraphModule, *, none_is_output: bool = False) -> set[int]:
    """Indices of the output leaves whose values depend on a random draw. ``none_is_output``:
    a ``None`` output counts as a position (a backward graph's outputs, one per input)."""
    modules = dict(gm.named_modules())
    tainted: set[fx.Node] = set()
    output = None
    for node in gm.graph.nodes:
        if node.op == "output":
            output = node
            continue
        if is_random(node, modules) or any(a in tainted for a in node.all_input_nodes):
            tainted.add(node)
            if node.op == "call_method" and str(node.target).endswith("_") and node.args:  # x.uniform_(): x is drawn
                if isinstance(node.args[0], fx.Node):
                    tainted.add(node.args[0])
    if output is None or not tainted:
        return set()
    leaves = (pytree.tree_flatten(output.args[0], is_leaf=lambda x: x is None)[0] if none_is_output
              else pytree.tree_leaves(output.args[0]))
    return {i for i, leaf in enumerate(leaves) if isinstance(leaf, fx.Node) and leaf in tainted}


def same_generators(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two ``capture.rng.rng_state()`` snapshots are the same generator states."""
    if a is None or b is None:
        return True
    if a.keys() != b.keys() or not torch.equal(a["cpu"], b["cpu"]):
        return False
    return all(torch.equal(x, y) for x, y in zip(a.get("cuda", []), b.get("cuda", [])))


def rng_state() -> dict[str, Any]:
    """The CPU generator's state and, where CUDA is initialised, each device's."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def same_draws(before: dict[str, Any] | None) -> Iterator[None]:
    """Run the body from ``before``'s random state, then put back the state found on entry."""
    if before is None:
        yield
        return
    after = rng_state()
    set_rng_state(before)
    try:
        yield
    finally:
        set_rng_state(after)


__all__ = ["RANDOM_NAMES", "is_random", "random_nodes", "random_outputs", "rng_state", "same_draws", "same_generators",
           "set_rng_state"]
