"""How fast is a dump, and what does a wrapped backend cost when nothing fails?

    python benchmarks/dump_speed.py [--gib 1.0] [--repeat 3] [--json]

1. Writing the same large inputs (1 GiB by default: bf16 weights, fp32 activations, int64
   indices) through graphdbg's dump writer vs ``torch.save`` of the same tensors, as a ratio
   (below 1 means graphdbg is faster). graphdbg's time includes the manifest, the printed
   graph and the atomic rename; torch.save's only the pickle.
2. The success path: ``torch.compile`` with ``graphdbg.capture(B)`` vs with ``B`` alone, for
   the compile (first call) and for steady-state calls.
3. Arming (crash-safe capture, ``graphdbg.capture.armed``): what the armed first call of a
   graph adds, i.e. writing its crash dump before the call and removing it after, on the same
   4-block model. Later calls are not armed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.fx as fx

import graphdbg
from fixtures import programs
from graphdbg.graph.snapshot import GraphSnapshot
from graphdbg.store.write import write_dump


def large_inputs(gib: float) -> dict[str, torch.Tensor]:
    total = int(gib * (1 << 30))
    rows = 4096
    # four bf16 weights take 7/8 of the bytes, an fp32 activation most of the rest, plus indices
    w_cols = max(1, (total * 7 // 8) // 4 // (rows * 2))
    a_cols = max(1, (total // 8 - rows * 8 * 8) // (rows * 4))
    g = torch.Generator().manual_seed(0)
    t = {f"w{i}": torch.randn(rows, w_cols, generator=g).to(torch.bfloat16) for i in range(4)}
    t["act"] = torch.randn(rows, a_cols, generator=g)
    t["ids"] = torch.randint(0, rows, (rows * 8,), generator=g)
    return t


def graph_over(names: list[str]) -> fx.GraphModule:
    g = fx.Graph()
    phs = [g.placeholder(n) for n in names]
    g.output(tuple(g.call_method("sum", (p,)) for p in phs))
    return fx.GraphModule(torch.nn.Module(), g)


def time_dump(tensors: dict[str, torch.Tensor], out: Path) -> float:
    snap = GraphSnapshot.take(0, graph_over(list(tensors)), keep_eager=False)
    start = time.perf_counter()
    path = write_dump(out, snap=snap, inputs=list(tensors.values()), kind="captured", exc=None, backend="bench",
                      mode="always", budget_bytes=1 << 40, inputs_state="at_compile")
    elapsed = time.perf_counter() - start
    shutil.rmtree(path)
    return elapsed


def time_torch_save(tensors: dict[str, torch.Tensor], out: Path) -> float:
    path = out / "inputs.pt"
    start = time.perf_counter()
    torch.save(tensors, path)
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def bench_dump(gib: float, repeat: int) -> dict:
    tensors = large_inputs(gib)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        out = Path(tmp)
        for _ in range(repeat):  # interleaved, so both see the same page cache and disk state
            ours.append(time_dump(tensors, out))
            theirs.append(time_torch_save(tensors, out))
    g, s = statistics.median(ours), statistics.median(theirs)
    return {"bytes": nbytes, "graphdbg_s": g, "torch_save_s": s, "ratio": g / s,
            "graphdbg_gib_s": nbytes / g / (1 << 30), "torch_save_gib_s": nbytes / s / (1 << 30)}


def bench_success_path(backend: str, calls: int) -> dict:
    model, x = programs.stack(4, dim=64, seq=16)

    def run(b) -> tuple[float, float]:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=b)
        with torch.no_grad():
            t0 = time.perf_counter()
            compiled(x)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(calls):
                compiled(x)
            steady = (time.perf_counter() - t0) / calls
        return first, steady

    run(backend)  # warm up imports and caches for both
    bare, wrapped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):  # interleaved, so that both see the same machine load
            bare.append(run(backend))
            wrapped.append(run(graphdbg.capture(backend, dump_dir=tmp)))
    bf, bs = (statistics.median(v) for v in zip(*bare))
    wf, ws = (statistics.median(v) for v in zip(*wrapped))
    return {"backend": backend, "compile_bare_s": bf, "compile_wrapped_s": wf, "compile_ratio": wf / bf,
            "call_bare_us": bs * 1e6, "call_wrapped_us": ws * 1e6, "call_ratio": ws / bs}


def bench_armed(repeat: int) -> dict:
    """Seconds to arm and disarm one call of the 4-block model's graph (its inputs: weights + x)."""
    from graphdbg.capture.armed import ArmedCalls

    model, x = programs.stack(4, dim=64, seq=16)
    inputs = [x, *model.parameters()]
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        owner = graphdbg.capture("eager", dump_dir=tmp)
        snap = GraphSnapshot.take(0, graph_over([f"i{n}" for n in range(len(inputs))]), keep_eager=False)
        for _ in range(repeat):
            arming = ArmedCalls(owner, snap)
            t0 = time.perf_counter()
            with arming.call(inputs):
                pass
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with arming.call(inputs):  # the second call: not armed
                pass
            times_after = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in inputs)
    return {"input_bytes": nbytes, "armed_call_s": statistics.median(times), "unarmed_call_s": times_after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--backends", default="eager,aot_eager")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = {"dump": bench_dump(args.gib, args.repeat),
              "success_path": [bench_success_path(b, args.calls) for b in args.backends.split(",")],
              "armed": bench_armed(max(args.repeat, 5))}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    d = result["dump"]
    t = Table(title=f"writing {d['bytes'] / (1 << 30):.2f} GiB of inputs (median of {args.repeat})")
    for c in ("tool", "seconds", "GiB/s", "ratio vs torch.save"):
        t.add_column(c)
    t.add_row("graphdbg dump", f"{d['graphdbg_s']:.3f}", f"{d['graphdbg_gib_s']:.2f}", f"{d['ratio']:.2f}")
    t.add_row("torch.save", f"{d['torch_save_s']:.3f}", f"{d['torch_save_gib_s']:.2f}", "1.00")
    s = Table(title="success path: wrapped backend vs bare backend (4-block model, median of 3)")
    for c in ("backend", "compile bare s", "compile wrapped s", "ratio", "call bare us", "call wrapped us", "ratio"):
        s.add_column(c)
    for r in result["success_path"]:
        s.add_row(r["backend"], f"{r['compile_bare_s']:.3f}", f"{r['compile_wrapped_s']:.3f}", f"{r['compile_ratio']:.2f}",
                  f"{r['call_bare_us']:.0f}", f"{r['call_wrapped_us']:.0f}", f"{r['call_ratio']:.2f}")
    a = result["armed"]
    armed = (f"arming the first call of a graph ({a['input_bytes'] / 1024:.0f} KiB of inputs): "
             f"{a['armed_call_s'] * 1e3:.1f} ms once; later calls {a['unarmed_call_s'] * 1e6:.1f} us")
    Console().print(t, s, armed)


if __name__ == "__main__":
    main()
