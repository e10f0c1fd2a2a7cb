"""What does a warm sandboxed worker buy over a fresh sandboxed child per replay? (issue 52)

    python benchmarks/executor_warm.py [--runs 5] [--backend eager] [--json]

The same isolated replay of a fixture dump, ``--runs`` times, through the two sandboxed
executors of ``graphdbg.execution.executor``: ``FreshChild`` (the default of ``replay``: a new
``python -I`` and torch import per replay) and ``SandboxedWorkers`` (one warm worker, minify's
and ``share``'s: started on the first replay, then job after job). Wall seconds of each replay,
as this process waits for its Outcome; the ratio is fresh over warm, over all runs (the warm
pool's first run, which starts its worker, included) and over the runs after the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphdbg  # noqa: E402
from graphdbg.execution.entry import replay_dump  # noqa: E402
from graphdbg.execution.executor import FreshChild, SandboxedWorkers  # noqa: E402
from graphdbg.replay.options import ReplayOptions  # noqa: E402

DUMP = ROOT / "fixtures" / "block_compile_error"


def timed_runs(dump, backend: str, opts: ReplayOptions, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        outcome = replay_dump(dump, backend, opts)
        times.append(time.perf_counter() - start)
        assert outcome.isolated, outcome
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dump = graphdbg.load(next(DUMP.glob("rank*/*")))
    opts = ReplayOptions(isolate=True, timeout=600)
    fresh = timed_runs(dump, args.backend, opts.but(executor=FreshChild()), args.runs)
    with SandboxedWorkers(dump.path, specs=[args.backend, None]) as workers:
        warm = timed_runs(dump, args.backend, opts.but(executor=workers), args.runs)
    rows = {"backend": args.backend, "runs": args.runs, "fresh_child_s": fresh, "warm_workers_s": warm,
            "ratio_all": sum(fresh) / sum(warm),
            "ratio_after_first": statistics.mean(fresh[1:]) / statistics.mean(warm[1:]) if args.runs > 1 else None}
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.runs} isolated replays of {DUMP.name} under {args.backend}")
    print(f"  fresh child per replay: {sum(fresh):6.2f} s  ({', '.join(f'{t:.2f}' for t in fresh)})")
    print(f"  one warm worker:        {sum(warm):6.2f} s  ({', '.join(f'{t:.2f}' for t in warm)})")
    print(f"  fresh / warm: {rows['ratio_all']:.2f}x over all runs"
          + (f", {rows['ratio_after_first']:.2f}x after the first" if rows["ratio_after_first"] else ""))


if __name__ == "__main__":
    main()
