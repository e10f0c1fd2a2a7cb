"""Describe any value a graph receives as JSON: tensors by spec, everything else by what it is.

    >>> describe_value(torch.device("cuda", 5))
    {'kind': 'device', 'value': 'cuda:5'}
    >>> describe_value(3)
    {'kind': 'int', 'value': 3}

Nothing here keeps a reference to the value; a descriptor is enough for replay to rebuild a
stand-in (a stream on the local device, a world-of-one process group) and say so.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

import torch

from graphdbg.store.specs import TensorSpec, dtype_name

_STATS_CHUNK = 1 << 24  # elements per chunk, so stats of a multi-GB tensor need no fp64 copy of it
# torch.cuda.Event derives from a C base, not from the generic torch.Event.
_EVENT_TYPES = tuple(t for t in (getattr(torch, "Event", None), getattr(torch._C, "_CudaEventBase", None)) if t)


def type_name(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}.{t.__qualname__}"


def describe_value(value: Any, *, symbolic: Any = None, depth: int = 0) -> dict[str, Any]:
    """A JSON-able descriptor; ``symbolic`` is the placeholder's example value (SymInt) if any."""
    if isinstance(value, torch.Tensor):
        d: dict[str, Any] = {"kind": "tensor", **TensorSpec.of(value).to_dict()}
        if isinstance(value, torch.nn.Parameter):
            d["parameter"] = True
        if value.requires_grad and not value.is_leaf:  # an activation: autograd history, not a leaf
            d["leaf"] = False
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            d["subclass"] = type_name(value)
        return d
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        kind = {torch.SymInt: "symint", torch.SymFloat: "symfloat", torch.SymBool: "symbool"}[type(value)]
        node = value.node
        hint = getattr(node, "hint", None)
        return {"kind": kind, "expr": str(node.expr), "hint": _plain(hint)}
    if isinstance(value, bool):
        return {"kind": "bool", "value": value}
    if isinstance(value, int):
        if isinstance(symbolic, torch.SymInt):
            return {"kind": "symint", "expr": str(symbolic.node.expr), "hint": value}
        return {"kind": "int", "value": value}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"kind": "float", "value": value}
        return {"kind": "float", "value": repr(value)}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, str):
        return {"kind": "str", "value": value}
    if isinstance(value, torch.device):
        return {"kind": "device", "value": str(value)}
    if isinstance(value, torch.dtype):
        return {"kind": "dtype", "value": dtype_name(value)}
    if isinstance(value, torch.Stream):
        return _describe_stream(value)
    stands_in_for = getattr(value, "stands_in_for", None)  # a replay's no-op stream or event (rebuild.inputs)
    if isinstance(stands_in_for, dict) and stands_in_for.get("kind") in ("stream", "event"):
        return dict(stands_in_for)  # saved again (a minify candidate), it is the captured one's
    if isinstance(value, _EVENT_TYPES):
        return _describe_event(value)
    if _is_process_group(value):
        return _describe_process_group(value)
    if isinstance(value, (list, tuple)) and depth < 3:
        return {"kind": type(value).__name__, "items": [describe_value(v, depth=depth + 1) for v in value]}
    return {"kind": "opaque", "type": type_name(value), "repr": _safe_repr(value)}


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float)):
        return v
    try:
        return int(v)
    except Exception:
        return str(v)


def _safe_repr(value: Any, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception as e:
        text = f"<repr failed: {type(e).__name__}>"
    return text[:limit]


def _describe_stream(s: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": "stream", "type": type_name(s)}
    for attr in ("device_index", "device_type", "stream_id", "priority"):
        try:
            v = getattr(s, attr)
            d[attr] = int(v) if not isinstance(v, str) else v
        except Exception:
            pass
    try:
        d["device"] = str(s.device)
    except Exception:
        pass
    return d


def _describe_event(e: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": "event", "type": type_name(e)}
    for attr in ("enable_timing", "blocking", "interprocess"):
        v = getattr(e, attr, None)
        if isinstance(v, bool):
            d[attr] = v
    try:
        dev = getattr(e, "device", None)
        if dev is not None:
            d["device"] = str(dev)
    except Exception:
        pass
    return d


def _is_process_group(value: Any) -> bool:
    try:
        import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

        return dist.is_available() and isinstance(value, dist.ProcessGroup)
    except Exception:
        return False


def _describe_process_group(pg: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": "process_group", "type": type_name(pg)}
    for key, get in (
        ("name", lambda: pg.group_name),
        ("rank", pg.rank),
        ("size", pg.size),
        ("backend", lambda: str(pg.name())),
    ):
        try:
            d[key] = get()
        except Exception:
            pass
    try:
        import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

        d["ranks"] = dist.get_process_group_ranks(pg)
    except Exception:
        pass
    return d


def tensor_stats(t: torch.Tensor, sample: int | None = None) -> dict[str, Any]:
    """min, max, mean, std and NaN/Inf counts, computed in chunks of fp64.

    With ``sample``, a tensor of more elements is described from about that many of them,
    evenly spaced along every dimension, and ``sampled`` says how many (the counts are the
    sample's): what a crash dump armed before a first call pays for a 1 GiB weight is
    milliseconds, not the seconds of ten float64 passes over it.
    """
    if sample is not None and t.numel() > sample:
        part = _evenly_spaced(t.detach(), sample)
        # A sample is small: each op split over threads would cost more in waiting for a worker
        # the OS has put aside (a busy machine: milliseconds an op) than it saves.
        with _one_thread():
            stats = tensor_stats(part)
        stats.update(numel=t.numel(), sampled=part.numel())
        return stats
    x = t.detach().reshape(-1)
    if x.is_complex():
        x = x.abs()
    n = x.numel()
    nan = finite_n = 0
    total = total_sq = 0.0
    lo, hi = math.inf, -math.inf
    for start in range(0, n, _STATS_CHUNK):
        c_nan, c_finite, c_total, c_sq, c_lo, c_hi = _chunk_moments(x[start : start + _STATS_CHUNK])
        nan, finite_n = nan + int(c_nan), finite_n + int(c_finite)
        total, total_sq = total + c_total, total_sq + c_sq
        lo, hi = min(lo, c_lo), max(hi, c_hi)
    stats: dict[str, Any] = {"numel": n, "nan": nan, "inf": n - nan - finite_n}
    if finite_n:
        mean = total / finite_n
        var = max(total_sq / finite_n - mean * mean, 0.0)
        stats.update(min=lo, max=hi, mean=mean, std=math.sqrt(var))
    return stats


def _chunk_moments(c: torch.Tensor) -> list[float]:
    """NaN count, finite count, sum, sum of squares, min and max of the finite values of a 1-D
    chunk, in fp64, read back from its device once (no boolean indexing: it syncs, and costs
    more than the arithmetic)."""
    c = c.to(torch.float64)
    finite = torch.isfinite(c)
    zeroed = torch.where(finite, c, 0.0)
    lo = torch.where(finite, c, math.inf).min()
    hi = torch.where(finite, c, -math.inf).max()
    counts = torch.stack([torch.isnan(c).sum(), finite.sum()]).to(torch.float64)  # exact: a chunk is < 2**53
    return torch.cat([counts, torch.stack([zeroed.sum(), zeroed.dot(zeroed), lo, hi])]).tolist()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch's intra-op threads set to one for the block, then put back. OpenMP keeps the
    setting per thread, so torch work in the program's other threads keeps its threads."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _evenly_spaced(t: torch.Tensor, at_most: int) -> torch.Tensor:
    """A strided view of ``t`` with at most ``at_most`` elements, taken by stepping through its
    largest dimension first (no copy of ``t``: a non-contiguous 1 GiB tensor stays uncopied)."""
    view = t
    while view.numel() > at_most and view.dim() and max(view.shape) > 1:
        dim = max(range(view.dim()), key=lambda d: view.shape[d])
        step = -(-view.numel() // at_most)  # ceil: one dimension may do it all
        view = view[(slice(None),) * dim + (slice(None, None, min(step, view.shape[dim])),)]
    return view
