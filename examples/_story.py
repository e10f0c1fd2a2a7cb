"""What the story scripts share: run a graphdbg command as a user would, keep its JSON, report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = Path(os.environ.get("OUT") or (ROOT / "out"))


def env() -> dict[str, str]:
    """The environment for graphdbg commands: the examples importable by module name."""
    parts = [str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in parts if p)}


def graphdbg(*args: str, timeout: float = 600) -> tuple[int, dict, float]:
    """Run `graphdbg ARGS --json`; returns (exit code, parsed JSON, seconds)."""
    cmd = [sys.executable, "-m", "graphdbg.ui.cli", *map(str, args), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout)
    seconds = time.perf_counter() - start
    print(f"$ graphdbg {' '.join(map(str, args))}  -> exit {done.returncode} in {seconds:.1f}s", flush=True)
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        data = {"stdout": done.stdout[-3000:], "stderr": done.stderr[-3000:]}
    return done.returncode, data, seconds


def save(name: str, result: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str)[:6000])
    return path
