"""How each dtype is compared: the one classification every judge of values uses.

    >>> kind(torch.float8_e4m3fn), kind(torch.int32), kind(torch.bits8), kind(torch.complex32)
    ('float', 'exact', 'bits', 'complex')
    >>> ulp(torch.tensor([1.0, 4.0]), torch.float16).tolist()
    [0.0009765625, 0.00390625]

Four kinds, found by asking torch (a dtype torch adds later classifies itself):

* ``float``: floating values torch converts to float32 (float64, float32, the 16-bit and the
  float8 formats): judged numerically, upcast before any arithmetic (float8 has no ``abs`` or
  ``sub`` kernels), NaN positions compared first.
* ``complex``: upcast to complex128 (complex32 has few kernels).
* ``exact``: bool and the integers torch computes with (int8..int64, uint8..uint64): every
  element must be equal; which ones differ is said.
* ``bits``: whatever torch can't convert to a number (bits8/16, bits1x8, bits2x4, bits4x2, the
  packed float4, the sub-byte int1..int7/uint1..uint7 shells, quantized integers): compared
  bit for bit, as the bytes they are.
"""

from __future__ import annotations

import functools
import warnings

import torch

FLOAT, COMPLEX, EXACT, BITS = "float", "complex", "exact", "bits"

# the integer of each width a bit view is made of: every device has their comparison kernels
_SAME_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def all_dtypes() -> list[torch.dtype]:
    """Every dtype torch defines (each ``torch.<name>`` that is a ``torch.dtype``), once, by name."""
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return sorted(found, key=str)


@functools.cache
def kind(dtype: torch.dtype) -> str:
    """``float``, ``complex``, ``exact`` or ``bits`` (see the module docstring)."""
    if dtype.is_complex:
        return COMPLEX if _converts(dtype, torch.complex128) else BITS
    if dtype.is_floating_point:
        return FLOAT if _converts(dtype, torch.float32) and _has_finfo(dtype) else BITS
    if dtype == torch.bool:
        return EXACT
    if _quantized(dtype):
        return BITS
    return EXACT if _converts(dtype, torch.float64) and _compares(dtype) else BITS


def numeric(dtype: torch.dtype) -> bool:
    """Whether values of ``dtype`` are judged by their size (``float`` and ``complex``)."""
    return kind(dtype) in (FLOAT, COMPLEX)


def bit_for_bit(dtype: torch.dtype) -> bool:
    """Whether values of ``dtype`` are compared as bytes (no numeric comparison exists)."""
    return kind(dtype) == BITS


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a ``float``/``complex`` value is computed with when judged: float64 and
    complex128 stay, complex narrower becomes complex128, every narrower float float32."""
    if kind(dtype) == COMPLEX:
        return torch.complex128
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as signed integers of its element width, same shape and strides (a view; a
    quantized tensor's integer representation). Equal bits, equal values, NaN included."""
    if _quantized(t.dtype):
        return t.int_repr()
    if t.dtype == torch.bool:
        return t.view(torch.int8)
    if t.element_size() not in _SAME_WIDTH:  # complex128: its two float64 halves
        return torch.view_as_real(t).view(torch.int64)
    return t.view(_SAME_WIDTH[t.element_size()])


def ulp(values: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The spacing of ``dtype`` (``values``' own by default) at each ``|value|``, in float64:
    the unit in the last place there. Below the smallest normal the subnormal spacing (``eps *
    tiny``); NaN where a value is NaN or infinite.

        >>> ulp(torch.tensor([1.0, 3.0, 0.0]), torch.bfloat16).tolist()
        [0.0078125, 0.015625, 9.183549615799121e-41]
    """
    dtype = dtype or values.dtype
    info = torch.finfo(dtype)
    mags = values.detach().to(work_dtype(values.dtype)).abs().to(torch.float64)
    _, exponent = torch.frexp(mags.clamp_min(info.smallest_normal))  # |v| = m * 2**e, m in [0.5, 1)
    spacing = torch.ldexp(torch.full_like(mags, info.eps), exponent - 1)
    return torch.where(torch.isfinite(mags), spacing, torch.full_like(mags, float("nan")))


def ulps_of(dtype: torch.dtype, rtol: float) -> float:
    """A relative tolerance in units in the last place of ``dtype`` (at magnitude 1)."""
    return rtol / torch.finfo(dtype).eps


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for a numeric dtype no table lists: two steps of its resolution relative,
    one absolute (for values of magnitude 1); no absolute part for a format with no zero
    (float8_e8m0fnu: scales, powers of two)."""
    if kind(dtype) not in (FLOAT, COMPLEX):
        return 0.0, 0.0
    info = torch.finfo(dtype)
    rtol = min(2 * info.eps, 1.0)
    return rtol, (0.0 if info.min > 0 else min(info.eps, 0.1))


def _converts(dtype: torch.dtype, to: torch.dtype) -> bool:
    try:
        with warnings.catch_warnings():  # complex32's "experimental", complex to real
            warnings.simplefilter("ignore")
            torch.zeros(2, dtype=dtype).to(to)
        return True
    except Exception:
        return False


def _compares(dtype: torch.dtype) -> bool:
    try:
        torch.zeros(2, dtype=dtype).ne(torch.zeros(2, dtype=dtype))
        return True
    except Exception:
        return False


def _has_finfo(dtype: torch.dtype) -> bool:
    try:
        torch.finfo(dtype)
        return True
    except Exception:
        return False


def _quantized(dtype: torch.dtype) -> bool:
    return dtype in {getattr(torch, n) for n in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4") if hasattr(torch, n)}
