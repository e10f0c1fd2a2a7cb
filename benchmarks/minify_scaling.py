"""How minify's cost grows with the graph: query counts and time on models of increasing size,
against PyTorch's own minifier on the same failing programs.

    python benchmarks/minify_scaling.py                      # norm_mlp .. stack_8, both tools
    python benchmarks/minify_scaling.py --sizes norm_mlp,block,stack_2 --no-torch
    python benchmarks/minify_scaling.py --json out.json

Each row is one program (a model, a failing backend) run the way ``minify_vs_torch.py`` runs
it (its children and its measurement are reused): graphdbg captures a dump and minifies it in a
fresh process with its default budget; torch writes ``minifier_launcher.py`` and runs
``minify``. Sizes: ``norm_mlp`` (about 20 nodes), ``block`` (one transformer block, 50),
``stack_N`` (N blocks, about 50N). Printed per row: start and final nodes, queries and
minify seconds of each tool with their ratio (graphdbg / torch; below 1 is fewer or faster),
whether graphdbg's budget ended it, and which of graphdbg's passes spent the queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import minify_vs_torch as V  # noqa: E402  (registers the bench_* backends with Dynamo)

SIZES = ["norm_mlp", "block", "stack_2", "stack_4", "stack_8"]
FAILURES = {"compile": ("bench_refuses_gelu", "error"), "runtime": ("bench_broken_transpose", "error"),
            "accuracy": ("bench_bad_rewrite", "accuracy")}


def bench_graphdbg(model: str, backend: str, kind: str, work: Path, timeout: float) -> dict[str, Any]:
    """minify_vs_torch's graphdbg measurement, keeping the budget verdict and the passes' statistics."""
    dumps = work / "dumps"
    V._child(["--child-run", model, backend, "--capture", str(dumps)], V._env(BENCH_KIND=kind), str(work), timeout)
    calls = work / "graphdbg_calls"
    proc, wall = V._child(["--child-graphdbg", str(dumps)], V._env(BENCH_CALLS_FILE=str(calls)), str(work), timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout)[-1500:]}
    data = json.loads(line[len("BENCH "):])
    return {"queries": data["oracle_queries"], "backend_calls": V._calls_in(calls), "wall_s": wall,
            "minify_s": data["inner_s"], "start_nodes": data["start_nodes"], "final_nodes": data["final_nodes"],
            "budget_ended": data.get("budget_ended", False), "pass_stats": data.get("pass_stats", [])}


def _passes(stats: list[dict[str, Any]]) -> str:
    spent = [s for s in stats if s["queries"]]
    return ", ".join(f"{s['name']} {s['queries']}q/{s['accepted']}a" for s in spent) or "-"


def row_text(row: dict[str, Any]) -> str:
    g, t = row["graphdbg"], row.get("torch") or {}
    if "error" in g:
        return f"| {row['program']} | graphdbg error: {g['error'][-200:]!r} |"
    tq, ts, tf = (t.get("queries"), t.get("minify_s"), t.get("final_nodes")) if "error" not in t else (None, None, None)
    return (f"| {row['program']} | {g['start_nodes']} | {g['final_nodes']} / {tf if tf is not None else '-'} | "
            f"{g['queries']} / {tq if tq is not None else '-'} | {V._ratio(g['queries'], tq)} | "
            f"{g['minify_s']:.1f} / {ts if ts is None else round(ts, 1)} | {V._ratio(g['minify_s'], ts)} | "
            f"{'yes' if g['budget_ended'] else 'no'} | {_passes(g['pass_stats'])} |"
            + (f" torch: {t['error'][:80]!r}" if "error" in t else ""))


HEAD = ("| program | start nodes | final nodes g / t | queries g / t | q ratio | minify s g / t | time ratio "
        "| budget ended | graphdbg passes (queries/accepted) |\n|---|---|---|---|---|---|---|---|---|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES), help="models, smallest first")
    parser.add_argument("--failures", default="compile,runtime", help=f"of {', '.join(FAILURES)}")
    parser.add_argument("--no-torch", action="store_true", help="graphdbg only")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    print(HEAD, flush=True)
    for failure in args.failures.split(","):
        backend, kind = FAILURES[failure]
        for model in args.sizes.split(","):
            with tempfile.TemporaryDirectory(prefix="minify-scaling-") as tmp:
                (Path(tmp) / "g").mkdir()
                (Path(tmp) / "t").mkdir()
                row = {"program": f"{failure}/{model}",
                       "graphdbg": bench_graphdbg(model, backend, kind, Path(tmp) / "g", args.timeout)}
                if not args.no_torch:
                    row["torch"] = V.bench_torch(row["program"], model, backend, kind, Path(tmp) / "t", args.timeout)
            rows.append(row)
            print(row_text(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
