"""Do two runs' outputs agree? Dtype-aware tolerances, NaN-aware, one verdict per output.

    >>> bad = compare_outputs((torch.ones(3),), (torch.ones(3) * 2,))
    >>> bad[0].index, bad[0].max_abs_error
    (0, 1.0)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

# (rtol, atol) by dtype: ten times torch.testing's defaults, because a compiler's reordering
# and fusion alone move results by several ulps; a real bug is usually far beyond that.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-5, 1e-4),
    torch.float16: (5e-3, 5e-4),
    torch.bfloat16: (3.2e-2, 1e-3),
    torch.complex64: (1.3e-5, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        TOLERANCES[getattr(torch, _name)] = (0.25, 0.1)


@dataclass
class OutputMismatch:
    index: int
    reason: str  # "value", "shape", "dtype", "nan", "type"
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    rtol: float | None = None
    atol: float | None = None
    detail: str = ""
    differing: int | None = None  # integer and bool outputs: how many elements differ, and where
    at: list[list[int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.reason == "value" and self.differing is not None:
            where = ", ".join(str(tuple(i)) if len(i) != 1 else str(i[0]) for i in self.at or [])
            more = ", ..." if (self.at and self.differing > len(self.at)) else ""
            return f"output {self.index}: {self.detail} (must be exact; at {where}{more})"
        if self.reason == "value" and (self.max_abs_error is None or self.max_rel_error is None):
            return f"output {self.index}: value differs ({self.detail})" if self.max_abs_error is None else (
                f"output {self.index}: max abs error {self.max_abs_error:.3g} ({self.detail})")
        if self.reason == "value":
            return (f"output {self.index}: max abs error {self.max_abs_error:.3g}, max rel error "
                    f"{self.max_rel_error:.3g} (rtol {self.rtol:g}, atol {self.atol:g})")
        return f"output {self.index}: {self.reason} differs ({self.detail})"


_SHOWN = 8  # indices of differing integer elements kept in a mismatch


def tolerance(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    r, a = TOLERANCES.get(dtype, (0.0, 0.0))
    return (r if rtol is None else rtol, a if atol is None else atol)


def compare_outputs(expected: Any, actual: Any, *, rtol: float | None = None, atol: float | None = None) -> list[OutputMismatch]:
    """Every output of ``actual`` that disagrees with ``expected``; empty when they agree."""
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    if len(exp_leaves) != len(act_leaves):
        return [OutputMismatch(0, "structure", detail=f"{len(exp_leaves)} outputs vs {len(act_leaves)}")]
    bad = []
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        m = compare_value(i, e, a, rtol=rtol, atol=atol)
        if m is not None:
            bad.append(m)
    return bad


def compare_value(index: int, e: Any, a: Any, *, rtol: float | None = None, atol: float | None = None) -> OutputMismatch | None:
    if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
        return OutputMismatch(index, "type", detail=f"{type(e).__name__} vs {type(a).__name__}")
    if not isinstance(e, torch.Tensor):
        if isinstance(e, float) and isinstance(a, (int, float)):
            return None if abs(e - a) <= 1e-6 * max(1.0, abs(e)) else OutputMismatch(index, "value", abs(e - a), None, 1e-6, 0, detail=f"{e} vs {a}")
        return None if e == a else OutputMismatch(index, "value", detail=f"{e!r} vs {a!r}")
    if tuple(e.shape) != tuple(a.shape):
        return OutputMismatch(index, "shape", detail=f"{list(e.shape)} vs {list(a.shape)}")
    if e.dtype != a.dtype:
        return OutputMismatch(index, "dtype", detail=f"{e.dtype} vs {a.dtype}")
    if e.numel() == 0:
        return None
    e = e.detach()
    a = a.detach().to(e.device)
    if not (e.is_floating_point() or e.is_complex()):  # integers and bools: exact, and say which elements
        diff = (e != a)
        if bool(diff.any()):
            count = int(diff.sum())
            at = diff.nonzero()[:_SHOWN].tolist()
            return OutputMismatch(index, "value", float((e.double() - a.double()).abs().max()), None, 0, 0,
                                  detail=f"{count} of {e.numel()} elements differ", differing=count, at=at)
        return None
    r, t = tolerance(e.dtype, rtol, atol)
    e64, a64 = e.to(torch.complex128 if e.is_complex() else torch.float64), a.to(torch.complex128 if a.is_complex() else torch.float64)
    e_nan, a_nan = torch.isnan(e64), torch.isnan(a64)
    if not torch.equal(e_nan, a_nan):
        return OutputMismatch(index, "nan", detail=f"expected {int(e_nan.sum())} NaN, got {int(a_nan.sum())}")
    ok = ~e_nan
    e64, a64 = e64[ok], a64[ok]
    same_inf = (e64 == a64)
    diff = (e64 - a64).abs()
    diff = torch.where(same_inf, torch.zeros_like(diff), diff)
    if bool(torch.isnan(diff).any()):  # inf vs finite or -inf
        return OutputMismatch(index, "value", float("inf"), float("inf"), r, t, detail="infinities differ")
    bound = t + r * e64.abs()
    if bool((diff > bound).any()):
        rel = diff / e64.abs().clamp_min(1e-12)
        return OutputMismatch(index, "value", float(diff.max()), float(rel.max()), r, t)
    return None


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a64 = a.detach().to(torch.float64)
    b64 = b.detach().to(a64.device, torch.float64)
    finite = torch.isfinite(a64) & torch.isfinite(b64)
    return float((a64[finite] - b64[finite]).abs().max()) if bool(finite.any()) else 0.0


def judge_outputs(expected: Any, actual: Any, *, ref64: Any = None, rtol: float | None = None,
                  atol: float | None = None, multiplier: float = 2.0) -> list[OutputMismatch]:
    """``compare_outputs``, forgiving low-precision noise when a float64 reference says so.

    An output outside the dtype tolerance of eager is still accepted when its distance to the
    float64 result is at most ``multiplier`` times eager's own distance to it: the backend is
    then no less accurate than eager, only differently rounded. This is the test PyTorch's
    accuracy minifier applies too.
    """
    bad = compare_outputs(expected, actual, rtol=rtol, atol=atol)
    if not bad or ref64 is None:
        return bad
    exp_leaves = pytree.tree_leaves(expected)
    r64_leaves = pytree.tree_leaves(ref64)
    if len(r64_leaves) != len(exp_leaves):
        return bad
    return forgive(bad, expected, actual, dict(enumerate(r64_leaves)), rtol=rtol, atol=atol, multiplier=multiplier)


def needs_float64(bad: list[OutputMismatch], expected: Any) -> list[int]:
    """The outputs among ``bad`` that a float64 reference could forgive (floating values)."""
    leaves = pytree.tree_leaves(expected)
    return [m.index for m in bad if m.reason == "value" and isinstance(leaves[m.index], torch.Tensor)
            and leaves[m.index].is_floating_point()]


def forgive(bad: list[OutputMismatch], expected: Any, actual: Any, ref64: dict[int, Any], *, rtol: float | None = None,
            atol: float | None = None, multiplier: float = 2.0) -> list[OutputMismatch]:
    """The mismatches of ``bad`` that the float64 values ``ref64`` (by output index) don't forgive."""
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    kept = []
    for m in bad:
        e, a, r = exp_leaves[m.index], act_leaves[m.index], ref64.get(m.index)
        if (m.reason == "value" and isinstance(r, torch.Tensor) and isinstance(e, torch.Tensor)
                and e.is_floating_point() and r.shape == e.shape):
            _, t = tolerance(e.dtype, rtol, atol)
            if _max_abs_diff(a, r) <= multiplier * _max_abs_diff(e, r) + t:
                continue
        kept.append(m)
    return kept
