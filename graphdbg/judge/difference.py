"""Is a replay's accuracy failure the one captured? The same outputs off, each the same way,
by errors of the same size. Torch-free: an Outcome judges a dump with it in the CLI's process.

    >>> same_difference([{"index": 0, "reason": "value", "max_abs_error": 0.0025, "off": 40, "elements": 512}],
    ...                 [{"index": 0, "reason": "value", "max_abs_error": 0.241, "off": 512, "elements": 512}])
    'output 0 off by 0.241, captured 0.0025'
"""

from __future__ import annotations

from typing import Any

# Two differences are of the same kind when the same outputs are off, each off the same way
# (value, NaN, infinities, dtype, shape) and, by value, by an error within this factor of the
# other: the same bug on the same inputs gives the same error to rounding, and a replay's
# float64 reference or synthesized inputs move it by a few times at most, while another bug
# (a scale of 1.01 where the captured one added 0.5) is off by orders of magnitude more or less.
SAME_SIZE_FACTOR = 10.0


def difference_class(m: dict[str, Any]) -> str:
    """How an output is off: ``value``, ``inf`` (infinities where the other has none), ``nan``,
    ``dtype``, ``shape``, ``type`` or ``structure``."""
    if m.get("reason") == "value" and m.get("max_abs_error") == float("inf"):
        return "inf"
    return str(m.get("reason"))


def recorded_difference(mismatches: list[dict[str, Any]] | None) -> bool:
    """Whether mismatches carry the size of their difference (dumps written before did not)."""
    return bool(mismatches) and all("off" in m for m in mismatches)


def describe_difference(m: dict[str, Any]) -> str:
    """``output 0 off by 0.241 (12% of elements)``, ``output 1: nan differs (expected 0 NaN, got 3)``."""
    where = f"{m.get('what', 'output')} {m.get('index')}"
    kind = difference_class(m)
    share = f"{_share(m)} of elements" if m.get("off") and m.get("elements") else ""
    if kind == "value" and m.get("max_abs_error") is not None:
        return f"{where} off by {m['max_abs_error']:.3g}" + (f" ({share})" if share else "")
    detail = "; ".join(x for x in (m.get("detail"), share) if x)
    return f"{where}: {kind} differs" + (f" ({detail})" if detail else "")


def _share(m: dict[str, Any]) -> str:
    frac = m["off"] / m["elements"]
    return f"{frac:.0%}" if frac >= 0.01 else f"{m['off']}"


def same_difference(captured: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> str | None:
    """None when ``replayed`` is the same kind of difference as ``captured``, else what differs:
    ``output 0 off by 0.241, captured 0.0025``. Mismatches as ``OutputMismatch.to_dict`` writes them."""
    key = lambda m: (m.get("what", "output"), m.get("index"))  # noqa: E731 - one key, used thrice
    was = {key(m): m for m in captured}
    now = {key(m): m for m in replayed}
    if set(was) != set(now):
        off = ", ".join(describe_difference(m) for m in replayed) or "no output off"
        return f"{off}; captured {', '.join(describe_difference(m) for m in captured)}"
    for k, m in now.items():
        c = was[k]
        if difference_class(m) != difference_class(c):
            return f"{describe_difference(m)}, captured {describe_difference(c)}"
        a, b = m.get("max_abs_error"), c.get("max_abs_error")
        if difference_class(m) == "value" and a is not None and b is not None and not _same_size(a, b):
            return f"{m.get('what', 'output')} {m.get('index')} off by {a:.3g}, captured {b:.3g}"
    return None


def _same_size(a: float, b: float) -> bool:
    lo, hi = sorted((abs(a), abs(b)))
    return hi <= SAME_SIZE_FACTOR * lo if lo > 0 else hi == 0
