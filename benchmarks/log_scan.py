"""How long does `graphdbg ls` take to read a run's log, against grep over the same log?

    python benchmarks/log_scan.py [--repeat 3] [--json]

Two folders, each listed with ``list_dumps`` (the work of ``graphdbg ls`` after Python and torch
start), and the time of ``grep -c Traceback`` over the folder's log, the tool a user would run
instead to find the failures, printed as a ratio:

- ``qwen3-next``: the corpus' Qwen3-Next-80B-A3B-Instruct folder (fixtures/sglang-thunderfx: 8
  ranks' printed graphs and the run's log.txt). Formerly a 30 s assertion in tests/test_run_log.py.
- ``giant-line``: the two stream graphs of fixtures/corpus' Qwen3-Next and a 48 MB log without a
  newline followed by an unclosed traceback (a progress bar gone wrong). Formerly a 60 s assertion.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN3_NEXT = ROOT / "fixtures" / "sglang-thunderfx" / "Qwen" / "Qwen3-Next-80B-A3B-Instruct"
NEXT_FIXTURE = ROOT / "fixtures" / "corpus" / "Qwen3-Next-80B-A3B-Instruct"


def giant_line_folder(into: Path) -> Path:
    folder = into / "giant-line"
    folder.mkdir()
    for p in NEXT_FIXTURE.glob("graph_module_*.py"):
        shutil.copy(p, folder / p.name)
    with (folder / "log.txt").open("wb") as f:
        f.write(b"loading...\n" + b"x" * (48 << 20))
        f.write(b"\nRuntimeError: a line that looks like an error, outside any traceback\n")
        f.write(b"Traceback (most recent call last):\n" + b"  File \"y.py\", line 1, in f\n" * 3)
    return folder


def _median_seconds(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def measure(name: str, folder: Path, repeat: int) -> dict:
    from graphdbg.listing import list_dumps

    logs = sorted(folder.glob("*.txt")) + sorted(folder.glob("*.log"))
    listing = list_dumps(folder)  # once outside the timing: imports and first-use caches
    ls_s = _median_seconds(lambda: list_dumps(folder).groups, repeat)
    grep_s = _median_seconds(lambda: subprocess.run(["grep", "-c", "Traceback", *map(str, logs)],
                                                    capture_output=True), repeat)
    return {"folder": name, "files": len(listing.dumps), "log_bytes": sum(p.stat().st_size for p in logs),
            "graphdbg_ls_s": ls_s, "grep_s": grep_s, "ratio": ls_s / grep_s if grep_s else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch  # noqa: F401  (imported before timing: every graphdbg command pays for it anyway)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(measure("qwen3-next", QWEN3_NEXT, args.repeat))
        results.append(measure("giant-line", giant_line_folder(Path(tmp)), args.repeat))
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for r in results:
        print(f"{r['folder']}: {r['files']} graphs, log {r['log_bytes'] / 2**20:.1f} MiB: graphdbg ls {r['graphdbg_ls_s']:.2f} s, "
              f"grep -c Traceback {r['grep_s']:.3f} s, ratio {r['ratio']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
