"""Run a command with every torch.compile backend in it wrapped by capture."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
from pathlib import Path

from graphdbg.capture.settings import DEFAULT_BUDGET, ENV_BUDGET, ENV_DUMP_DIR, ENV_MODE, ENV_REDACT, MODES
from graphdbg.errors import GraphdbgError

SITE_DIR = Path(__file__).parent / "site"


def capture_env(dump_dir: str | os.PathLike, mode: str = "error", budget_bytes: int = DEFAULT_BUDGET,
                redact: bool = False) -> dict[str, str]:
    """The environment under which any Python process wraps its torch.compile backends."""
    if mode not in MODES:
        raise GraphdbgError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding graphdbg/
    parts = [str(SITE_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p), package_root]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[ENV_DUMP_DIR] = str(Path(dump_dir).resolve())
    env[ENV_MODE] = mode
    env[ENV_BUDGET] = str(budget_bytes)
    if redact:
        env[ENV_REDACT] = "1"
    return env


def run_captured(command: list[str], dump_dir: str | os.PathLike, mode: str = "error", budget_bytes: int = DEFAULT_BUDGET,
                 redact: bool = False) -> int:
    """Run ``command``; returns its exit code. Dumps land in ``dump_dir/rank<R>/``."""
    if not command:
        raise GraphdbgError("give the command to run after --, e.g. graphdbg capture -- python train.py")
    try:
        return subprocess.call(command, env=capture_env(dump_dir, mode, budget_bytes, redact))
    except FileNotFoundError as e:
        raise GraphdbgError(f"cannot run {command[0]!r}: {e.strerror}") from e


def dumps_in(dump_dir: str | os.PathLike) -> int:
    """How many dumps ``dump_dir`` holds (``rank<R>/<id>/manifest.json``), to tell whether a run wrote any."""
    return sum(1 for _ in Path(dump_dir).glob("rank*/*/manifest.json"))


def nothing_captured_hint(mode: str) -> str | None:
    """The one line a capture run that wrote no dump ends with: error mode only sees compile and
    run-time errors, so an output or gradient that is silently wrong needs accuracy mode."""
    if mode != "error":
        return None
    return ("graphdbg: no compile or run-time error was captured; outputs or gradients that are silently wrong "
            "are only seen with --mode accuracy (graphdbg capture --mode accuracy -- CMD)")


def die_like(code: int) -> int:
    """End this process the way the child ended: a child killed by a signal (``code`` < 0, as
    ``subprocess`` reports it) kills us with the same signal, so our parent sees -11 for a
    SIGSEGV, not exit 139. Returns ``code`` for a normal exit (and 128+N where the signal could
    not be re-raised)."""
    if code >= 0:
        return code
    sig = -code
    try:

        faulthandler.disable()  # our own handler would print a traceback of this line
        signal.signal(sig, signal.SIG_DFL)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), sig)
    except (OSError, ValueError, RuntimeError):
        pass
    return 128 + sig
