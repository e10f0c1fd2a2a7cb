"""Backends with a bug that shows on some calls only, for ``flaky_minify.py`` (issue 41).

Both break graphs that call gelu, and only on some calls of the compiled code:

- ``seeded_gelu``: a call fails with probability 0.3, drawn from a seeded stream (``reseed``);
- ``racy_gelu``: two threads add to one counter without a lock; a call fails when an update
  was lost, which depends on when the interpreter switches threads (``RACE_LOOPS`` sets how
  long they race, so how often it happens).

Both have a second bug, deterministic, with another message: a graph that calls sigmoid without
layer_norm fails every time. The program's graph has layer_norm, so it never shows there; a
minifier that cuts layer_norm away meets it, and must not take it for the captured failure.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import torch

RATE = 0.3
RACE_LOOPS = 4000
_draws = random.Random(0)


def reseed(seed: int) -> None:
    _draws.seed(seed)


def _calls(gm: torch.fx.GraphModule, name: str) -> bool:
    return any(name in str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def _decoy(gm: torch.fx.GraphModule) -> bool:
    return _calls(gm, "sigmoid") and not _calls(gm, "layer_norm")


def seeded_gelu(gm: torch.fx.GraphModule, example_inputs: list[Any]):
    gelu, decoy = _calls(gm, "gelu"), _decoy(gm)

    def run(*args: Any) -> Any:
        if gelu and _draws.random() < RATE:
            raise RuntimeError("gelu kernel read its scratch buffer before the other block wrote it")
        if decoy:
            raise RuntimeError("sigmoid lowering needs a normalized input")
        return gm.forward(*args)

    return run


def _pause() -> None:
    pass


def lost_update(loops: int = RACE_LOOPS) -> bool:
    """Two threads add 1 ``loops`` times each to one unlocked counter: whether an update was lost."""
    box = [0]

    def work() -> None:
        for _ in range(loops):
            v = box[0]
            _pause()  # a call: where the interpreter may switch threads between the read and the write
            box[0] = v + 1

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return box[0] != 2 * loops


def racy_gelu(gm: torch.fx.GraphModule, example_inputs: list[Any]):
    gelu, decoy = _calls(gm, "gelu"), _decoy(gm)

    def run(*args: Any) -> Any:
        if gelu and lost_update():
            raise RuntimeError("gelu kernel's two workers lost an update of the shared counter")
        if decoy:
            raise RuntimeError("sigmoid lowering needs a normalized input")
        return gm.forward(*args)

    return run


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.norm, self.l2 = torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.l1(x))
        g = torch.nn.functional.gelu(h)
        s = torch.sigmoid(h)
        return self.l2(g * s + h).relu().sum(-1)


if __name__ == "__main__":  # the user's program: 30 calls of the compiled model, a failure on some
    import json
    import sys

    import graphdbg

    backend = {"seeded": seeded_gelu, "racy": racy_gelu}[sys.argv[2]]
    if len(sys.argv) > 3:
        sys.setswitchinterval(float(sys.argv[3]))
    reseed(41)
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 16)
    compiled = torch.compile(model, backend=graphdbg.capture(backend, dump_dir=sys.argv[1]))
    failed = 0
    for _ in range(30):
        try:
            compiled(x)
        except RuntimeError:
            failed += 1
    print(json.dumps({"failed": failed, "passed": 30 - failed}))
