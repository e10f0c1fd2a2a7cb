"""Peak memory of replay against the inputs' bytes and against a plain eager run's peak.

Target (issue 10): an accuracy replay peaks at most 1.5 x (input bytes + eager peak), where the
eager peak is what a replay under eager without accuracy needs besides its inputs.

Three measurements, each in its own process so peaks don't mix:

  python benchmarks/replay_memory.py made  [--cache-gb 2] [--backend aot_eager]
      A graph graphdbg makes (fx.symbolic_trace of a decode step that reads a KV cache at
      synthesised slots and writes one slot in place), at a size that fits on the CPU.
      Reports input bytes, the eager peak, the accuracy replay's peak, and the ratio.
      On a GPU (--device cuda) peaks are torch.cuda.max_memory_allocated.

  python benchmarks/replay_memory.py file GRAPH.py [--backend eager] [--cap-gb 12]
      The CLI replaying a printed graph (e.g. a Qwen3-Next graph_module_*.py), as a user runs
      it: wall time and the peak RSS of the whole process tree (polled), killed past --cap-gb
      so the measurement can't swap the machine to death.

  python benchmarks/replay_memory.py corpus DIR [--device cuda] [--backend inductor] [--shard I/N]
      Every printed graph under DIR in-process on the device (the GPU run of the issue):
      status, input bytes, eager peak, accuracy peak and ratio per file, one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GIB = 1 << 30


# A graph with a multi-GiB cache ------------------------------------------------------

def _decode_step_module(slots: int, width: int):
    import torch

    class DecodeStep(torch.nn.Module):
        """One decode step: read the cache at this batch's slots, mix with the new token, write
        the new token's slot in place (the shape of a serving graph's KV-cache use)."""

        def forward(self, x, w, cache, slots_idx, write_idx):
            past = cache[slots_idx]                           # [batch, width] read at indices
            h = torch.nn.functional.linear(x.to(torch.float16), w)  # the graph's own cast
            mixed = (h.float() + past.float()).softmax(-1)
            cache.index_copy_(0, write_idx, h.to(cache.dtype))   # the cache is written in place
            return mixed, h

    return DecodeStep()


def _made_case(cache_gb: float, device: str):
    import torch
    import torch.fx as fx

    from graphdbg.case import Case

    width = 1024
    slots = max(int(cache_gb * GIB) // (width * 2), 16)
    gm = fx.symbolic_trace(_decode_step_module(slots, width))
    g = torch.Generator().manual_seed(0)
    dev = torch.device(device)
    inputs = [
        torch.randn(8, width, generator=g).to(dev),
        (torch.randn(width, width, generator=g) * 0.03).half().to(dev),
        torch.zeros(slots, width, dtype=torch.float16, device=dev).normal_(0, 0.1),
        torch.randint(0, slots, (8,), generator=g).to(dev),
        torch.randint(0, slots, (8,), generator=g).to(dev),
    ]
    return Case(gm=gm, inputs=inputs, device=dev), sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _one_made(mode: str, cache_gb: float, backend: str, device: str) -> dict:
    """Runs in a child process: 'eager' = one plain eager run; 'accuracy' = run_case with accuracy."""
    import torch

    from graphdbg.replay.run import run_case

    torch.set_num_threads(1)
    base = _rss()
    case, input_bytes = _made_case(cache_gb, device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    if mode == "eager":  # the eager peak: replay under eager without accuracy (the written cache is copied)
        status = run_case(case, "eager", accuracy=False).status
    else:
        status = run_case(case, backend, accuracy=True).status
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - before + input_bytes) if cuda else _peak_rss() - base
    return {"mode": mode, "status": status, "input_bytes": input_bytes, "peak_bytes": peak, "seconds": seconds}


def made(args: argparse.Namespace) -> None:
    runs = {}
    for mode in ("eager", "accuracy"):
        cmd = [sys.executable, __file__, "_one", mode, str(args.cache_gb), args.backend, args.device]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        runs[mode] = json.loads(out.strip().splitlines()[-1])
    inputs = runs["eager"]["input_bytes"]
    eager_peak = max(runs["eager"]["peak_bytes"] - inputs, 0)  # what eager needs besides its inputs
    acc = runs["accuracy"]["peak_bytes"]
    print(json.dumps({
        "graph": f"decode step, fp16 KV cache of {inputs / GIB:.2f} GiB, on {args.device}", "backend": args.backend,
        "input_gib": round(inputs / GIB, 3), "eager_peak_gib": round(eager_peak / GIB, 3),
        "accuracy_peak_gib": round(acc / GIB, 3), "accuracy_status": runs["accuracy"]["status"],
        "ratio_to_inputs": round(acc / inputs, 2), "ratio_to_inputs_plus_eager_peak": round(acc / (inputs + eager_peak), 2),
        "target": 1.5, "accuracy_seconds": round(runs["accuracy"]["seconds"], 2),
    }, indent=1))


# A printed graph through the CLI ------------------------------------------------------

def _tree_rss(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def file(args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(args.path), "--backend", args.backend,
           "--device", "cpu", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    peak, killed = 0, False
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        if peak > args.cap_gb * GIB:
            os.killpg(proc.pid, 9)
            killed = True
            break
        time.sleep(0.1)
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    status = None
    if out.strip():
        try:
            data = json.loads(out)
            status = {k: data.get(k) for k in ("status", "reference", "trusted", "untrusted_because")}
        except json.JSONDecodeError:
            pass
    print(json.dumps({"file": str(args.path), "backend": args.backend, "seconds": round(seconds, 1),
                      "peak_rss_gib": round(peak / GIB, 2), "killed_at_cap_gib": args.cap_gb if killed else None,
                      "outcome": status, "stderr_tail": err.strip().splitlines()[-1:] if not status else None}, indent=1))


# The corpus on a GPU -----------------------------------------------------------------

def corpus(args: argparse.Namespace) -> None:
    import torch

    import graphdbg
    from graphdbg.replay.run import run_case

    index, count = (int(x) for x in args.shard.split("/"))
    for path in sorted(Path(args.dir).rglob("*.py"))[index::count]:
        row: dict = {"file": str(path)}
        try:
            case = graphdbg.load(path).case(args.device)
            inputs = sum(v.numel() * v.element_size() for v in case.inputs if isinstance(v, torch.Tensor))
            cuda = args.device.startswith("cuda")
            if cuda:
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            eager = run_case(case, "eager", accuracy=False)
            eager_peak = torch.cuda.max_memory_allocated() - base if cuda else 0
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            acc = run_case(case, args.backend, accuracy=True)
            acc_peak = torch.cuda.max_memory_allocated() - base + inputs if cuda else 0
            row.update(eager=eager.status, status=acc.status, trusted=acc.trusted, reference=acc.reference,
                       signature=acc.signature, input_gib=round(inputs / GIB, 3), eager_peak_gib=round(eager_peak / GIB, 3),
                       accuracy_peak_gib=round(acc_peak / GIB, 3),
                       ratio=round(acc_peak / max(inputs + eager_peak, 1), 2) if cuda else None)
            del case
        except Exception as e:
            row.update(status="error", error=f"{type(e).__name__}: {str(e)[:200]}")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_one":
        _, _, mode, cache_gb, backend, device = sys.argv
        print(json.dumps(_one_made(mode, float(cache_gb), backend, device)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("made")
    p.add_argument("--cache-gb", type=float, default=2.0)
    p.add_argument("--backend", default="aot_eager")
    p.add_argument("--device", default="cpu")
    p = sub.add_parser("file")
    p.add_argument("path", type=Path)
    p.add_argument("--backend", default="eager")
    p.add_argument("--cap-gb", type=float, default=12.0)
    p = sub.add_parser("corpus")
    p.add_argument("dir", type=Path)
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--shard", default="0/1", help="I/N: every N-th file from the I-th (for N processes on one GPU)")
    args = parser.parse_args()
    {"made": made, "file": file, "corpus": corpus}[args.what](args)


if __name__ == "__main__":
    main()
