"""graphdbg minify against PyTorch's own minifier, on the same failing programs.

    python benchmarks/minify_vs_torch.py            # every program (several minutes)
    python benchmarks/minify_vs_torch.py --quick    # the small ones, a couple of minutes
    python benchmarks/minify_vs_torch.py --json out.json

For each program both tools start from the failure as the user meets it:

- graphdbg: the program runs under ``graphdbg.capture(backend)``, which writes a dump; then
  ``graphdbg.minify(dump)`` runs in a fresh process, twice: isolated (the default: every run of
  the graph in a sandboxed worker) and in-process (``isolate=False``).
- PyTorch: the program runs with ``TORCHDYNAMO_REPRO_AFTER=dynamo`` (``TORCHDYNAMO_REPRO_LEVEL``
  2 for errors, 4 for accuracy), which writes ``minifier_launcher.py``; then
  ``python minifier_launcher.py minify`` runs in a fresh process.

Measured the same way for both: backend queries (each tool's own count: fx_minifier's "Made N
queries" and graphdbg's oracle queries; and, as a cross-check, every call of the backend
counted by the backend itself through ``BENCH_CALLS_FILE`` where it runs unsandboxed (torch's
minifier, graphdbg in-process); a sandboxed worker may not write there, so for the isolated
minify the count is the queries whose Outcome the workers sent back, each marked isolated), wall time of the minify process
(and of the minification itself, without the interpreter start and ``import torch`` both pay),
and the final graph's node count (placeholders and output included, as fx_minifier counts).

The backends are registered with ``torch._dynamo.register_backend`` when this module is
imported, so both tools' processes find them by name (the launcher is run through ``runpy``
after importing this module); graphdbg's sandboxed workers get them from this file
(``backends.resolve.registered_definition``: a name registered in this process goes to a child
as its ``path/script.py:function``).
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from fixtures import programs as P  # noqa: E402


def _count_call() -> None:
    path = os.environ.get("BENCH_CALLS_FILE")
    if path:
        with open(path, "a") as f:
            f.write("1\n")


def _calls(gm: Any, name: str) -> bool:
    return any(n.op in ("call_function", "call_method") and getattr(n.target, "__name__", n.target) == name
               for n in gm.graph.nodes)


def _register(fn: Any) -> Any:
    from torch._dynamo import register_backend

    register_backend(name=fn.__name__)(fn)
    return fn


# The programs.py backends rewrite the graph they are given and return its bound forward.
# Torch's minifier reuses the graph it passed in (and its accuracy check wants a Module
# back), so these compile a copy and return the GraphModule itself: fair to both tools.
def _compiled_copy(rewrite, gm, example_inputs):
    work = copy.deepcopy(gm)
    rewrite(work, example_inputs)
    return work


@_register
def bench_refuses_gelu(gm, example_inputs):
    """Compile error: no lowering for gelu."""
    _count_call()
    return _compiled_copy(P.refuses_gelu, gm, example_inputs)


@_register
def bench_broken_transpose(gm, example_inputs):
    """Runtime error in the compiled code: non-square linear weights transposed."""
    _count_call()
    return _compiled_copy(P.broken_transpose_backend, gm, example_inputs)


@_register
def bench_bad_rewrite(gm, example_inputs):
    """Accuracy: rsqrt(x) rewritten to 1/sqrt(x + 1e-2)."""
    _count_call()
    return _compiled_copy(P.bad_rewrite_backend, gm, example_inputs)


@_register
def bench_rsqrt_with_gelu(gm, example_inputs):
    """Compile error that needs two nodes together: an rsqrt and a gelu in one graph."""
    _count_call()
    if _calls(gm, "rsqrt") and _calls(gm, "gelu"):
        raise NotImplementedError("no fused lowering for rsqrt feeding gelu")
    return gm


class NormMLP(nn.Module):
    """About 20 nodes: an RMSNorm and a GELU MLP."""

    def __init__(self, dim: int = 32):
        super().__init__()
        self.norm = P.RMSNorm(dim)
        self.mlp = P.MLP(dim)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def make(model: str):
    if model == "norm_mlp":
        torch.manual_seed(0)
        return NormMLP().eval(), torch.randn(2, 8, 32)
    if model == "block":
        return P.tiny_block()
    return P.stack(int(model.split("_")[1]))


# name, model, backend, kind; stack_n is about 50n nodes
PROGRAMS = [
    ("compile/norm_mlp", "norm_mlp", "bench_refuses_gelu", "error", True),
    ("compile/block", "block", "bench_refuses_gelu", "error", True),
    ("runtime/block", "block", "bench_broken_transpose", "error", True),
    ("accuracy/block", "block", "bench_bad_rewrite", "accuracy", True),
    ("pair/stack_2", "stack_2", "bench_rsqrt_with_gelu", "error", True),
    ("compile/stack_10", "stack_10", "bench_refuses_gelu", "error", False),
    ("runtime/stack_4", "stack_4", "bench_broken_transpose", "error", False),
    ("accuracy/stack_4", "stack_4", "bench_bad_rewrite", "accuracy", False),
    ("pair/stack_10", "stack_10", "bench_rsqrt_with_gelu", "error", False),
]


# The child programs --------------------------------------------------------------------
def child_run_program(model: str, backend: str, capture: str | None) -> None:
    """Run the failing program once: under graphdbg.capture, or plain (torch's env vars set)."""
    mod, x = make(model)
    if capture:
        import graphdbg

        mode = "accuracy" if os.environ.get("BENCH_KIND") == "accuracy" else "error"
        be = graphdbg.capture(backend, dump_dir=capture, mode=mode)
    else:
        be = backend
    try:
        with torch.no_grad():
            torch.compile(mod, backend=be)(x)
    except Exception as e:
        print(f"failed as expected: {type(e).__name__}", file=sys.stderr)


def child_graphdbg_minify(dump_dir: str, isolate: bool = True) -> None:
    import graphdbg
    from graphdbg.minify import minify

    reported: list[bool] = []  # each query's Outcome as it came back (from the worker's answer, isolated)
    t0 = time.perf_counter()
    result = minify(graphdbg.load(dump_dir), isolate=isolate, on_query=lambda oracle, outcome: reported.append(outcome.isolated))
    seconds = time.perf_counter() - t0
    print("BENCH " + json.dumps({**result.to_dict(), "inner_s": seconds, "log": result.log, "reported": len(reported),
                                 "reported_isolated": sum(reported)}))


def child_torch_minify(launcher: str) -> None:
    import runpy

    sys.argv = [launcher, "minify"]
    t0 = time.perf_counter()
    try:
        runpy.run_path(launcher, run_name="__main__")
    finally:
        print(f"BENCH_INNER_S {time.perf_counter() - t0}", file=sys.stderr)


# The parent ------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHDYNAMO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT)])
    env.update(extra)
    return env


def _child(args: list[str], env: dict[str, str], cwd: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.perf_counter() - t0


def _calls_in(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def bench_graphdbg(name: str, model: str, backend: str, kind: str, work: Path, timeout: float) -> dict[str, Any]:
    dumps = work / "dumps"
    proc, _ = _child(["--child-run", model, backend, "--capture", str(dumps)], _env(BENCH_KIND=kind), str(work), timeout)
    # isolated: the sandboxed workers may not write BENCH_CALLS_FILE, so it is not set; their
    # answers say how many queries ran there (``reported_isolated``)
    proc, wall = _child(["--child-graphdbg", str(dumps)], _env(), str(work), timeout)
    data = _bench_line(proc)
    if "error" in data:
        return data
    calls = work / "graphdbg_calls"
    proc, wall_here = _child(["--child-graphdbg", str(dumps), "--no-isolate"], _env(BENCH_CALLS_FILE=str(calls)), str(work), timeout)
    here = _bench_line(proc)
    if "error" in here:
        return here
    return {"queries": data["oracle_queries"], "backend_calls": data["reported_isolated"], "wall_s": wall,
            "minify_s": data["inner_s"], "start_nodes": data["start_nodes"], "final_nodes": data["final_nodes"],
            "log": data["log"], "inproc_queries": here["oracle_queries"], "inproc_backend_calls": _calls_in(calls),
            "inproc_minify_s": here["inner_s"], "inproc_final_nodes": here["final_nodes"]}


def _bench_line(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout)[-1500:]}
    return json.loads(line[len("BENCH "):])


def bench_torch(name: str, model: str, backend: str, kind: str, work: Path, timeout: float) -> dict[str, Any]:
    level = "4" if kind == "accuracy" else "2"
    env = _env(TORCHDYNAMO_REPRO_AFTER="dynamo", TORCHDYNAMO_REPRO_LEVEL=level, TORCH_COMPILE_DEBUG_DIR=str(work))
    proc, _ = _child(["--child-run", model, backend], env, str(work), timeout)
    launchers = sorted(glob.glob(str(work / "torch_compile_debug" / "**" / "minifier_launcher.py"), recursive=True))
    if not launchers:
        return {"error": "no minifier_launcher.py written: " + proc.stderr[-600:]}
    launcher = launchers[-1]
    calls = work / "torch_calls"
    env = _env(TORCH_COMPILE_DEBUG_DIR=str(work), BENCH_CALLS_FILE=str(calls))
    try:
        proc, wall = _child(["--child-torch", launcher], env, str(Path(launcher).parent), timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s", "wall_s": timeout}
    err = proc.stderr
    made = re.findall(r"Made (\d+) queries", err)
    start = re.findall(r"Started off with (\d+) nodes", err)
    went = re.findall(r"Went from \d+ to (\d+) nodes", err)
    inner = re.findall(r"BENCH_INNER_S ([\d.]+)", err)
    if not made:
        return {"error": "torch's minifier did not finish: " + err[-800:], "wall_s": wall}
    start_nodes = int(start[0]) if start else None
    return {"queries": int(made[-1]), "backend_calls": _calls_in(calls), "wall_s": wall,
            "minify_s": float(inner[-1]) if inner else None, "start_nodes": start_nodes,
            "final_nodes": int(went[-1]) if went else start_nodes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the small programs")
    parser.add_argument("--only", default=None, help="run programs whose name contains this")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for name, model, backend, kind, quick in PROGRAMS:
        if (args.quick and not quick) or (args.only and args.only not in name):
            continue
        with tempfile.TemporaryDirectory(prefix="minify-bench-") as tmp:
            (Path(tmp) / "g").mkdir()
            (Path(tmp) / "t").mkdir()
            g = bench_graphdbg(name, model, backend, kind, Path(tmp) / "g", args.timeout)
            t = bench_torch(name, model, backend, kind, Path(tmp) / "t", args.timeout)
        rows.append({"program": name, "graphdbg": g, "torch": t})
        print(_row_text(rows[-1]), flush=True)
    print()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def _row_text(row: dict[str, Any]) -> str:
    g, t = row["graphdbg"], row["torch"]
    if "error" in g or "error" in t:
        return f"{row['program']}: graphdbg {g.get('error', 'ok')!s:.300} | torch {t.get('error', 'ok')!s:.300}"
    return (f"{row['program']}: nodes {g['start_nodes']}->{g['final_nodes']} vs {t['start_nodes']}->{t['final_nodes']}, "
            f"queries {g['queries']} vs {t['queries']}, minify {g['minify_s']:.2f}s isolated, {g['inproc_minify_s']:.2f}s "
            f"in-process vs {t['minify_s'] or 0:.2f}s")


def _per_query(seconds: Any, queries: Any) -> str:
    return f"{seconds / queries:.2f}" if isinstance(seconds, (int, float)) and isinstance(queries, int) and queries else "-"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| program | start nodes (g/t) | queries g | queries t | q ratio | backend calls g iso/g here/t | minify s g iso "
            "| minify s g here | minify s t | time ratio g iso/t | s/query g iso | s/query g here | s/query t "
            "| process s g iso/t | final nodes g | final nodes t |")
    lines = [head, "|" + "---|" * head.count("|")[:-1] if False else "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        g, t = r["graphdbg"], r["torch"]
        if "error" in g or "error" in t:
            lines.append(f"| {r['program']} | error: {g.get('error', '')[:80]!r} {t.get('error', '')[:80]!r} |")
            continue
        lines.append(f"| {r['program']} | {g['start_nodes']}/{t['start_nodes']} | {g['queries']} | {t['queries']} | "
                     f"{_ratio(g['queries'], t['queries'])} | {g['backend_calls']}/{g['inproc_backend_calls']}/{t['backend_calls']} | "
                     f"{g['minify_s']:.2f} | {g['inproc_minify_s']:.2f} | {t['minify_s'] or 0:.2f} | "
                     f"{_ratio(g['minify_s'], t['minify_s'])} | {_per_query(g['minify_s'], g['queries'])} | "
                     f"{_per_query(g['inproc_minify_s'], g['inproc_queries'])} | {_per_query(t['minify_s'], t['queries'])} | "
                     f"{g['wall_s']:.1f}/{t['wall_s']:.1f} | "
                     f"{g['final_nodes']} | {t['final_nodes']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-run":
        child_run_program(sys.argv[2], sys.argv[3], sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--capture" else None)
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-graphdbg":
        child_graphdbg_minify(sys.argv[2], isolate="--no-isolate" not in sys.argv[3:])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-torch":
        child_torch_minify(sys.argv[2])
    else:
        sys.exit(main())
