"""What does `graphdbg replay --backend eager` cost over a plain script running the same module?

    python benchmarks/replay_overhead.py [--repeat 5] [--json]

Both are timed as whole commands (a fresh Python each time, so both pay for importing
torch), on the same small dump: the plain script imports torch, loads the same inputs with
safetensors and runs the same module eagerly. The ratio is graphdbg over the plain script.
graphdbg does more (parses graph.py, checks the dump, runs an float64 reference and the
backend, compares), so this is the price of that work, with and without a child process.
Most of it is importing torch._dynamo (about 1.7 s here), which torch.compile needs and the
plain script never loads; ``--direct`` calls the backend without Dynamo and shows the rest.
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
with torch.no_grad():
    out = model(x)
print(tuple(out.shape))
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed: {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dump = next(DUMP.glob("rank*/*"))
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "plain.py"
        script.write_text(PLAIN.format(root=str(ROOT), tensors=str(dump / "inputs.safetensors")))
        commands = {
            "plain script": [sys.executable, str(script)],
            "graphdbg replay --no-isolate --direct": [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(dump), "--backend", "eager", "--no-isolate", "--direct", "--json"],
            "graphdbg replay --no-isolate": [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(dump), "--backend", "eager", "--no-isolate", "--json"],
            "graphdbg replay (isolated)": [sys.executable, "-m", "graphdbg.ui.cli", "replay", str(dump), "--backend", "eager", "--json"],
        }
        for cmd in commands.values():  # warm the page cache and .pyc files once
            timed(cmd)
        times = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                times[name].append(timed(cmd))
    med = {name: statistics.median(v) for name, v in times.items()}
    base = med["plain script"]
    result = {name: {"seconds": s, "ratio": s / base} for name, s in med.items()}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"replaying a {dump.name} under eager, whole command, median of {args.repeat}")
    for c in ("command", "seconds", "ratio vs plain script"):
        t.add_column(c)
    for name, r in result.items():
        t.add_row(name, f"{r['seconds']:.2f}", f"{r['ratio']:.2f}")
    Console().print(t)


if __name__ == "__main__":
    main()
