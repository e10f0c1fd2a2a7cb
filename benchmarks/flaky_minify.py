"""Minify a failure seen on some calls only (issue 41): success rate, queries, and how often
minify ends on another failure, over seeds.

    python benchmarks/flaky_minify.py [--seeds 20] [--json]

For each backend of ``flaky_backends.py`` (a bug that fires on a seeded 30% of calls, one that
fires when two threads race), a program calls its compiled model 30 times under
``graphdbg.capture`` in a fresh process: the dump counts the calls that failed
(``failure.calls``). Then, for each seed (the backend's draws; for the race, the machine's
timing), ``graphdbg.minify`` shrinks the dump in this process:

- ``rate``: as graphdbg does by default, each candidate asked until ``judge.rate``'s sequential
  test decides at the captured rate;
- ``once``: each candidate asked once (``failure_rate=1``: how minify treated every failure
  before).

A run succeeds when it ends on the captured failure, on a graph that still calls gelu, of at
most ``--small`` nodes (gelu with its input and output: 3). "Another failure": it ended on a
graph whose outcome is not the captured failure. "Lost": minify gave up (the original did not
fail when asked).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import flaky_backends  # noqa: E402

import graphdbg  # noqa: E402
from graphdbg.errors import GraphdbgError  # noqa: E402
from graphdbg.minify import minify  # noqa: E402
from graphdbg.store.manifest import find_dumps  # noqa: E402

SWITCH = 1e-4  # the interpreter's thread switch interval for the race (at the default 5 ms it rarely happens)


def capture(kind: str, folder: Path) -> tuple[Path, dict]:
    args = [sys.executable, str(HERE / "flaky_backends.py"), str(folder), kind] + ([str(SWITCH)] if kind == "racy" else [])
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=HERE.parent)
    if run.returncode != 0:
        raise SystemExit(run.stderr[-3000:])
    (dump,) = find_dumps(folder)
    return dump, json.loads(run.stdout.strip().splitlines()[-1])


def one(dump: Path, backend, seed: int, rate: float | None, small: int) -> dict:
    flaky_backends.reseed(seed)
    captured = graphdbg.load(dump).signature
    started = time.perf_counter()
    try:
        r = minify(dump, backend, isolate=False, failure_rate=rate, max_queries=400, time_budget=120)
    except GraphdbgError as e:
        return {"seed": seed, "lost": True, "why": str(e)[:200], "queries": None, "seconds": time.perf_counter() - started}
    same = r.outcome.status == "crash" and r.outcome.signature == captured
    gelu = any("gelu" in str(n.target) for n in r.case.gm.graph.nodes)
    return {"seed": seed, "lost": False, "final_nodes": r.final_nodes, "queries": r.queries, "same": same, "gelu": gelu,
            "ok": same and gelu and r.final_nodes <= small, "signature": r.outcome.signature,
            "seconds": time.perf_counter() - started}


def summary(rows: list[dict]) -> dict:
    done = [r for r in rows if not r["lost"]]
    queries = [r["queries"] for r in done]
    return {"runs": len(rows), "success": sum(bool(r.get("ok")) for r in rows), "lost": sum(r["lost"] for r in rows),
            "another_failure": sum(not r["same"] for r in done),
            "median_final_nodes": statistics.median([r["final_nodes"] for r in done]) if done else None,
            "median_queries": statistics.median(queries) if queries else None, "max_queries": max(queries, default=None),
            "seconds": round(sum(r["seconds"] for r in rows), 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--small", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=["seeded", "racy"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            if kind == "racy":
                sys.setswitchinterval(SWITCH)
            dump, calls = capture(kind, Path(tmp) / kind)
            backend = {"seeded": flaky_backends.seeded_gelu, "racy": flaky_backends.racy_gelu}[kind]
            nodes = graphdbg.load(dump).manifest_data["graph"]["nodes"]
            for mode, rate in (("rate", None), ("once", 1.0)):
                rows = [one(dump, backend, seed, rate, args.small) for seed in range(args.seeds)]
                report[f"{kind}/{mode}"] = {"calls": calls, "nodes": nodes, **summary(rows), "rows": rows}
                if not args.json:
                    s = report[f"{kind}/{mode}"]
                    print(f"{kind:6} {mode:4}  calls failed {calls['failed']}/{calls['failed'] + calls['passed']}, "
                          f"{nodes} nodes: success {s['success']}/{s['runs']}, lost {s['lost']}, another failure "
                          f"{s['another_failure']}, final nodes (median) {s['median_final_nodes']}, queries median "
                          f"{s['median_queries']} max {s['max_queries']}, {s['seconds']} s", flush=True)
            sys.setswitchinterval(0.005)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
