"""What does `graphdbg replay` cost over a plain script running the same module? (issue 26)

    python benchmarks/replay_overhead.py [--repeat 5] [--backends eager,inductor] [--json]

Both are timed as whole commands (a fresh Python each time, so both pay for importing
torch), on the same small dump: the plain script imports torch, loads the same inputs with
safetensors and runs the same module eagerly, or compiled with Inductor. The figure is CPU
seconds of the command and every process it started (the default replay's child included),
wall seconds beside it; the ratio is graphdbg over the plain script. A dump's manifest is checked
(pydantic, 0.1 s) the first time graphdbg reads it, at capture or at the first command; the
row "first read" gives each command an empty graphdbg cache to show that case. Every command gets an
empty Inductor cache, so both compile. graphdbg does more (parses graph.py, checks the dump,
runs the reference and the backend, compares), so this is the price of that work, with and
without a child process (targets: default replay <= 1.2x for eager, <= 1.3x for Inductor).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "fixtures" / "block_compile_error"

PLAIN = """
import sys, torch
from safetensors.torch import load_file
sys.path.insert(0, {root!r})
from fixtures import programs
tensors = load_file({tensors!r})
model, _ = programs.tiny_block()
x = tensors["input/l_x_"]
backend = sys.argv[1]
with torch.no_grad():
    out = model(x) if backend == "eager" else torch.compile(model, backend=backend)(x)
print(tuple(out.shape))
"""


def timed(cmd: list[str], tmp: Path, fresh: bool = False) -> tuple[float, float]:
    """(CPU seconds of ``cmd`` and its descendants, wall seconds), with an empty Inductor cache.
    graphdbg's own cache (the manifests it checked before) is the run's, kept between commands,
    or (``fresh``) an empty one: the first command ever to read the dump."""
    cache = Path(tempfile.mkdtemp(dir=tmp))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           "GRAPHDBG_CACHE_DIR": str(cache / "graphdbg" if fresh else tmp / "graphdbg-cache")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, elapsed


FIRST = "graphdbg replay, the dump's first read (its manifest checked)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backends", default="eager,inductor")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dump = next(DUMP.glob("rank*/*"))
    replay = [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(dump), "--json", "--backend"]
    result: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "plain.py"
        script.write_text(PLAIN.format(root=str(ROOT), tensors=str(dump / "inputs.safetensors")))
        for backend in args.backends.split(","):
            commands = {"plain script": [sys.executable, str(script), backend],
                        "graphdbg replay (isolated, the default)": [*replay, backend],
                        FIRST: [*replay, backend],
                        "graphdbg replay --no-isolate": [*replay, backend, "--no-isolate"]}
            if backend == "eager":
                commands["graphdbg replay --no-isolate --direct"] = [*replay, backend, "--no-isolate", "--direct"]
            for cmd in commands.values():  # warm the page cache and .pyc files once
                timed(cmd, Path(tmp))
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            for _ in range(args.repeat):  # interleaved: every command sees the same machine load
                for name, cmd in commands.items():
                    runs[name].append(timed(cmd, Path(tmp), fresh=name == FIRST))
            cpu = {name: statistics.median(c for c, _ in v) for name, v in runs.items()}
            wall = {name: statistics.median(w for _, w in v) for name, v in runs.items()}
            result[backend] = {name: {"cpu_s": cpu[name], "wall_s": wall[name], "ratio": cpu[name] / cpu["plain script"]}
                               for name in commands}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    for backend, rows in result.items():
        t = Table(title=f"replaying {dump.name} under {backend}, whole command, median of {args.repeat}")
        for c in ("command", "CPU s", "wall s", "CPU ratio vs plain script"):
            t.add_column(c)
        for name, r in rows.items():
            t.add_row(name, f"{r['cpu_s']:.2f}", f"{r['wall_s']:.2f}", f"{r['ratio']:.2f}")
        Console().print(t)


if __name__ == "__main__":
    main()
