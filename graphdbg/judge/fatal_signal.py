"""Which signal killed a process, from what ``faulthandler`` wrote as it died.

An armed dump (``graphdbg.capture.armed``) is written before the compiled code runs and points
``faulthandler`` at its ``fault.txt``. If a signal kills the process during the call, that file
holds the fatal error and the Python stack; the dump is read back as kind ``crash`` with
signature ``Signal SIGSEGV``, the same signature an isolated replay gives the same death.

    >>> signal_from_fault_text("Fatal Python error: Segmentation fault\\n\\nCurrent thread ...")
    'SIGSEGV'
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

FAULT_FILE = "fault.txt"

# faulthandler's names for the signals it handles (Modules/faulthandler.c)
_FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Floating-point exception": "SIGFPE",
          "Floating point exception": "SIGFPE", "Bus error": "SIGBUS", "Illegal instruction": "SIGILL"}


def exit_signal(returncode: int) -> str:
    """The name of the signal a process's negative exit status says killed it (``SIGSEGV``; a
    number torch's ``signal`` module doesn't name, as its number)."""
    import signal  # here: ls reads dumps through this module and never needs it

    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return str(-returncode)


# a handler's report of the signal it caught, printed before its process exits with a status of its own
_REPORTED = re.compile(r"\b(?:fatal signal|received signal|caught signal|killed by|signal)\s*:?\s+(SIG[A-Z]{2,8})\b", re.I)


def died_of(returncode: int | None, output: str = "") -> str | None:
    """The fatal signal a process died of, whatever shape its end took on this torch and
    platform, or None: the one reading of a child's end that self-checks and replays share.

    - killed by it: a negative status, as ``subprocess`` gives it (``-11``);
    - through a shell, which exits ``128 + N`` (``139``);
    - a handler that reported the signal and then exited with a status of its own (``1``):
      ``faulthandler``'s ``Fatal Python error: Segmentation fault``, or a line naming it
      (``Signal SIGSEGV``, ``received signal SIGSEGV``), as some torch versions print.
    ``output``: what the process wrote (its tail); read only when its status is a plain exit.
    """
    if not returncode:
        return None
    if returncode < 0:
        return exit_signal(returncode)
    if 128 < returncode <= 128 + 64:
        named = exit_signal(128 - returncode)
        if named.startswith("SIG"):
            return named
    fault = signal_from_fault_text(output)
    if fault and fault.startswith("SIG"):
        return fault
    reported = _REPORTED.findall(output)
    return reported[-1].upper() if reported else None


def signal_from_fault_text(text: str) -> str | None:
    """The signal's name in a faulthandler report, or None when there is none."""
    for line in text.splitlines():
        if line.startswith("Fatal Python error:"):
            what = line.partition(":")[2].strip()
            return _FATAL.get(what, what or None)
    return None


def resolve_crash(folder: Path, manifest: dict[str, Any], fault_text: str = "") -> None:
    """Fill an armed crash dump's ``failure`` from its ``fault.txt``: the signal, a signature,
    a message and the stack. A dump whose process died with no report (SIGKILL, ``os._exit``)
    says so; a parent that saw the exit status may have written ``signal`` already.

    ``fault_text`` is ``fault.txt`` as the caller read it through the gate (``store.safe_files``): this
    layer opens no file a dump names."""
    failure = manifest.get("failure") or {}
    if failure.get("kind") != "crash" or failure.get("signature"):
        return
    text = fault_text
    name = failure.get("signal") or signal_from_fault_text(text)
    if name:
        failure.update(signal=name, signature=f"Signal {name}",
                       message=f"the process was killed by {name} while the compiled code ran")
    else:
        failure.update(signature="Crash: the process ended while the compiled code ran",
                       message="the process ended during the call without a fatal-signal report (SIGKILL, os._exit?)")
    if text:
        failure["exception"] = {"type": name or "Crash", "message": failure["message"], "traceback": text[-8000:]}
