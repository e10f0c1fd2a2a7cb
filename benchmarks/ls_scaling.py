"""Does `graphdbg ls` scale like parsing the files? (issues 26 and 38)

    python benchmarks/ls_scaling.py [CORPUS] [--times 1 8 32] [--dumps 100] [--repeat 3] [--json]

For a folder of printed graphs copied 1x, 8x, 32x (default: fixtures/sglang-thunderfx, 152 files), runs
`graphdbg ls --json` in a fresh process with an empty cache ("first"), then again ("cached":
every file from the per-file cache), and a bare `python` that `ast.parse`s the same files: the
anchor, the least any reader of those files pays. Copies are the same texts, and `ls` walks
each distinct forward once; so each size is run again on renamed copies (each copy's graphs name
their values apart, `l_x_` -> `l_c3_x_`: n different models, sharing only what one run shares
within itself, its ranks' forwards), and once more on those with nothing shared
(GRAPHDBG_LS_SHARE=0: every file and forward scanned on its own, the cost per file). Prints CPU
seconds (the process and its children), wall seconds and peak memory (the largest process),
each the least of REPEAT runs (a first run's each with an empty cache; the peak the largest of
them), and the ratios. Then `ls` of DUMPS dump folders (first run and cached), in wall seconds:
the target is 0.5 s for 100.
Targets (issue 38): first run <= 2x the anchor's CPU at 1x and at 8x renamed copies, cached
run <= 0.2x at 1x, peak memory at 32x <= 128 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "fixtures" / "sglang-thunderfx"
ANCHOR = "import ast, pathlib, sys\nfor p in sorted(pathlib.Path(sys.argv[1]).rglob('*.py')): ast.parse(p.read_text())\n"


_WRAP = ("import resource, subprocess, sys, json\n"
         "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
         "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "print(json.dumps([p.returncode, u.ru_utime + u.ru_stime, u.ru_maxrss, p.stderr[-2000:]]))\n")


def measured(cmd: list[str], env: dict[str, str], repeat: int = 1, caches: Path | None = None) -> dict[str, float]:
    """The least CPU seconds of ``cmd`` and its children over ``repeat`` runs, the least wall
    seconds, and the peak memory of its largest process (each run in a fresh wrapper, so that
    earlier runs don't count); ``caches``: each run with an empty cache of its own, under it (the
    last one's is left filled: ``cache_of``)."""
    runs = []
    for i in range(repeat):
        started = time.perf_counter()
        run_env = env if caches is None else {**env, "GRAPHDBG_CACHE_DIR": str(cache_of(caches, i))}
        proc = subprocess.run([sys.executable, "-c", _WRAP, *cmd], env=run_env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        code, cpu, rss_kib, err = json.loads(proc.stdout)
        if code != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({code}): {err}")
        runs.append((cpu, wall, rss_kib / 1024))
    return {"cpu_s": min(r[0] for r in runs), "wall_s": min(r[1] for r in runs), "peak_mib": max(r[2] for r in runs)}


def cache_of(caches: Path, i: int) -> Path:
    return caches / f"run{i}"


def copies(src: Path, dst: Path, n: int, renamed: bool = False) -> Path:
    """``n`` copies of ``src``; ``renamed``: each copy's graphs name their values apart (``l_x_``
    -> ``l_c3_x_``), so that no file or forward of one copy is one of another's, as n different
    models' would be."""
    folder = dst / (f"r{n}" if renamed else f"x{n}")
    for i in range(n):
        shutil.copytree(src, folder / f"copy{i}")
        for p in (folder / f"copy{i}").rglob("*.py") if renamed else ():
            p.write_text(re.sub(r"\b([lL])_", rf"\1_c{i}_", p.read_text()))
    old = time.time() - 60  # files written in the last seconds are not kept (the cache's racy rule)
    for p in folder.rglob("*"):
        os.utime(p, (old, old))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--times", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--dumps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement: the least CPU and wall is kept")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.corpus.exists():
        print(f"{args.corpus}: not found", file=sys.stderr)
        return 2
    rows, out = [], {}
    with tempfile.TemporaryDirectory(prefix="graphdbg-ls-bench-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPHDBG_CACHE_DIR": str(Path(tmp) / "cache")}
        ls = [sys.executable, "-m", "graphdbg", "ls", "--json"]  # as the console script runs it (graphdbg/__main__.py)
        k = args.repeat
        floor = measured([sys.executable, "-c", "pass"], env, k)  # the interpreter's own start: no listing costs less
        for n in args.times:
            folder = copies(args.corpus, Path(tmp), n)
            files = sum(1 for _ in folder.rglob("*.py"))
            anchor = measured([sys.executable, "-c", ANCHOR, str(folder)], env, k)
            first = measured([*ls, str(folder)], env, k, caches=Path(tmp) / f"x{n}-caches")
            again = measured([*ls, str(folder)], {**env, "GRAPHDBG_CACHE_DIR": str(cache_of(Path(tmp) / f"x{n}-caches", k - 1))}, k)
            models = copies(args.corpus, Path(tmp), n, renamed=True)
            models_anchor = measured([sys.executable, "-c", ANCHOR, str(models)], env, k)
            models_first = measured([*ls, str(models)], env, k, caches=Path(tmp) / f"r{n}-caches")
            alone = measured([*ls, str(models)], {**env, "GRAPHDBG_LS_SHARE": "0"}, k,  # and with nothing shared
                             caches=Path(tmp) / f"alone{n}-caches")
            rows.append({"times": n, "files": files, "anchor": anchor, "first": first, "cached": again,
                         "first_ratio": first["cpu_s"] / anchor["cpu_s"], "cached_ratio": again["cpu_s"] / anchor["cpu_s"],
                         "renamed_anchor": models_anchor, "renamed_first": models_first,
                         "renamed_ratio": models_first["cpu_s"] / models_anchor["cpu_s"],
                         "alone": alone, "alone_ratio": alone["cpu_s"] / models_anchor["cpu_s"]})
        out["ls"], out["python_start"] = rows, floor
        dumps = Path(tmp) / "dumps"
        src = next((ROOT / "fixtures" / "block_runtime_error").glob("rank*/*"))
        for i in range(args.dumps):
            shutil.copytree(src, dumps / f"run{i}" / "rank0" / src.name)
        old = time.time() - 60
        for p in dumps.rglob("*"):
            os.utime(p, (old, old))
        out["dump_folders"] = {"dumps": args.dumps, "first": measured([*ls, str(dumps)], env, k, caches=Path(tmp) / "dump-caches"),
                               "cached": measured([*ls, str(dumps)], {**env, "GRAPHDBG_CACHE_DIR": str(cache_of(Path(tmp) / "dump-caches", k - 1))}, k)}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("| copies | files | ast.parse CPU s | ls first CPU s (wall, peak MiB) | ratio | ls again CPU s (peak MiB) | ratio "
          "| renamed copies: ast.parse CPU s | ls first CPU s (wall, peak MiB) | ratio | nothing shared: ls first CPU s (peak MiB) | ratio |")
    print("|" + " --- |" * 12)
    for r in rows:
        print(f"| {r['times']}x | {r['files']} | {r['anchor']['cpu_s']:.2f} | {r['first']['cpu_s']:.2f} "
              f"({r['first']['wall_s']:.1f} s, {r['first']['peak_mib']:.0f}) | {r['first_ratio']:.2f} | "
              f"{r['cached']['cpu_s']:.2f} ({r['cached']['peak_mib']:.0f}) | {r['cached_ratio']:.2f} | "
              f"{r['renamed_anchor']['cpu_s']:.2f} | {r['renamed_first']['cpu_s']:.2f} ({r['renamed_first']['wall_s']:.1f} s, "
              f"{r['renamed_first']['peak_mib']:.0f}) | {r['renamed_ratio']:.2f} | {r['alone']['cpu_s']:.2f} "
              f"({r['alone']['peak_mib']:.0f}) | {r['alone_ratio']:.2f} |")
    d = out["dump_folders"]
    print(f"`python -c pass` (the interpreter's start, the least any command costs): {out['python_start']['cpu_s']:.3f} s CPU, "
          f"{out['python_start']['cpu_s'] / rows[0]['anchor']['cpu_s']:.2f}x the first anchor")
    print(f"ls of {d['dumps']} dump folders: first {d['first']['wall_s']:.2f} s wall ({d['first']['cpu_s']:.2f} s CPU), "
          f"cached {d['cached']['wall_s']:.2f} s wall ({d['cached']['cpu_s']:.2f} s CPU); target 0.5 s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
