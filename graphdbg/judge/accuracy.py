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
# and fusion alone move results by several ulps; a real bug is usually far beyond that. The
# atol is for values of magnitude 1 and is scaled down for smaller ones (``Tolerance.for_value``).
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
    # how much of the output is off: elements outside tolerance (NaN where eager has none, and the
    # reverse, included) of ``elements``; what ``same_difference`` compares a replay's with
    off: int | None = None
    elements: int | None = None

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


@dataclass(frozen=True)
class Tolerance:
    """The tolerances a user asked for; None leaves the dtype's own (``TOLERANCES``)."""

    rtol: float | None = None
    atol: float | None = None

    def of(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a value of ``dtype``."""
        r, a = TOLERANCES.get(dtype, (0.0, 0.0))
        return (r if self.rtol is None else self.rtol, a if self.atol is None else self.atol)


    def for_value(self, expected: torch.Tensor) -> tuple[float, float]:
        """(rtol, atol) for judging values against ``expected``: the dtype's atol scaled by the
        largest magnitude of ``expected`` when that is below 1 (``SCALE_FLOOR`` at least); an
        atol the user gave is used as given."""
        r, t = self.of(expected.dtype)
        if self.atol is None and t > 0:
            t *= min(1.0, max(SCALE_FLOOR, _magnitude(expected)))
        return r, t


# A dtype's atol suits values of magnitude about 1. Gradients are often a thousandth of that
# (a mean loss over many elements): bf16's 1e-3 would pass a gradient whose largest element is
# 1e-3 whatever its error, 25% included (a wrong SiLU derivative of a bf16 model went unseen
# on 5 of its 6 gradients). So the atol is scaled by the expected value's largest magnitude, down
# to this fraction: values that are all about 0 (the residue of a fused multiply-add) keep an atol.
SCALE_FLOOR = 1e-3


def _magnitude(e: torch.Tensor) -> float:
    """The largest finite ``|e|``, up to 1 (where the dtype's atol applies as it is)."""
    worst = 0.0
    for _, chunk, _ in _chunks(e.detach(), e.detach()):
        mags = chunk.abs() if not chunk.is_complex() else chunk.abs().float()
        worst = max(worst, float(torch.where(torch.isfinite(mags), mags, torch.zeros_like(mags)).amax()))
        if worst >= 1.0:
            break
    return worst


BY_DTYPE = Tolerance()


def compare_outputs(expected: Any, actual: Any, *, tol: Tolerance = BY_DTYPE) -> list[OutputMismatch]:
    """Every output of ``actual`` that disagrees with ``expected``; empty when they agree."""
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    if len(exp_leaves) != len(act_leaves):
        return [OutputMismatch(0, "structure", detail=f"{len(exp_leaves)} outputs vs {len(act_leaves)}")]
    bad = []
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves)):
        m = compare_value(i, e, a, tol=tol)
        if m is not None:
            bad.append(m)
    return bad


def compare_value(index: int, e: Any, a: Any, *, tol: Tolerance = BY_DTYPE) -> OutputMismatch | None:
    if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
        return OutputMismatch(index, "type", detail=f"{type(e).__name__} vs {type(a).__name__}")
    if not isinstance(e, torch.Tensor):
        if isinstance(e, float) and isinstance(a, (int, float)):
            return None if abs(e - a) <= 1e-6 * max(1.0, abs(e)) else OutputMismatch(index, "value", abs(e - a), None, 1e-6, 0, detail=f"{e} vs {a}")
        return None if e == a else OutputMismatch(index, "value", detail=f"{e!r} vs {a!r}")
    if tuple(e.shape) != tuple(a.shape):
        return OutputMismatch(index, "shape", detail=f"{list(e.shape)} vs {list(a.shape)}", elements=e.numel())
    if e.dtype != a.dtype:
        return OutputMismatch(index, "dtype", detail=f"{e.dtype} vs {a.dtype}", elements=e.numel())
    if e.numel() == 0:
        return None
    e = e.detach()
    a = a.detach().to(e.device)
    if _same_view(e, a):  # both runs returned the same view of an input (a cache passed through)
        return None
    if not (e.is_floating_point() or e.is_complex()):  # integers and bools: exact, and say which elements
        count, at, worst = 0, [], 0.0
        for offset, ec, ac in _chunks(e, a):
            if torch.equal(ec, ac):
                continue
            diff = ec != ac
            n = int(diff.sum())
            if n:
                count += n
                worst = max(worst, float((ec.double() - ac.double()).abs().max()))
                if len(at) < _SHOWN:
                    flat = diff.nonzero().flatten()[:_SHOWN - len(at)] + offset
                    at += _unravel(flat, e.shape)
        if count:
            return OutputMismatch(index, "value", worst, None, 0, 0, detail=f"{count} of {e.numel()} elements differ",
                                  differing=count, at=at, off=count, elements=e.numel())
        return None
    r, t = tol.for_value(e)
    if not e.is_complex() and _surely_close(e, a, r, t):
        return None
    return _compare_exactly(index, e, a, r, t)


# The first pass judges in the output's dtype (float32 for narrower floats) with tolerances
# this much tighter, so that its rounding can't pass an element float64 would fail; elements
# it can't pass are judged in float64, and only those. Outputs that agree take one pass.
_MARGIN = 0.9


def _surely_close(e: torch.Tensor, a: torch.Tensor, r: float, t: float) -> bool:
    """True when every element is within tolerance: judged in the output's dtype, and in
    float64 only for the elements that judgement doesn't clear. False says: judge exactly."""
    work = e.dtype if e.dtype == torch.float64 else torch.float32
    for _, ec, ac in _chunks(e, a):
        if torch.equal(ec, ac):  # bit for bit (a cache both runs wrote the same slots of)
            continue
        ew, aw = ec.to(work), ac.to(work)
        unclear = ~torch.isclose(aw, ew, rtol=r * _MARGIN, atol=t * _MARGIN, equal_nan=True)
        if not bool(unclear.any()):
            continue
        e64, a64 = ec[unclear].double(), ac[unclear].double()
        if bool((torch.isnan(e64) | torch.isnan(a64)).any()) or bool(torch.isinf(e64).any() | torch.isinf(a64).any()):
            return False
        if bool(((e64 - a64).abs() > t + r * e64.abs()).any()):
            return False
    return True


def _compare_exactly(index: int, e: torch.Tensor, a: torch.Tensor, r: float, t: float) -> OutputMismatch | None:
    """Every element in float64 (complex128): NaNs, infinities, the largest errors."""
    wide = torch.complex128 if e.is_complex() else torch.float64
    e_nans = a_nans = off = 0
    nan_apart = outside = inf_apart = False
    max_abs = max_rel = 0.0
    for _, ec, ac in _chunks(e, a):
        if torch.equal(ec, ac):  # bit for bit (a cache both runs wrote the same slots of); NaN never is
            continue
        e64, a64 = ec.to(wide), ac.to(wide)
        e_nan, a_nan = torch.isnan(e64), torch.isnan(a64)
        e_nans, a_nans = e_nans + int(e_nan.sum()), a_nans + int(a_nan.sum())
        apart = e_nan != a_nan
        if bool(apart.any()):
            nan_apart = True
            off += int(apart.sum())
        ok = ~(e_nan | a_nan)
        e64, a64 = e64[ok], a64[ok]
        diff = (e64 - a64).abs()
        diff = torch.where(e64 == a64, torch.zeros_like(diff), diff)  # equal infinities
        infinite = torch.isnan(diff)  # inf vs finite or -inf
        if bool(infinite.any()):
            inf_apart = True
            off += int(infinite.sum())
            e64, a64, diff = e64[~infinite], a64[~infinite], diff[~infinite]
        if diff.numel():
            outside_here = diff > t + r * e64.abs()
            if bool(outside_here.any()):
                outside = True
                off += int(outside_here.sum())
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / e64.abs().clamp_min(1e-12)).max()))
        del e64, a64, diff
    n = e.numel()
    if nan_apart:
        return OutputMismatch(index, "nan", detail=f"expected {e_nans} NaN, got {a_nans}", off=off, elements=n)
    if inf_apart:
        return OutputMismatch(index, "value", float("inf"), float("inf"), r, t, detail="infinities differ", off=off, elements=n)
    if outside:
        return OutputMismatch(index, "value", max_abs, max_rel, r, t, off=off, elements=n)
    return None


# Elements compared at a time: comparing a 4 GiB bf16 cache whole would make several 17 GiB
# float64 copies of it; a chunk's float64 temporaries are 32 MiB each.
CHUNK_ELEMENTS = 1 << 22


def _same_view(e: torch.Tensor, a: torch.Tensor) -> bool:
    return (e.device == a.device and e.dtype == a.dtype and e.data_ptr() == a.data_ptr() and e.shape == a.shape
            and e.stride() == a.stride())


def _chunks(e: torch.Tensor, a: torch.Tensor):
    """(flat offset, flat chunk of e, same chunk of a), in row-major order, a few rows at a time."""
    if e.dim() == 0:
        yield 0, e.reshape(1), a.reshape(1)
        return
    inner = max(1, e[0].numel()) if e.shape[0] else 1
    rows = max(1, CHUNK_ELEMENTS // inner)
    for start in range(0, e.shape[0], rows):
        yield start * inner, e[start:start + rows].reshape(-1), a[start:start + rows].reshape(-1)


def _unravel(flat: torch.Tensor, shape: torch.Size) -> list[list[int]]:
    if len(shape) == 0:
        return [[] for _ in flat.tolist()]
    return torch.stack(torch.unravel_index(flat, shape), dim=-1).tolist()


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    worst = 0.0
    b = b.detach().to(a.device)
    for _, ac, bc in _chunks(a.detach(), b):
        a64, b64 = ac.to(torch.float64), bc.to(torch.float64)
        finite = torch.isfinite(a64) & torch.isfinite(b64)
        if bool(finite.any()):
            worst = max(worst, float((a64[finite] - b64[finite]).abs().max()))
    return worst


def judge_outputs(expected: Any, actual: Any, *, ref64: Any = None, tol: Tolerance = BY_DTYPE,
                  multiplier: float = 2.0) -> list[OutputMismatch]:
    """``compare_outputs``, forgiving low-precision noise when a float64 reference says so.

    An output outside the dtype tolerance of eager is still accepted when its distance to the
    float64 result is at most ``multiplier`` times eager's own distance to it: the backend is
    then no less accurate than eager, only differently rounded. This is the test PyTorch's
    accuracy minifier applies too.
    """
    bad = compare_outputs(expected, actual, tol=tol)
    if not bad or ref64 is None:
        return bad
    exp_leaves = pytree.tree_leaves(expected)
    r64_leaves = pytree.tree_leaves(ref64)
    if len(r64_leaves) != len(exp_leaves):
        return bad
    return mismatches_beyond_float64(bad, expected, actual, dict(enumerate(r64_leaves)), tol=tol, multiplier=multiplier)


def needs_float64(bad: list[OutputMismatch], expected: Any) -> list[int]:
    """The outputs among ``bad`` that a float64 reference could forgive (floating values)."""
    leaves = pytree.tree_leaves(expected)
    return [m.index for m in bad if m.reason == "value" and isinstance(leaves[m.index], torch.Tensor)
            and leaves[m.index].is_floating_point()]


def mismatches_beyond_float64(bad: list[OutputMismatch], expected: Any, actual: Any, ref64: dict[int, Any], *,
                              tol: Tolerance = BY_DTYPE, multiplier: float = 2.0) -> list[OutputMismatch]:
    """The mismatches of ``bad`` that the float64 values ``ref64`` (by output index) don't forgive."""
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    kept = []
    for m in bad:
        e, a, r = exp_leaves[m.index], act_leaves[m.index], ref64.get(m.index)
        if (m.reason == "value" and isinstance(r, torch.Tensor) and isinstance(e, torch.Tensor)
                and e.is_floating_point() and r.shape == e.shape):
            _, t = tol.for_value(e)
            if _max_abs_diff(a, r) <= multiplier * _max_abs_diff(e, r) + t:
                continue
        kept.append(m)
    return kept
