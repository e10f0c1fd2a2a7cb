"""A failure seen on some runs only: its rate over repeated replays, with a confidence interval,
and each distinct way it failed.

    >>> r = Repeated.of(outcomes, dump)       # `graphdbg replay DUMP --repeat 20`
    >>> r.line()
    'failed 6 of 20 runs: 30% (95% interval 15% to 52%); 6x RuntimeError: lost a race (the captured failure)'

The interval is Wilson's score interval: unlike p ± z·sqrt(p(1-p)/n) it stays inside [0, 1] and
is not zero wide at 0 or n failures, which is where a flaky failure's counts often are.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

Z95 = 1.959963984540054  # the normal distribution's 97.5th percentile: a two-sided 95% interval


def wilson(failed: int, runs: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for ``failed`` of ``runs``; (0, 1) for no runs."""
    if runs <= 0:
        return 0.0, 1.0
    p = failed / runs
    scale = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / scale
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Repeated:
    runs: int
    failed: int
    reproduced: int  # runs that showed the captured failure
    signatures: list[dict[str, Any]] = field(default_factory=list)  # {"signature", "count", "reproduces"}, most seen first
    how: str = ""  # where the runs ran: "in one child", or which run ended it and how the rest ran (execution.entry)

    @classmethod
    def of(cls, outcomes: list[Any], dump: Any, how: str = "") -> Repeated:
        failing = [o for o in outcomes if o.status != "pass"]
        counts = Counter(o.signature or o.status for o in failing)
        shows = {o.signature or o.status: bool(o.reproduces(dump)) for o in failing}
        return cls(runs=len(outcomes), failed=len(failing), reproduced=sum(o.reproduces(dump) for o in failing),
                   signatures=[{"signature": s, "count": n, "reproduces": shows[s]} for s, n in counts.most_common()], how=how)

    @staticmethod
    def shown(outcomes: list[Any], dump: Any) -> Any:
        """The run a repeated replay shows and exits by: the first with the captured failure,
        else the first failure, else the first run."""
        return next((o for o in outcomes if o.reproduces(dump)), next((o for o in outcomes if o.status != "pass"), outcomes[0]))

    @property
    def rate(self) -> float:
        return self.failed / self.runs if self.runs else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.failed, self.runs)

    def line(self) -> str:
        lo, hi = self.interval
        text = f"failed {self.failed} of {self.runs} runs: {self.rate:.0%} (95% interval {lo:.0%} to {hi:.0%})"
        seen = "; ".join(f"{s['count']}x {s['signature']}" + (" (the captured failure)" if s["reproduces"] else "")
                         for s in self.signatures)
        return text + (f"; {seen}" if seen else "") + (f" (ran {self.how})" if self.how else "")

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.interval
        return {"runs": self.runs, "failed": self.failed, "reproduced": self.reproduced, "rate": self.rate,
                "interval": [lo, hi], "confidence": 0.95, "signatures": self.signatures, "ran": self.how}
