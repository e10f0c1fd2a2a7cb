"""Dynamo's DDP optimizer: the bucket split it makes of a graph, recorded in each piece's dump.

``DDP(torch.compile(model, backend=capture(...)))`` (or a model compiled before DDP wraps it):
while DDP runs its module, Dynamo hands the graph to ``DDPOptimizer.compile_fn``, which splits
it at gradient-bucket boundaries (``bucket_cap_mb``; DDP's first bucket is smaller) and hands
each piece, ``submod_<bucket>``, to the user's backend. The backend sees each piece as a graph
of its own. While the split compiles, the whole graph is the pieces' parent (``capture.nested``'s
frame), so:

- a piece's dump has ``parent`` (the whole graph's seq and hash, the piece's name) and ``ddp``:
  its bucket (index, parameters, bytes), the caps, how many buckets;
- when a piece fails, at compile or when it runs, the whole graph is dumped too (``captured``)
  with the split under ``ddp`` and the piece dumps linked as its children.

    >>> DDP(torch.compile(model, backend=graphdbg.capture(backend)), bucket_cap_mb=1)(x)
    # dumps/rank1/g0.2-compile_error-<hash>/  manifest "ddp": {"piece": "submod_2", "bucket": 2, "bucket_count": 4, ...}
    # dumps/rank1/g0-captured-<hash>/         the graph before the split, "children": [g0.2-...]

A single bucket is not split: Dynamo hands the whole graph to the backend, a plain capture.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch.fx as fx

from graphdbg.backends.calls import drop_own_frame
from graphdbg.backends.compiler_config import config_diff
from graphdbg.capture.nested import Frame
from graphdbg.capture.on_import import watch
from graphdbg.capture.origin import compile_origin
from graphdbg.capture.stderr import say
from graphdbg.graph.snapshot import GraphSnapshot

if TYPE_CHECKING:
    from graphdbg.capture.hook import CapturingBackend

MODULE = "torch._dynamo.backends.distributed"
MAX_PARAM_NAMES = 256  # per bucket in a manifest; past it the count says how many
_local = threading.local()
_patched: set[str] = set()
_lock = threading.Lock()


@dataclass
class Split:
    """One ``DDPOptimizer.compile_fn`` call in progress on this thread."""

    optimizer: Any
    gm: fx.GraphModule
    inputs: list[Any]
    frame: Frame | None = None  # made when the first piece reaches a captured backend


def _stack() -> list[Split]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def install() -> None:
    """Watch ``DDPOptimizer.compile_fn`` in this process (idempotent, cheap: never imports it)."""
    module = sys.modules.get(MODULE)
    if module is not None and hasattr(module, "DDPOptimizer"):
        _apply(MODULE, module)
    else:
        watch("ddp", lambda name: name == MODULE and name not in _patched, _apply)


def _apply(name: str, module: Any) -> None:
    with _lock:
        if name in _patched:
            return
        _patched.add(name)
    try:
        cls = module.DDPOptimizer
        cls.compile_fn = _watched(cls.compile_fn)
    except Exception as e:
        say(f"graphdbg: could not watch DDP's bucket split ({type(e).__name__}: {e})")


def _watched(original: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(original, "_graphdbg_ddp", False):
        return original

    @functools.wraps(original)
    def compile_fn(self: Any, gm: fx.GraphModule, example_inputs: list[Any], **configs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
        split = Split(self, gm, list(example_inputs))
        _stack().append(split)
        try:
            compiled = original(self, gm, example_inputs, **configs)
        except Exception as e:
            _link(split, split.inputs, "at_compile")
            drop_own_frame(e)
            raise
        finally:
            _stack().pop()
        return compiled if split.frame is None else _runs(compiled, split)

    compile_fn._graphdbg_ddp = True  # type: ignore[attr-defined]
    return compile_fn


def _runs(compiled: Callable[..., Any], split: Split) -> Callable[..., Any]:
    """The split graph's code: when a call of it fails in a piece, the whole graph is dumped
    with that call's inputs and the piece dumps linked to it."""

    def run(*args: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841
        try:
            return compiled(*args)
        except Exception as e:
            _link(split, list(args), "after_failed_call")
            drop_own_frame(e)
            raise

    return run


def _link(split: Split, inputs: list[Any], state: str) -> None:
    frame = split.frame
    if frame is not None and any(not c.get("linked") for c in frame.children):
        frame.owner._link_pieces(frame.snap, None, inputs, state)


def piece_frame(owner: CapturingBackend, gm: Any, seq: int) -> Frame | None:
    """The frame of the DDP split ``gm`` is a piece of, made on the first piece, whose ``seq``
    the whole graph takes (None outside a split, and for the whole graph of a split with one bucket)."""
    stack = _stack()
    if not stack or not isinstance(gm, fx.GraphModule) or gm is stack[-1].gm:
        return None
    split = stack[-1]
    if split.frame is None:
        snap = GraphSnapshot.take(seq, split.gm, keep_eager=False)
        snap.config = owner._guarded(lambda: config_diff(owner.config_extra), "record the compiler settings")
        snap.origin = compile_origin(split.gm)
        snap.ddp = split_record(split.optimizer)
        split.frame = Frame(owner, snap, split.gm, "compile")
        if owner.mode == "always":
            owner._dump(snap, split.inputs, "captured", None, inputs_state="at_compile")
    return split.frame


def split_record(optimizer: Any) -> dict[str, Any]:
    """The caps and every bucket, in forward order (``DDPOptimizer.buckets``)."""
    buckets = list(getattr(optimizer, "buckets", None) or [])
    return {"bucket_bytes_cap": int(optimizer.bucket_bytes_cap), "first_bucket_cap": int(optimizer.first_bucket_cap),
            "buckets": [_bucket(b) for b in buckets]}


def _bucket(b: Any) -> dict[str, Any]:
    params = [str(p) for p in b.params]
    return {"bytes": int(b.size), "params": params[:MAX_PARAM_NAMES], "param_count": len(params),
            "nodes": len(b.nodes)}


def piece_record(frame: Frame, name: str | None) -> dict[str, Any] | None:
    """A piece's place in its split: ``submod_<i>`` holds bucket ``i`` (``split_module`` names
    its partitions by the bucket index), with the caps and that bucket's parameters."""
    whole = getattr(frame.snap, "ddp", None)
    m = re.fullmatch(r"submod_(\d+)", name or "")
    if whole is None or m is None:
        return None
    index = int(m.group(1))
    buckets = whole["buckets"]
    return {"piece": name, "bucket": index, "bucket_count": len(buckets), "bucket_bytes_cap": whole["bucket_bytes_cap"],
            "first_bucket_cap": whole["first_bucket_cap"], **(buckets[index] if index < len(buckets) else {})}
