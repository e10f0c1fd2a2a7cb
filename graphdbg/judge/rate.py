"""Whether a candidate (a smaller graph for minify, a prefix of passes or nodes for bisect) still
fails the way the capture did, when the failure shows on some runs only: the one decision
minify and bisect share.

A candidate is run again until Wald's sequential probability ratio test decides between

- H1, it keeps the failure: each run shows it with the captured rate ``p``;
- H0, it lost the failure: each run shows it with at most ``p * lost`` (``lost`` = 1/20).

A run that passes, or fails another way, counts as one that did not show it. The test stops as
soon as the evidence crosses a bound set by ``alpha`` (the chance of keeping a candidate that
lost the failure) and ``beta`` (of dropping one that kept it), or after ``max_runs``:

    >>> test = RateTest.of(manifest)                  # p from failure.calls (else 1: every call)
    >>> verdict = test.decide(lambda: oracle.run(case), oracle.interesting)
    >>> verdict.keep, verdict.runs

With ``lost`` = 1/20 and ``alpha`` = 0.05 one run that shows the failure is evidence enough
(log 20 > log 19); what varies with ``p`` is how many runs without it drop a candidate: one at
``p = 1`` (a failure seen every time costs one query, as before), 5 at ``p = 0.5``, 9 at
``p = 0.3``, 30 at ``p = 0.1``. A failure seen 30% of the time is thus not lost on a candidate's unlucky run
(0.7**9 = 4%), and a candidate failing another way is never kept for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from graphdbg.store.schema import Manifest  # the type only: judge sits below store

T = TypeVar("T")

LOST = 1 / 20
ALPHA = 0.05
BETA = 0.05
MAX_RUNS = 60


def captured_rate(manifest: Manifest | None) -> float | None:
    """The share of the failing graph's calls at capture that failed (``failure.calls``); None
    when the dump did not count them (a compile error, or a dump from before graphdbg counted)."""
    calls = manifest.failure.calls if manifest is not None else None
    if calls is None or calls.failed is None or calls.passed is None or calls.failed <= 0:
        return None
    return calls.failed / (calls.failed + calls.passed)


@dataclass(frozen=True)
class Verdict(Generic[T]):
    keep: bool
    runs: int
    shown: int  # runs that showed the failure
    outcome: T  # the first run that showed it when kept, else the last run


@dataclass(frozen=True)
class RateTest:
    rate: float = 1.0  # p: the share of runs that show the failure
    lost: float = LOST
    alpha: float = ALPHA
    beta: float = BETA
    max_runs: int = MAX_RUNS

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 1:
            raise ValueError(f"a failure rate is in (0, 1], not {self.rate!r}")

    @classmethod
    def of(cls, manifest: Manifest | None = None, rate: float | None = None) -> RateTest:
        """``rate`` when given (``--failure-rate``), else the dump's counted calls, else 1."""
        return cls(rate=rate if rate is not None else captured_rate(manifest) or 1.0)

    @property
    def flaky(self) -> bool:
        return self.rate < 1

    def step(self, shown: bool) -> float:
        """The log likelihood ratio (H1 over H0) one run adds."""
        p1, p0 = self.rate, self.rate * self.lost
        if shown:
            return math.log(p1 / p0)
        return -math.inf if p1 >= 1 else math.log((1 - p1) / (1 - p0))

    @property
    def bounds(self) -> tuple[float, float]:
        """(drop at or below, keep at or above), Wald's approximations."""
        return math.log(self.beta / (1 - self.alpha)), math.log((1 - self.beta) / self.alpha)

    def decide(self, run: Callable[[], T], shows: Callable[[T], bool]) -> Verdict[T]:
        """Run until the test decides (or ``max_runs``: then keep only if the evidence leans to H1)."""
        low, high = self.bounds
        llr, runs, seen, first, missed = 0.0, 0, 0, None, None
        while True:
            outcome = run()
            runs += 1
            if shows(outcome):
                seen += 1
                first = outcome if first is None else first
                llr += self.step(True)
            else:
                missed = outcome
                llr += self.step(False)
            if llr >= high or (runs >= self.max_runs and llr > 0):
                return Verdict(True, runs, seen, first)
            if llr <= low or runs >= self.max_runs:
                return Verdict(False, runs, seen, missed if missed is not None else outcome)

    def runs_to_drop(self) -> int:
        """Runs in a row without the failure that drop a candidate."""
        step = self.step(False)
        return 1 if step == -math.inf else math.ceil(self.bounds[0] / step)

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "lost": self.lost, "alpha": self.alpha, "beta": self.beta, "max_runs": self.max_runs,
                "runs_to_drop": self.runs_to_drop()}
