"""What does `pytest --graphdbg=DIR` cost over the shell loop a CI job would run instead?

    python benchmarks/pytest_plugin.py [--workers 2] [--json]

The folder holds the three committed fixture dumps of a transformer block (compile error,
runtime error, accuracy), all failing under their own backends. The loop is
``for d in DIR/*; do graphdbg replay $d --trust-backend; done`` (a fresh Python per dump);
the plugin is one pytest run, then one with ``-n WORKERS`` (xdist). Both replay each dump in a
child process. The ratios are plugin over loop: below 1 the plugin is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMPS = ("block_compile_error", "block_runtime_error", "block_accuracy")


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, done.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        for name in DUMPS:
            shutil.copytree(ROOT / "fixtures" / name, where / "regressions" / name)
        loop, codes = 0.0, []
        for name in DUMPS:
            s, code = _timed([sys.executable, "-m", "graphdbg.ui.cli", "replay", f"regressions/{name}", "--trust-backend"], where, env)
            loop += s
            codes.append(code)
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "graphdbg.ui.pytest_plugin",
                "--graphdbg=regressions", "--graphdbg-trust-backend", "-c", os.devnull, "--rootdir", str(where)]
        plugin, plugin_code = _timed(base, where, env)
        parallel, parallel_code = _timed([*base, "-n", str(args.workers)], where, env)
    row = {"dumps": len(DUMPS), "loop_s": round(loop, 2), "loop_exit_codes": codes, "plugin_s": round(plugin, 2),
           "plugin_exit": plugin_code, f"plugin_n{args.workers}_s": round(parallel, 2),
           "ratio_plugin_over_loop": round(plugin / loop, 2), f"ratio_n{args.workers}_over_loop": round(parallel / loop, 2)}
    print(json.dumps(row) if args.json else "\n".join(f"{k}: {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
