"""ReplayOptions: how a replay runs, made once (by the CLI or the API) and passed down.

    >>> opts = ReplayOptions(passes="mypkg.passes:fuse_rmsnorm", isolate=True, rtol=1e-3)
    >>> replay_case(case, "inductor", opts)
    >>> replay_case(case, "inductor", opts.but(direct=True))

A new setting is one field here and the code that reads it. ``isolate`` and ``direct`` may be
None: the caller's default (``run_case`` runs in this process, ``replay_dump`` in a child, both
through torch.compile; minify isolates a failure that killed its process or a given timeout,
and tries the direct call first; bisect calls the backend directly).
This module imports no torch: the CLI makes options before it knows it needs torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphdbg.judge.accuracy import Tolerance

DEFAULT_TIMEOUT = 600.0  # seconds an isolated replay may take before it counts as a timeout


@dataclass(frozen=True)
class ReplayOptions:
    passes: Any = None  # "a.b:f,a.b:g@post_grad", or a list of callables / PassSpecs
    isolate: bool | None = None  # in a child process (a segfault or a hang becomes an Outcome)
    timeout: float | None = None  # seconds, for an isolated replay (DEFAULT_TIMEOUT when None)
    accuracy: bool = True  # judge the outputs against eager (float64 where it helps)
    rtol: float | None = None  # None: the dtype's own (judge.accuracy.TOLERANCES)
    atol: float | None = None
    direct: bool | None = None  # call backend(gm, inputs) instead of re-tracing with torch.compile
    pass_stage: str = "pre"  # where passes without ``@stage`` run
    backward: bool | None = None  # run the backward too (None: when the dump is a backward failure's forward)
    device: Any = None  # where a dump's inputs are built (None: the captured device if here, else the CPU)
    max_input_gb: float | None = None  # refuse bigger inputs (None: the device's free memory)
    trust_kernels: bool = False  # user Triton kernels from the dump's source, in the sandboxed child only (rebuild/kernel_source.py)
    python: str | None = None  # the interpreter an isolated replay's child runs (bisect envs; None: graphdbg's own)
    # where an isolated replay runs (``execution.executor``: a fresh child, warm workers, this process);
    # None: a fresh sandboxed child. This process's object: never sent to a child, not part of equality
    executor: Any = field(default=None, compare=False, repr=False)

    def but(self, **changes: Any) -> ReplayOptions:
        """These options with ``changes``."""
        return dataclasses.replace(self, **changes)

    @property
    def tolerance(self) -> Tolerance:
        from graphdbg.judge.accuracy import Tolerance  # judge brings torch; options are made before it is needed

        return Tolerance(self.rtol, self.atol)

    def for_child(self) -> dict[str, Any]:
        """These options as a replay child (``execution.child``, ``rank_main``) takes them, as JSON:
        all but what the parent alone uses, and the passes and device, which travel apart."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in PARENT_ONLY}


PARENT_ONLY = ("passes", "device", "isolate", "timeout", "max_input_gb", "python", "executor")  # the child gets passes and device apart


def replay_options(options: ReplayOptions | None = None, **settings: Any) -> ReplayOptions:
    """``options`` (default: the defaults) with the ``settings`` given as keywords."""
    return (options or ReplayOptions()).but(**settings) if settings else (options or ReplayOptions())
