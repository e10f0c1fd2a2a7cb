"""A big dump replayed under Inductor against a bare script compiling the same module (issue 26)

    python benchmarks/replay_big.py [--gb 2] [--repeat 1] [--dump-dir DIR] [--json]

The program: an MLP of 4096-wide fp32 layers (``x + gelu(linear(rms_norm(x)))`` each), as
many as make ``--gb`` GiB of weights, run once under ``torch.no_grad`` with
``torch.compile(model, backend=graphdbg.capture("eager", mode="always"))``. Dynamo lifts the
weights into graph inputs, so the dump graphdbg writes holds them all in inputs.safetensors.

Timed, each as a fresh command with an empty Inductor cache (``TORCHINDUCTOR_CACHE_DIR`` a new
folder per command; Inductor's precompiled C++ header stays where it is, under ``$TMPDIR``, and
is built once before timing, so neither side pays for it; the dump's file is read once into the
page cache beforehand):

- ``python -m graphdbg replay DUMP --backend inductor --json``: the default replay (an isolated
  child, the eager reference, outputs compared);
- a bare script that loads the same safetensors, builds the same module on the meta device with
  those weights (``load_state_dict(assign=True)``), compiles it with
  ``torch.compile(backend="inductor")`` and runs it once under ``torch.no_grad``.

Reported: CPU seconds of the command's whole process tree (``RUSAGE_CHILDREN`` deltas; this
process is a child subreaper, so grandchildren that outlive their parent are reaped and counted
too), wall seconds, and the peak of the summed RSS of the command and all its descendants
(``/proc`` polled every 50 ms; pages shared between processes count once per process; the
processes over 16 MiB at that peak are listed), with the ratios graphdbg / bare. Targets:
CPU <= 1.5x, peak memory <= 1.2x. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
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
GIB = 1 << 30
WIDTH = 4096

MODEL = """
import torch
import torch.nn.functional as F


class BigMLP(torch.nn.Module):
    def __init__(self, layers, width):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = x + F.gelu(layer(F.rms_norm(x, x.shape[-1:])))
        return x
"""

CAPTURE = MODEL + """
import sys
import graphdbg

layers, width, dump_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model = BigMLP(layers, width)
x = torch.randn(64, width)
backend = graphdbg.capture("eager", dump_dir=dump_dir, mode="always", budget_bytes=(layers + 1) * width * (width + 1) * 4 + (1 << 30))
with torch.no_grad():
    torch.compile(model, backend=backend)(x)
"""

BARE = MODEL + """
import sys
from safetensors.torch import load_file

dump, layers, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tensors = load_file(dump + "/inputs.safetensors")
with torch.device("meta"):
    model = BigMLP(layers, width)
# the dump names each weight as Dynamo's graph input: layers.3.bias -> l_self_modules_layers_modules_3_parameters_bias_
names = {"input/l_self_modules_layers_modules_%s_parameters_%s_" % tuple(k.split(".")[1:]): k for k in model.state_dict()}
model.load_state_dict({names[k]: v for k, v in tensors.items() if k in names}, assign=True)
x = tensors["input/l_x_"]
del tensors
with torch.no_grad():
    out = torch.compile(model, backend="inductor")(x)
print(tuple(out.shape), float(out.float().abs().mean()))
"""

WARM_HEADER = "import torch; torch.compile(lambda x: (x * 2).sin())(torch.randn(8))"


def layers_for(gb: float) -> int:
    return max(1, round(gb * GIB / (WIDTH * WIDTH * 4)))


def make_dump(gb: float, where: Path) -> Path:
    """The dump of the program at ``gb`` GiB of weights, under ``where`` (made once, reused)."""
    layers = layers_for(gb)
    dumps = where / f"mlp-{layers}x{WIDTH}"
    found = sorted(dumps.glob("rank0/g0-captured-*"))
    if found:
        return found[0]
    script = where / "capture_program.py"
    script.write_text(CAPTURE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, str(script), str(layers), str(WIDTH), str(dumps)], check=True, env=env, cwd=where)
    found = sorted(dumps.glob("rank0/g0-captured-*"))
    if not found:
        raise SystemExit(f"the program left no dump under {dumps}")
    return found[0]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):  # a child started by any thread is listed under that thread
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _what(pid: int) -> str:
    """A short name for a process: its program, and the module it runs (``-m graphdbg.execution.child``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    name = os.path.basename(argv[0])
    if len(argv) > 2 and argv[1] == "-m":
        return f"{name} -m {argv[2]}"
    if len(argv) > 1 and argv[1].endswith(".py"):
        return f"{name} {os.path.basename(argv[1])}"
    return name


def tree_rss(pid: int) -> list[tuple[int, int]]:
    """(pid, RSS) of ``pid`` and each of its descendants."""
    found, stack, seen = [], [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        found.append((p, _rss(p)))
        stack += _children(p)
    return found


def _reap_orphans(wait_s: float = 30.0) -> None:
    """Wait for grandchildren reparented to this process (a subreaper), so their CPU counts; one
    still running after ``wait_s`` is left alone (and its CPU uncounted)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)  # one still running: a killed group takes a moment to go


def timed(cmd: list[str], tmp: Path, env: dict[str, str]) -> dict:
    """One fresh run of ``cmd`` with an empty Inductor cache: CPU and wall seconds, tree peak RSS."""
    cache = Path(tempfile.mkdtemp(dir=tmp))
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(cache / "stdout", "w+") as out, open(cache / "stderr", "w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env)
        peak, largest, at_peak = 0, 0, []
        while proc.poll() is None:
            tree = tree_rss(proc.pid)
            total = sum(r for _, r in tree)
            if total > peak:  # who held what at the peak, by process kind
                at_peak = [f"{_what(p)}: {r / GIB:.2f} GiB" for p, r in tree if r > 16 << 20]
            peak, largest = max(peak, total), max([largest, *(r for _, r in tree)])
            time.sleep(0.05)
        elapsed = time.perf_counter() - start
        _reap_orphans()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd} exited {proc.returncode}: {stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu, "wall_s": elapsed, "peak_rss": peak, "largest_rss": largest, "exit": proc.returncode,
            "at_peak": at_peak, "stdout": stdout.strip()[-4000:]}


def _status(stdout: str) -> str | None:
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return None
    return f"{data.get('status')} (reference {data.get('reference')})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0, help="GiB of weights, all of them graph inputs (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command, interleaved; the median is shown")
    ap.add_argument("--dump-dir", type=Path, default=None, help="keep the dump here and reuse it (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned grandchildren come back here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    layers = layers_for(args.gb)
    with tempfile.TemporaryDirectory(prefix="replay-big-") as tmp:
        work = args.dump_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        dump = make_dump(args.gb, work)
        input_bytes = (dump / "inputs.safetensors").stat().st_size
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        commands = {
            "bare script (inductor)": [sys.executable, str(bare), str(dump), str(layers), str(WIDTH)],
            "graphdbg replay --backend inductor": [sys.executable, "-m", "graphdbg", "replay", str(dump), "--backend",
                                                   "inductor", "--json"],
        }
        # Inductor's precompiled header (under $TMPDIR, not the cache dir) is built once here, and
        # the dump's file is read once into the page cache: neither is what is compared.
        subprocess.run([sys.executable, "-c", WARM_HEADER], check=True, env=env, cwd=ROOT, capture_output=True)
        with open(dump / "inputs.safetensors", "rb") as f:
            while f.read(64 << 20):
                pass
        runs: dict[str, list[dict]] = {name: [] for name in commands}
        for _ in range(args.repeat):  # interleaved: every command sees the same machine load
            for name, cmd in commands.items():
                runs[name].append(timed(cmd, Path(tmp), env))
    rows = {}
    for name, rs in runs.items():
        rows[name] = {k: statistics.median(r[k] for r in rs) for k in ("cpu_s", "wall_s", "peak_rss", "largest_rss")}
        rows[name]["runs"] = [{k: r[k] for k in ("cpu_s", "wall_s", "peak_rss", "largest_rss", "exit", "at_peak")} for r in rs]
        rows[name]["outcome"] = _status(rs[-1]["stdout"]) or rs[-1]["stdout"][-200:]
    base = rows["bare script (inductor)"]
    for r in rows.values():
        r["cpu_ratio"] = r["cpu_s"] / base["cpu_s"]
        r["peak_ratio"] = r["peak_rss"] / base["peak_rss"]
    result = {"dump": str(dump), "layers": layers, "width": WIDTH, "input_gib": input_bytes / GIB,
              "repeat": args.repeat, "targets": {"cpu_ratio": 1.5, "peak_ratio": 1.2}, "commands": rows}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    render(result)


def render(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{result['layers']} x {result['width']}^2 fp32 weights ({result['input_gib']:.2f} GiB of graph inputs) "
                    f"under Inductor, whole command, median of {result['repeat']}")
    for c in ("command", "CPU s", "wall s", "peak RSS GiB (tree)", "largest process GiB", "CPU ratio", "memory ratio", "outcome"):
        t.add_column(c)
    for name, r in result["commands"].items():
        t.add_row(name, f"{r['cpu_s']:.2f}", f"{r['wall_s']:.2f}", f"{r['peak_rss'] / GIB:.2f}", f"{r['largest_rss'] / GIB:.2f}",
                  f"{r['cpu_ratio']:.2f}", f"{r['peak_ratio']:.2f}", str(r["outcome"])[:60])
    console = Console()
    console.print(t)
    for name, r in result["commands"].items():  # the processes over 16 MiB at the tree's peak (last run)
        console.print(f"{name}, at its peak: " + "; ".join(r["runs"][-1]["at_peak"]), highlight=False)

if __name__ == "__main__":
    main()
