"""What does wrapping a backend with ``graphdbg.capture`` cost when nothing fails? (issue 26)

    python benchmarks/capture_cost.py [--gib 1.0] [--calls 500] [--rounds 41] [--repeat 3] [--json]

1. **Steady state**: ``torch.compile(model, backend=B)`` against
   ``torch.compile(model, backend=graphdbg.capture(B))`` on a small MLP whose compiled call
   takes about 50 us, after both have compiled and the armed first call is over. Rounds of
   ``--calls`` calls alternate between the two, so both see the same machine load; the
   figure is the least per-call CPU time over the rounds (other processes only add time; the
   median's ratio is printed too). Target: <= 1.05x.
2. **The first call of a graph with large inputs** (a model whose ``--gib`` GiB of weights
   are graph inputs, as Dynamo lifts parameters): the first call (Dynamo's trace, the
   backend's compile and the call) with the crash dump armed, against the same first call
   with arming off (``GRAPHDBG_ARMED_CALLS=0``), each in a fresh process, alternating.
   Target: <= 1.1x. Then a second model of the same size in the same process: a later
   graph's first call, after the first armed dump has imported the dump writer.
3. **The same first call under load**: as 2, while a busy process spins on each core (a
   shared CI machine, a laptop compiling). torch's thread pool then waits for a worker the
   OS has put aside at every parallel op; the armed and the unarmed calls alternate under the
   same load. Target: <= 1.1x.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import torch

import graphdbg

ROOT = Path(__file__).resolve().parent.parent

FIRST_CALL = """
import sys, tempfile, time, torch
import graphdbg
gib, armed = float(sys.argv[1]), sys.argv[2] == "armed"
width = 4096
layers = max(1, round(gib * (1 << 30) / (width * width * 4)))
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
later = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
x = torch.randn(2, width)
with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
    backend = graphdbg.capture("eager", dump_dir=tmp)
    seconds = []
    for m in (model, later):  # the process's first graph, then a later one (its own graph, same size)
        compiled = torch.compile(m, backend=backend)
        t0 = time.perf_counter()
        compiled(x)
        seconds.append(time.perf_counter() - t0)
print(*seconds, sum(p.numel() * p.element_size() for p in model.parameters()))
"""


def steady_state(calls: int, rounds: int) -> dict[str, float]:
    torch.set_num_threads(1)  # one thread: CPU time is then the call's, not other threads' spinning
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 16))
    x = torch.randn(8, 64)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        bare = torch.compile(model, backend="eager")
        wrapped = torch.compile(model, backend=graphdbg.capture("eager", dump_dir=tmp))
        for f in (bare, wrapped):  # compile, then the armed first call, then warm up
            for _ in range(200):
                f(x)
        per_call: dict[str, list[float]] = {"bare": [], "wrapped": []}
        for _ in range(rounds):
            for name, f in (("bare", bare), ("wrapped", wrapped)):
                t0 = time.process_time()  # CPU time: other processes on the machine don't count
                for _ in range(calls):
                    f(x)
                per_call[name].append((time.process_time() - t0) / calls)
    # the least time of each: interference from other processes only ever adds time
    b, w = min(per_call["bare"]), min(per_call["wrapped"])
    mb, mw = statistics.median(per_call["bare"]), statistics.median(per_call["wrapped"])
    return {"call_bare_us": b * 1e6, "call_wrapped_us": w * 1e6, "added_us": (w - b) * 1e6, "ratio": w / b,
            "median_ratio": mw / mb}


def first_call(gib: float, repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"armed": [], "unarmed": [], "armed_later": [], "unarmed_later": []}
    nbytes = 0
    for _ in range(repeat):
        for how in ("unarmed", "armed"):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPHDBG_ARMED_CALLS": "1" if how == "armed" else "0"}
            done = subprocess.run([sys.executable, "-c", FIRST_CALL, str(gib), how], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"first call ({how}) failed: {done.stderr[-2000:]}")
            first, later, nbytes = done.stdout.split()
            times[how].append(float(first))
            times[how + "_later"].append(float(later))
    a, u = statistics.median(times["armed"]), statistics.median(times["unarmed"])
    al, ul = statistics.median(times["armed_later"]), statistics.median(times["unarmed_later"])
    return {"input_bytes": int(nbytes), "first_armed_s": a, "first_unarmed_s": u, "ratio": a / u,
            "later_armed_s": al, "later_unarmed_s": ul, "later_ratio": al / ul,
            "armed_runs_s": times["armed"], "unarmed_runs_s": times["unarmed"]}


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """A process spinning on each core for the length of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)  # all of them running before the first measured process starts
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = {"steady_state": steady_state(args.calls, args.rounds), "first_call": first_call(args.gib, args.repeat)}
    with busy_cores():
        result["first_call_under_load"] = first_call(args.gib, args.repeat)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    s, f, fl = result["steady_state"], result["first_call"], result["first_call_under_load"]
    print(f"steady state: bare {s['call_bare_us']:.1f} us/call, captured {s['call_wrapped_us']:.1f} us/call "
          f"(+{s['added_us']:.1f} us), ratio {s['ratio']:.3f} (target <= 1.05)")
    print(f"first call, {f['input_bytes'] / (1 << 30):.2f} GiB of inputs: armed {f['first_armed_s']:.2f} s, "
          f"unarmed {f['first_unarmed_s']:.2f} s, ratio {f['ratio']:.2f} (target <= 1.1)")
    print(f"first call of a later graph of the same size (the writer's imports paid): armed {f['later_armed_s']:.2f} s, "
          f"unarmed {f['later_unarmed_s']:.2f} s, ratio {f['later_ratio']:.2f}")
    print(f"the first call under load ({os.cpu_count()} busy processes): armed {fl['first_armed_s']:.2f} s, "
          f"unarmed {fl['first_unarmed_s']:.2f} s, ratio {fl['ratio']:.2f} (target <= 1.1); a later graph's: "
          f"{fl['later_armed_s']:.2f} s against {fl['later_unarmed_s']:.2f} s, ratio {fl['later_ratio']:.2f}")


if __name__ == "__main__":
    main()
