"""What does ``mode="accuracy"`` cost per call of a healthy training step? (issue 39)

    python benchmarks/accuracy_checks_cost.py [--backend inductor] [--steps 40] [--rounds 7] [--json]

A small UNet (convolutions, GroupNorm, SiLU, a skip connection; batch 8 of 3x32x32) trains
with Adam: forward, ``loss.backward()``, ``opt.step()``. The model is compiled four ways in one
process, each on its own copy of the same weights:

* ``plain``: ``torch.compile(model, backend=B)``;
* ``error``: ``graphdbg.capture(B)`` (the default mode);
* ``every call``: ``graphdbg.capture(B, mode="accuracy", checks=AccuracyChecks(every=1))``:
  every call of the forward and of the backward compared with eager (the code before sampling);
* ``sampled``: ``graphdbg.capture(B, mode="accuracy")``: the default ``AccuracyChecks()``, the
  first 4 calls of each graph, then 1 in 16 drawn at random.

Each is warmed up past its compile and its first 4 calls (which all accuracy modes compare);
then rounds of ``--steps`` steps alternate between the four, so all see the same machine load.
Figures: CPU time per step (one torch thread), the mean over all rounds (the sampled mode's cost
is an average: a round compares a varying number of calls) and the least round's (other
processes only add time), and each one's ratio to ``plain`` in the same run. The first calls
are timed too: calls 2 to ``--first`` + 1 (call 1 compiles), so with ``--first 4`` the sampled
mode compares calls 2-4 of them and draws the 5th.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import graphdbg


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x)))
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class SmallUNet(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.inp = nn.Conv2d(3, width, 3, padding=1)
        self.down, self.mid = ResBlock(width, width), ResBlock(width, 2 * width)
        self.up = ResBlock(3 * width, width)
        self.out = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(self.inp(x))
        m = self.mid(F.avg_pool2d(h, 2))
        u = self.up(torch.cat([h, F.interpolate(m, scale_factor=2.0)], 1))
        return self.out(F.silu(u))


def make_step(model: nn.Module, backend: Any, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        F.mse_loss(compiled(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def measure(backend_name: str, steps: int, rounds: int, first: int) -> dict[str, Any]:
    torch.set_num_threads(1)  # CPU time is then the step's own, not other threads' spinning
    torch.manual_seed(0)
    base = SmallUNet()
    x, y = torch.randn(8, 3, 32, 32), torch.randn(8, 3, 32, 32)
    with tempfile.TemporaryDirectory() as tmp:
        backends = {
            "plain": backend_name,
            "error": graphdbg.capture(backend_name, f"{tmp}/error"),
            "every call": graphdbg.capture(backend_name, f"{tmp}/every", mode="accuracy",
                                           checks=graphdbg.AccuracyChecks(first=first, every=1)),
            "sampled": graphdbg.capture(backend_name, f"{tmp}/sampled", mode="accuracy",
                                        checks=graphdbg.AccuracyChecks(first=first, every=16)),
        }
        fns = {name: make_step(copy.deepcopy(base), b, x, y) for name, b in backends.items()}
        first_calls: dict[str, float] = {}
        for name, fn in fns.items():  # compile, then the first calls (all compared in accuracy mode)
            fn()
            t0 = time.process_time()
            for _ in range(first):
                fn()
            first_calls[name] = (time.process_time() - t0) / first
            for _ in range(3):
                fn()
        per_step: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                t0 = time.process_time()
                for _ in range(steps):
                    fn()
                per_step[name].append((time.process_time() - t0) / steps)
        dumps = {name: len(b.dumps) for name, b in backends.items() if not isinstance(b, str)}
    least = {name: min(v) * 1e3 for name, v in per_step.items()}
    mean = {name: statistics.fmean(v) * 1e3 for name, v in per_step.items()}
    return {"backend": backend_name, "steps": steps, "rounds": rounds, "torch": torch.__version__,
            "step_ms_mean": mean, "step_ms_least": least,
            "ratio_least": {n: least[n] / least["plain"] for n in least},
            "ratio_mean": {n: mean[n] / mean["plain"] for n in mean},
            "first_calls_ms": {n: v * 1e3 for n, v in first_calls.items()},
            "first_calls_ratio": {n: first_calls[n] / first_calls["plain"] for n in first_calls},
            "dumps": dumps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--first", type=int, default=4, help="calls of each graph compared before sampling")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.backend, args.steps, args.rounds, args.first)
    if args.json:
        print(json.dumps(r, indent=1))
        return
    print(f"UNet training step, backend {r['backend']}, torch {r['torch']}, {r['rounds']} rounds of {r['steps']} steps "
          "(CPU ms per step, one thread; mean over all rounds, least round; ratio to plain)")
    for name in r["step_ms_mean"]:
        print(f"  {name:<11} mean {r['step_ms_mean'][name]:7.2f} ms ({r['ratio_mean'][name]:.2f}x)   "
              f"least {r['step_ms_least'][name]:7.2f} ms ({r['ratio_least'][name]:.2f}x)   "
              f"first {args.first} calls {r['first_calls_ms'][name]:7.2f} ms ({r['first_calls_ratio'][name]:.2f}x)")
    print(f"  dumps written (a healthy backend: none expected): {r['dumps']}")


if __name__ == "__main__":
    main()
