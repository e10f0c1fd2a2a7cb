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

from graphdbg.judge import dtypes

# (rtol, atol) by dtype: ten times torch.testing's defaults, because a compiler's reordering
# and fusion alone move results by several ulps; a real bug is usually far beyond that. The
# atol is for values of magnitude 1 and is scaled down for smaller ones (``Tolerance.for_value``).
# Every other numeric dtype torch has (the float8 formats, complex32, any added later) gets
# ``judge.dtypes.default_tolerance``: two steps of its resolution.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-5, 1e-4),
    torch.float16: (5e-3, 5e-4),
    torch.bfloat16: (3.2e-2, 1e-3),
    torch.complex32: (5e-3, 5e-4),
    torch.complex64: (1.3e-5, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}
for _dtype in dtypes.all_dtypes():
    if dtypes.numeric(_dtype) and _dtype not in TOLERANCES:
        TOLERANCES[_dtype] = dtypes.default_tolerance(_dtype)


@dataclass
class OutputMismatch:
    index: int
    reason: str  # "value", "shape", "dtype", "nan", "type"
    max_abs_error: float | None = None
    max_rel_error: float | None = None  # relative to max(|expected|, the output's RMS): no 3e7 on values near 0
    rtol: float | None = None
    atol: float | None = None
    detail: str = ""
    differing: int | None = None  # integer, bool and bit-compared outputs: how many elements differ, and where
    at: list[list[int]] | None = None
    # how much of the output is off: elements outside tolerance (NaN where eager has none, and the
    # reverse, included) of ``elements``; what ``same_difference`` compares a replay's with
    off: int | None = None
    elements: int | None = None
    # the measure that found it: "elements" (each within rtol/atol), "mean ulps" (the mean
    # error in units in the last place, see ``MEAN_ULPS``), "exact", "bit for bit"
    measure: str | None = None
    mean_ulps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.reason == "value" and self.differing is not None:
            where = ", ".join(str(tuple(i)) if len(i) != 1 else str(i[0]) for i in self.at or [])
            more = ", ..." if (self.at and self.differing > len(self.at)) else ""
            how = "compared bit for bit" if self.measure == BIT_FOR_BIT else "must be exact"
            return f"output {self.index}: {self.detail} ({how}; at {where}{more})"
        if self.reason == "value" and self.measure == MEAN:
            return f"output {self.index}: {self.detail}"
        if self.reason == "value" and (self.max_abs_error is None or self.max_rel_error is None):
            return f"output {self.index}: value differs ({self.detail})" if self.max_abs_error is None else (
                f"output {self.index}: max abs error {self.max_abs_error:.3g} ({self.detail})")
        if self.reason == "value":
            return (f"output {self.index}: max abs error {self.max_abs_error:.3g}, max rel error "
                    f"{self.max_rel_error:.3g} (rtol {self.rtol:g}, atol {self.atol:g})")
        return f"output {self.index}: {self.reason} differs ({self.detail})"


_SHOWN = 8  # indices of differing integer elements kept in a mismatch
ELEMENTS, MEAN, EXACT, BIT_FOR_BIT = "elements", "mean ulps", "exact", "bit for bit"


@dataclass(frozen=True)
class Tolerance:
    """The tolerances a user asked for; None leaves the dtype's own (``TOLERANCES``)."""

    rtol: float | None = None
    atol: float | None = None

    def of(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a value of ``dtype``."""
        r, a = TOLERANCES.get(dtype) or dtypes.default_tolerance(dtype)
        return (r if self.rtol is None else self.rtol, a if self.atol is None else self.atol)

    @property
    def by_dtype(self) -> bool:
        """No tolerance given: the dtype's own, and its resolution's bounds (``MEAN_ULPS``)."""
        return self.rtol is None and self.atol is None

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

# Units in the last place (ulps) of the output's dtype, each element's measured at
# max(|reference|, the output's RMS): an element near 0 that two additions of values of the
# output's size left behind is off by their rounding, which is an ulp of the output's size, not
# of its own (a relative error of 3e7). Rounding moves an element by about half an ulp per
# operation, up or down; a wrong kernel moves most elements the same few ulps. So an output whose
# mean error is above ``mean_ulps_gate`` (a quarter of the dtype's bound in ulps below, and
# ``MEAN_ULPS`` at least: 1.28 ulps for float16, 1.02 for bfloat16, 27 for float32, whose rtol
# is wide for reorderings of long reductions) is a mismatch until a float64 reference says the backend is
# no farther from the true values than eager (by ``MEAN_SLACK`` ulps at most beyond the usual
# factor). Where no float64 reference can be made, eager judges within the dtype's own bound in
# ulps (its rtol over its eps: 5 for float16, 4 for bfloat16, 109 for float32) at each element
# and ``FALLBACK_MEAN_ULPS`` on the mean. float64 outputs have no better reference than eager:
# their rtol judges them alone.
MEAN_ULPS = 1.0
MEAN_SLACK = 0.5
FALLBACK_MEAN_ULPS = 2.0


def _magnitude(e: torch.Tensor) -> float:
    """The largest finite ``|e|``, up to 1 (where the dtype's atol applies as it is)."""
    worst = 0.0
    for _, chunk, _ in _chunks(e.detach(), e.detach()):
        mags = _numbers(chunk).abs().to(torch.float64)
        worst = max(worst, float(torch.where(torch.isfinite(mags), mags, torch.zeros_like(mags)).amax()))
        if worst >= 1.0:
            break
    return worst


def rms(e: torch.Tensor) -> float:
    """The root mean square of ``e``'s finite values (0 if none): an output's size."""
    total, count = 0.0, 0
    for _, chunk, _ in _chunks(e.detach(), e.detach()):
        mags = _numbers(chunk).abs().to(torch.float64)
        finite = torch.isfinite(mags)
        total += float((torch.where(finite, mags, torch.zeros_like(mags)) ** 2).sum())
        count += int(finite.sum())
    return (total / count) ** 0.5 if count else 0.0


def _numbers(t: torch.Tensor) -> torch.Tensor:
    """A numeric tensor's values in a dtype every op has (float8 has no abs, isfinite or sub)."""
    return t if t.dtype in (torch.float64, torch.float32, torch.complex128) else t.to(dtypes.work_dtype(t.dtype))


def ulp_errors(expected: torch.Tensor, actual: torch.Tensor, dtype: torch.dtype | None = None,
               floor: float | None = None) -> tuple[float, float, int]:
    """(max, mean, count) of ``|actual - expected|`` in ulps of ``dtype`` (``actual``'s by
    default), each measured at max(|expected|, ``floor``) (the expected output's RMS by
    default), over the elements finite in both and not 0 in both (a ReLU's or a mask's zeros
    are exact in any order of rounding: counted, they would hide an error on every other
    element). The measure of ``MEAN_ULPS``; ``expected`` may be a float64 reference of a
    lower-precision ``actual``.

        >>> ulp_errors(torch.ones(4, dtype=torch.float16), torch.full((4,), 1.002, dtype=torch.float16))
        (2.0, 2.0, 4)
    """
    dtype = dtype or actual.dtype
    floor = rms(expected) if floor is None else floor
    worst, total, count = 0.0, 0.0, 0
    actual = actual.detach().to(expected.device)
    for _, ec, ac in _chunks(expected.detach(), actual):
        e64, a64 = _numbers(ec).to(torch.float64), _numbers(ac).to(torch.float64)
        ok = torch.isfinite(e64) & torch.isfinite(a64) & ((e64 != 0) | (a64 != 0))
        if not bool(ok.any()):
            continue
        e64, a64 = e64[ok], a64[ok]
        units = (a64 - e64).abs() / dtypes.ulp(e64.abs().clamp_min(floor), dtype)
        worst, total, count = max(worst, float(units.max())), total + float(units.sum()), count + int(units.numel())
    return worst, (total / count if count else 0.0), count


def ulp(values: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The unit in the last place of ``dtype`` at each ``|value|`` (``judge.dtypes.ulp``)."""
    return dtypes.ulp(values, dtype)


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
    """How ``a`` differs from ``e``, or None. Each dtype as ``judge.dtypes.kind`` says: floats
    upcast and judged by ``tol`` (and, by default, their mean error in ulps), complex by
    ``tol``, integers and bools exactly, the rest bit for bit."""
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
    kind = dtypes.kind(e.dtype)
    if kind in (dtypes.EXACT, dtypes.BITS):  # exact, and say which elements
        return _compare_equal(index, e, a, bits=kind == dtypes.BITS)
    r, t = tol.for_value(e)
    if kind == dtypes.FLOAT and _surely_close(e, a, r, t) and not _mean_gate(e, a, tol):
        return None
    return _compare_exactly(index, e, a, r, t, tol)


def _compare_equal(index: int, e: torch.Tensor, a: torch.Tensor, bits: bool) -> OutputMismatch | None:
    """Integers and bools element by element; dtypes with no arithmetic by their bits."""
    count, at, worst = 0, [], 0.0
    # dtypes with no arithmetic are chunked as their bits (a sub-byte shell can't even be copied)
    for offset, ec, ac in _chunks(dtypes.as_bits(e), dtypes.as_bits(a)) if bits else _chunks(e, a):
        eb, ab = dtypes.as_bits(ec), dtypes.as_bits(ac)
        if torch.equal(eb, ab):
            continue
        diff = eb != ab
        n = int(diff.sum())
        count += n
        if not bits:  # the size of the largest difference, from the values (uint64's above 2**63 too)
            worst = max(worst, _largest_difference(ec[diff], ac[diff]))
        if len(at) < _SHOWN:
            flat = diff.nonzero().flatten()[:_SHOWN - len(at)] + offset
            at += _unravel(flat, e.shape)
    if not count:
        return None
    if bits:
        return OutputMismatch(index, "value", None, None, 0, 0, detail=f"{count} of {e.numel()} elements differ",
                              differing=count, at=at, off=count, elements=e.numel(), measure=BIT_FOR_BIT)
    return OutputMismatch(index, "value", worst, None, 0, 0, detail=f"{count} of {e.numel()} elements differ",
                          differing=count, at=at, off=count, elements=e.numel(), measure=EXACT)


def _largest_difference(e: torch.Tensor, a: torch.Tensor) -> float:
    """max |e - a| of integers: exact for 64-bit ones (float64 can't tell 2**63 + 10 from + 12),
    as Python integers, for the first ``_SHOWN_EXACT`` of them; float64 for the rest."""
    if e.element_size() == 8 and e.numel() <= _SHOWN_EXACT:
        return float(max(abs(x - y) for x, y in zip(e.tolist(), a.tolist())))
    return float((e.to(torch.float64) - a.to(torch.float64)).abs().max())


_SHOWN_EXACT = 1 << 16


def _mean_gate(e: torch.Tensor, a: torch.Tensor, tol: Tolerance) -> bool:
    """True when the output's mean error (in ulps, ``MEAN_ULPS``) is above the gate: judged
    for floats below float64 under the dtype's own tolerance."""
    if not tol.by_dtype or e.dtype == torch.float64 or dtypes.kind(e.dtype) != dtypes.FLOAT:
        return False
    if all(torch.equal(dtypes.as_bits(ec), dtypes.as_bits(ac)) for _, ec, ac in _chunks(e, a)):
        return False  # the same bits (the same kernel): no float pass needed
    return ulp_errors(e, a)[1] > mean_ulps_gate(e.dtype)


def mean_ulps_gate(dtype: torch.dtype) -> float:
    """The mean error in ulps of ``dtype`` above which an output is judged further (see ``MEAN_ULPS``)."""
    return max(MEAN_ULPS, ulp_bound(dtype) / 4)


# The first pass judges in the output's dtype (float32 for narrower floats) with tolerances
# this much tighter, so that its rounding can't pass an element float64 would fail; elements
# it can't pass are judged in float64, and only those. Outputs that agree take one pass.
_MARGIN = 0.9


def _surely_close(e: torch.Tensor, a: torch.Tensor, r: float, t: float) -> bool:
    """True when every element is within tolerance: judged in the output's dtype, and in
    float64 only for the elements that judgement doesn't clear. False says: judge exactly."""
    for _, ec, ac in _chunks(e, a):
        if torch.equal(dtypes.as_bits(ec), dtypes.as_bits(ac)):  # bit for bit (a cache both runs wrote the same slots of)
            continue
        ew, aw = _numbers(ec), _numbers(ac)
        unclear = ~torch.isclose(aw, ew, rtol=r * _MARGIN, atol=t * _MARGIN, equal_nan=True)
        if not bool(unclear.any()):
            continue
        e64, a64 = ew[unclear].double(), aw[unclear].double()
        if bool((torch.isnan(e64) | torch.isnan(a64)).any()) or bool(torch.isinf(e64).any() | torch.isinf(a64).any()):
            return False
        if bool(((e64 - a64).abs() > t + r * e64.abs()).any()):
            return False
    return True


def _compare_exactly(index: int, e: torch.Tensor, a: torch.Tensor, r: float, t: float,
                     tol: Tolerance = BY_DTYPE) -> OutputMismatch | None:
    """Every element in float64 (complex128): NaNs (their positions first), infinities, the
    largest errors; then, for floats under the dtype's own tolerance, the mean error in ulps."""
    wide = torch.complex128 if e.is_complex() else torch.float64
    e_nans = a_nans = off = 0
    nan_apart = outside = inf_apart = False
    max_abs = max_rel = 0.0
    floor = max(rms(e), 1e-30)  # relative errors relative to the output's size at least
    for _, ec, ac in _chunks(e, a):
        if torch.equal(dtypes.as_bits(ec), dtypes.as_bits(ac)):  # bit for bit; NaN too
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
            max_rel = max(max_rel, float((diff / e64.abs().clamp_min(floor)).max()))
        del e64, a64, diff
    n = e.numel()
    if nan_apart:
        return OutputMismatch(index, "nan", detail=f"expected {e_nans} NaN, got {a_nans}", off=off, elements=n)
    if inf_apart:
        return OutputMismatch(index, "value", float("inf"), float("inf"), r, t, detail="infinities differ", off=off, elements=n)
    if outside:
        return OutputMismatch(index, "value", max_abs, max_rel, r, t, off=off, elements=n, measure=ELEMENTS)
    if _mean_gate(e, a, tol):
        _, mean, count = ulp_errors(e, a)
        return OutputMismatch(index, "value", max_abs, max_rel, r, t, off=count, elements=n, measure=MEAN,
                              mean_ulps=mean, detail=f"mean error {mean:.2f} ulps of {str(e.dtype).removeprefix('torch.')} "
                                                     f"over {count} values (bound {mean_ulps_gate(e.dtype):.3g}), max abs error {max_abs:.3g}")
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
    accuracy minifier applies too. With no float64 reference (``ref64`` None), eager judges
    within the dtype's bound in ulps (``mismatches_beyond_ulps``).
    """
    bad = compare_outputs(expected, actual, tol=tol)
    if not bad:
        return bad
    exp_leaves = pytree.tree_leaves(expected)
    r64_leaves = pytree.tree_leaves(ref64) if ref64 is not None else []
    if len(r64_leaves) != len(exp_leaves):
        return mismatches_beyond_ulps(bad, expected, actual, tol=tol)
    return mismatches_beyond_float64(bad, expected, actual, dict(enumerate(r64_leaves)), tol=tol, multiplier=multiplier)


def needs_float64(bad: list[OutputMismatch], expected: Any) -> list[int]:
    """The outputs among ``bad`` that a float64 reference could forgive (floating values)."""
    leaves = pytree.tree_leaves(expected)
    return [m.index for m in bad if m.reason == "value" and _judged_by_size(leaves[m.index])]


def _judged_by_size(v: Any) -> bool:
    return isinstance(v, torch.Tensor) and dtypes.kind(v.dtype) == dtypes.FLOAT


def mismatches_beyond_float64(bad: list[OutputMismatch], expected: Any, actual: Any, ref64: dict[int, Any], *,
                              tol: Tolerance = BY_DTYPE, multiplier: float = 2.0) -> list[OutputMismatch]:
    """The mismatches of ``bad`` that the float64 values ``ref64`` (by output index) don't
    forgive: the backend's largest error and (below float64, by default) its mean error in ulps
    are each at most ``multiplier`` times eager's, plus the tolerance (``MEAN_SLACK``)."""
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    kept = []
    for m in bad:
        e, a, r = exp_leaves[m.index], act_leaves[m.index], ref64.get(m.index)
        if (m.reason == "value" and isinstance(r, torch.Tensor) and _judged_by_size(e) and r.shape == e.shape
                and _no_farther(e, a, r, tol, multiplier)):
            continue
        kept.append(m)
    return kept


def _no_farther(e: torch.Tensor, a: torch.Tensor, r: torch.Tensor, tol: Tolerance, multiplier: float) -> bool:
    """Whether ``a`` is no farther from the float64 values ``r`` than ``e`` is (see above)."""
    _, t = tol.for_value(e)
    if _max_abs_diff(a, r) > multiplier * _max_abs_diff(e, r) + t:
        return False
    if not tol.by_dtype or e.dtype == torch.float64:
        return True
    floor = rms(r)
    return ulp_errors(r, a, e.dtype, floor)[1] <= multiplier * ulp_errors(r, e, e.dtype, floor)[1] + MEAN_SLACK


def mismatches_beyond_ulps(bad: list[OutputMismatch], expected: Any, actual: Any, *,
                           tol: Tolerance = BY_DTYPE) -> list[OutputMismatch]:
    """The mismatches of ``bad`` that eager, where no float64 reference could be made, still
    holds: under the dtype's own tolerance a float output passes when each element is within the
    dtype's bound in ulps (``dtypes.ulps_of`` its rtol) and their mean within
    ``FALLBACK_MEAN_ULPS``, each at max(|eager|, the output's RMS). A tolerance the user gave
    judges as it is."""
    if not tol.by_dtype:
        return bad
    exp_leaves = pytree.tree_leaves(expected)
    act_leaves = pytree.tree_leaves(actual)
    kept = []
    for m in bad:
        e, a = exp_leaves[m.index], act_leaves[m.index]
        if m.reason == "value" and _judged_by_size(e) and e.dtype != torch.float64 and isinstance(a, torch.Tensor):
            worst, mean, _ = ulp_errors(e, a)
            if worst <= ulp_bound(e.dtype) and mean <= FALLBACK_MEAN_ULPS:
                continue
        kept.append(m)
    return kept


def ulp_bound(dtype: torch.dtype) -> float:
    """The largest error in ulps of ``dtype`` an element may have when eager alone judges: the
    dtype's rtol in ulps (at least 1)."""
    return max(1.0, dtypes.ulps_of(dtype, BY_DTYPE.of(dtype)[0]))


def compared_note(expected: Any) -> str:
    """How many values of how many outputs a verdict compared, and how (by value, exactly, bit
    for bit), naming the outputs compared bit for bit.

        >>> compared_note((torch.ones(4), torch.zeros(2, dtype=torch.bits8)))
        '6 values of 2 outputs (4 by value, 2 bit for bit: output 1 bits8)'
    """
    leaves = [v for v in pytree.tree_leaves(expected) if isinstance(v, torch.Tensor)]
    by: dict[str, int] = {}
    named: list[str] = []
    for i, v in enumerate(pytree.tree_leaves(expected)):
        if not isinstance(v, torch.Tensor):
            continue
        how = {dtypes.FLOAT: "by value", dtypes.COMPLEX: "by value", dtypes.EXACT: "exactly"}.get(dtypes.kind(v.dtype), BIT_FOR_BIT)
        by[how] = by.get(how, 0) + v.numel()
        if how == BIT_FOR_BIT:
            named.append(f"output {i} {str(v.dtype).removeprefix('torch.')}")
    parts = ", ".join(f"{n} {how}" for how, n in by.items())
    where = f": {', '.join(named[:4])}" if named else ""
    total = sum(v.numel() for v in leaves)
    return f"{total} values of {len(leaves)} outputs ({parts}{where})"
