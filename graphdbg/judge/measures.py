"""How far an output is from its reference, by measures the user can bound.

An approximate kernel (int8 attention, an fp8 GEMM) never meets its output dtype's tolerance;
its authors judge it by cosine similarity and relative error against a reference. ``--within``
(``compare --swap``, ``bisect ops``, ``export-test --swap``, the pytest plugin's
``--graphdbg-within``) says which measure and which bound; every bound given must hold.

    >>> bounds = parse_within(["cosine>=0.9999", "rel_l1<=0.01"])
    >>> row = measure(reference, actual)          # cosine, rel_l1, rel_l2, max_abs, mean_abs, ulps, compared
    >>> [b.holds(row) for b in bounds]
    [True, False]

The measures, with ``a`` the output judged and ``b`` its reference (both in float64, over the
elements finite in both):

- ``cosine``: ``a·b / (|a| |b|)`` of the flattened outputs (1 where both are all zeros);
- ``rel_l1``: ``sum|a - b| / sum|b|``; ``rel_l2``: ``|a - b|_2 / |b|_2``;
- ``max_abs``: ``max|a - b|``;
- ``ulps``: ``max |a - b| / ulp(b)``, the spacing of ``a``'s dtype at ``b`` (its subnormal
  spacing near zero): ``judge.accuracy.ulp``, the judge's own.

Elements non-finite in either output count apart (``nonfinite_mismatch``: those where the two
differ, a NaN against a number, ``inf`` against ``-inf``); a bound never holds while there is one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from graphdbg.errors import GraphdbgError
from graphdbg.judge import dtypes
from graphdbg.judge.accuracy import ulp  # one definition of a dtype's spacing (judge.dtypes.ulp): the judge's

# A measure's name, the way it is bounded (a similarity from below, an error from above), and
# the range its bound may take.
MEASURES: dict[str, tuple[str, float, float]] = {
    "cosine": (">=", -1.0, 1.0),
    "rel_l1": ("<=", 0.0, math.inf),
    "rel_l2": ("<=", 0.0, math.inf),
    "max_abs": ("<=", 0.0, math.inf),
    "ulps": ("<=", 0.0, math.inf),
}

_SPEC = re.compile(r"^\s*([A-Za-z_0-9]+)\s*(>=|<=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Bound:
    """One ``--within`` bound: ``measure op value`` (``cosine>=0.9999``)."""

    measure: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.measure}{self.op}{self.value!r}"

    def holds(self, row: dict[str, Any]) -> bool:
        """Whether ``row`` (``measure``'s result) is within this bound."""
        got = row.get(self.measure)
        if got is None or row.get("nonfinite_mismatch") or (isinstance(got, float) and math.isnan(got)):
            return False
        return got >= self.value if self.op == ">=" else got <= self.value


def parse_within(specs: Iterable[str] | None) -> list[Bound]:
    """``--within`` strings (each one or more ``MEASURE>=X``/``MEASURE<=X``, comma-separated) to
    Bounds; a bad one is a GraphdbgError of one line (exit 2)."""
    bounds = []
    for spec in specs or []:
        for part in str(spec).split(","):
            if part.strip():
                bounds.append(_parse_one(part, str(spec)))
    return bounds


def _parse_one(part: str, spec: str) -> Bound:
    shown = f"--within {spec!r}"
    m = _SPEC.match(part)
    if m is None:
        raise GraphdbgError(f"{shown}: expected MEASURE>=X or MEASURE<=X (cosine>=0.9999, rel_l1<=0.01); "
                            f"measures: {', '.join(MEASURES)}")
    name, op, text = m.groups()
    if name not in MEASURES:
        raise GraphdbgError(f"{shown}: no measure {name!r} (measures: {', '.join(MEASURES)})")
    way, low, high = MEASURES[name]
    if op != way:
        side = "below (a similarity)" if way == ">=" else "above (an error)"
        raise GraphdbgError(f"{shown}: {name} is bounded from {side}: {name}{way}X")
    try:
        value = float(text)
    except ValueError:
        raise GraphdbgError(f"{shown}: {text!r} is not a number") from None
    if not (low <= value <= high):
        raise GraphdbgError(f"{shown}: {name}'s bound must be between {low:g} and {high:g}")
    return Bound(name, op, value)


def measure(reference: torch.Tensor, actual: torch.Tensor) -> dict[str, Any]:
    """Every measure of ``actual`` against ``reference`` (two floating tensors of one shape), and
    ``compared``: the number of elements they rest on."""
    b, a = reference.detach().flatten().double(), actual.detach().flatten().double()
    finite = torch.isfinite(a) & torch.isfinite(b)
    same_nonfinite = (a == b) | (torch.isnan(a) & torch.isnan(b))
    mismatch = int((~finite & ~same_nonfinite).sum().item())
    a, b = a[finite], b[finite]
    diff = (a - b).abs()
    n = diff.numel()
    ref_l1, ref_l2, err_l1, err_l2 = b.abs().sum().item(), b.norm().item(), diff.sum().item(), diff.norm().item()
    norms = a.norm().item() * ref_l2
    cosine = (a @ b).item() / norms if norms > 0 else (1.0 if a.norm().item() == ref_l2 else 0.0)
    spacing = ulp(b, actual.dtype) if dtypes.kind(actual.dtype) == dtypes.FLOAT else torch.ones_like(b)
    return {"cosine": min(1.0, max(-1.0, cosine)),
            "rel_l1": _ratio(err_l1, ref_l1), "rel_l2": _ratio(err_l2, ref_l2),
            "max_abs": diff.max().item() if n else 0.0, "mean_abs": diff.mean().item() if n else 0.0,
            "ulps": (diff / spacing).max().item() if n else 0.0,
            "compared": n, "nonfinite_mismatch": mismatch}


def _ratio(err: float, ref: float) -> float:
    return err / ref if ref > 0 else (0.0 if err == 0 else math.inf)


def within(bounds: Iterable[Bound], row: dict[str, Any]) -> list[dict[str, Any]]:
    """Each bound against ``row``: ``{"bound", "value", "holds"}``."""
    return [{"bound": str(b), "value": row.get(b.measure), "holds": b.holds(row)} for b in bounds]


__all__ = ["MEASURES", "Bound", "measure", "parse_within", "ulp", "within"]
