"""Crash-safe capture: a graph's first calls are dumped before they run, and the dump is
removed when they return.

A segfault or abort in compiled code ends the process before any ``except`` runs, so the dump
must already be on disk. For the first ``ARMED_CALLS`` calls of each compiled graph:

1. a dump of kind ``crash`` is written (inputs as they are before the call, values up to
   ``armed_budget()``, 32 MiB by default; larger ones as statistics of an evenly spaced
   sample of ``ARMED_STATS_SAMPLE`` elements, each saying so), quietly;
2. ``faulthandler`` is pointed at its ``fault.txt`` for the length of the call;
3. when the call returns or raises, ``faulthandler`` is put back and the dump removed.

If a signal kills the process during the call, the dump stays, and ``fault.txt`` names the
signal and the Python stack (read back by ``graphdbg.judge.fatal_signal``). A Python signal handler
can't do this: CPython runs it between bytecodes, and a SIGSEGV in C code, or ``abort()``
(which restores the default action before re-raising), never gets there.

    >>> arming = ArmedCalls(capturing_backend, snap)
    >>> with arming.call(inputs):      # a nullcontext after the first ARMED_CALLS calls
    ...     out = compiled(*inputs)

Choices: ``faulthandler`` takes one file; a user who had it on gets it back on ``sys.stderr``
(where ``PYTHONFAULTHANDLER=1`` puts it) when the call returns. ``GRAPHDBG_ARMED_CALLS=0``
turns arming off.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from graphdbg.judge.fatal_signal import FAULT_FILE
from graphdbg.store.write import write_dump

if TYPE_CHECKING:
    from graphdbg.capture.hook import CapturingBackend
    from graphdbg.graph.snapshot import GraphSnapshot

ARMED_CALLS = 1  # the first call of a graph is where its kernels first run
# Bytes of input values an armed dump stores: the graph, specs, statistics and the small inputs
# (indices, lengths, masks) only, so a model whose weights are graph inputs doesn't write them
# all before its first step. Failures Python sees are dumped after the call with the full budget.
ARMED_BUDGET = 32 << 20
# Elements the statistics of an input over that budget are computed from (evenly spaced): a
# crash dump's stand-ins need its scale and range, not ten float64 passes over a 1 GiB weight.
ARMED_STATS_SAMPLE = 1 << 16


def armed_budget() -> int:
    """``GRAPHDBG_ARMED_BUDGET_MB`` (MiB), else ARMED_BUDGET."""
    try:
        return max(0, int(float(os.environ["GRAPHDBG_ARMED_BUDGET_MB"]) * (1 << 20)))
    except (KeyError, ValueError):
        return ARMED_BUDGET


def armed_calls() -> int:
    try:
        return max(0, int(os.environ.get("GRAPHDBG_ARMED_CALLS", ARMED_CALLS)))
    except ValueError:
        return ARMED_CALLS


def _restore_faulthandler(was_enabled: bool) -> None:
    # Never left pointing at the closed fault.txt: its descriptor number may be reused.
    if was_enabled:
        for stream in (sys.stderr, sys.__stderr__):
            try:
                faulthandler.enable(file=stream, all_threads=True)
                return
            except Exception:
                continue
    faulthandler.disable()


class ArmedCalls:
    """Counts a compiled graph's calls and arms the first few."""

    def __init__(self, owner: CapturingBackend, snap: GraphSnapshot):
        self.owner, self.snap = owner, snap
        self.left = armed_calls()

    def call(self, inputs: list[Any]) -> contextlib.AbstractContextManager[Any]:
        if self.left <= 0:
            return contextlib.nullcontext()
        self.left -= 1
        return self._armed(inputs)

    @contextlib.contextmanager
    def _armed(self, inputs: list[Any]) -> Iterator[Path | None]:
        snap, owner = self.snap, self.owner

        budget = min(owner.budget_bytes, armed_budget())

        def write() -> Path:
            return write_dump(owner.dump_dir, snap=snap, inputs=inputs, kind="crash", exc=None, backend=owner.backend_ref,
                              mode=owner.mode, budget_bytes=budget, inputs_state="before_call",
                              budget_reason=f"a stand-in: over the crash dump's budget ({budget / (1 << 20):g} MiB, "
                                            "GRAPHDBG_ARMED_BUDGET_MB), statistics of a sample only",
                              stats_sample=ARMED_STATS_SAMPLE,
                              # checked by whoever loads it after a crash: checking here would bring
                              # pydantic (0.1 s) into every process before its first graph's first call
                              check_manifest=False,
                              manifest_overrides={**owner.source_overrides(),
                                                  "failure": {"kind": "crash", "armed": True, "pid": os.getpid(),
                                                              "armed_budget_bytes": budget}})

        path = owner._guarded(write, "arm a crash dump")
        fault = None
        was_enabled = faulthandler.is_enabled()
        if path is not None:
            try:
                fault = open(path / FAULT_FILE, "w")
                faulthandler.enable(file=fault, all_threads=True)
            except Exception:
                fault = None
        try:
            yield path
        finally:
            if fault is not None:
                _restore_faulthandler(was_enabled)
                fault.close()
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
