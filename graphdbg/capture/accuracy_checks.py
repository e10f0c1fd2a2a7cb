"""Which calls of a compiled graph accuracy mode compares with eager.

Comparing a call costs about one more run of the graph (eager, on copies of its inputs, the
parameters of a training step included): on every call, a healthy training step costs twice
the plain one. So each graph's (and each backward graph's) first ``first`` calls are compared,
where a wrong kernel shows itself; after them, each call is compared with probability
``1 / every``:

    >>> backend = graphdbg.capture("inductor", mode="accuracy", checks=AccuracyChecks(first=4, every=16))

Why this policy:

* **A failure that starts later is still caught**, within about ``every`` calls of its start
  (values that grow into an overflow, a loss scale, a learning rate warmed up, a data-dependent
  branch of the kernel): after the first calls the probability stays ``1 / every``, so the
  expected delay does not grow with the length of the run, as it would if the probability
  decreased.
* **Drawn, not periodic**: training repeats with periods of its own (gradient accumulation
  every k micro-steps, an evaluation every n steps); a failure on every other call would
  never meet "every 16th call". The draws come from a generator of graphdbg's own, seeded per
  graph, so the user's random streams (``random``, torch's) are untouched and a run samples the
  same calls each time.
* ``every=1`` compares every call (the cost of the old behaviour); ``every=0`` only the first
  ``first``. Once a graph has an accuracy dump it is no longer compared (one dump per failure).

``GRAPHDBG_ACCURACY_CHECKS="FIRST,EVERY"`` sets the default, so ``graphdbg capture --mode
accuracy -- python train.py`` and its torchrun workers can set it too.
"""

from __future__ import annotations

import os
import random
import zlib
from dataclasses import dataclass

ENV_CHECKS = "GRAPHDBG_ACCURACY_CHECKS"


@dataclass(frozen=True)
class AccuracyChecks:
    """The calls accuracy mode compares: the first ``first`` of each graph, then one in ``every``
    (drawn at random); ``every=1``: every call; ``every=0``: none after the first ones."""

    first: int = 4
    every: int = 16

    def __post_init__(self) -> None:
        if self.first < 0 or self.every < 0:
            raise ValueError(f"AccuracyChecks: first and every must be >= 0, not {self.first} and {self.every}")

    @classmethod
    def from_env(cls) -> AccuracyChecks:
        """``$GRAPHDBG_ACCURACY_CHECKS`` ("FIRST,EVERY", or "all" for every call), else the defaults."""
        text = os.environ.get(ENV_CHECKS, "").strip()
        if not text:
            return cls()
        if text == "all":
            return cls(every=1)
        try:
            first, every = (int(part) for part in text.split(","))
            return cls(first, every)
        except ValueError:
            raise ValueError(f"{ENV_CHECKS} must be FIRST,EVERY (two integers >= 0) or 'all', not {text!r}") from None

    def describe(self) -> str:
        if self.every == 1:
            return "every call"
        later = "none after" if self.every == 0 else f"then 1 in {self.every} at random"
        return f"the first {self.first} calls, {later}"

    def counter(self, graph: str) -> CheckCounter:
        """The calls of one graph (``graph``: its id, which seeds its draws)."""
        return CheckCounter(self, graph)


class CheckCounter:
    """One graph's calls: ``due()`` says whether this call is compared."""

    def __init__(self, policy: AccuracyChecks, graph: str):
        self.policy = policy
        self.calls = 0  # calls of the graph so far, this one included once due() was asked
        self.checked = 0
        self._draw = random.Random(zlib.crc32(graph.encode())).random

    def due(self) -> bool:
        self.calls += 1
        every = self.policy.every
        compared = self.calls <= self.policy.first or every == 1 or (every > 1 and self._draw() * every < 1)
        self.checked += compared
        return compared

    def record(self) -> dict[str, object]:
        """What an accuracy dump says of when it was caught (the manifest's ``accuracy_checks``)."""
        return {"call": self.calls, "compared": self.checked, "first": self.policy.first, "every": self.policy.every}


__all__ = ["AccuracyChecks", "CheckCounter", "ENV_CHECKS"]
