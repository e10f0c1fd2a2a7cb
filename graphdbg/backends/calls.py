"""Keep graphdbg out of what the user sees when an exception passes through its wrappers.

    >>> try:
    ...     out = compiled(*args)
    ... except Exception as e:
    ...     dump(e)
    ...     drop_own_frame(e)
    ...     raise          # a bare raise: the traceback now lacks this frame

Every frame an exception unwinds through gets an entry at the head of its traceback when it
gets there. A bare ``raise`` (Python 3.11+) re-raises the exception with the traceback it
carries, adding nothing; so taking the wrapper's entry off the head just before it leaves the
traceback as it would be without the wrapper. On Python 3.10 a bare ``raise`` re-raises the
traceback the interpreter saved when the ``except`` began, and the wrapper's frame stays
(marked ``__tracebackhide__``, which pytest honours).
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def drop_own_frame(e: BaseException) -> None:
    """Take the calling function's own entry off the head of ``e``'s traceback.

    Call it last in an ``except`` block, right before a bare ``raise``."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        e.__traceback__ = tb.tb_next


def as_dynamo_calls_it(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """The callable Dynamo would call for a backend's result.

    A backend that returns ``gm.forward`` of a lazily compiled GraphModule hands Dynamo the
    ``_lazy_forward`` stub; Dynamo compiles the module's code at once and calls its real
    ``forward`` instead, so an error in that code keeps the generated line in its traceback.
    Behind a wrapper Dynamo sees only the wrapper, so the wrapper has to do the same: calling
    the stub goes through ``GraphModule.__call__``, which cuts the generated frames from the
    traceback and prints fx's own report on stderr.

    A backend that returns its code under ``torch._dynamo.disable`` (``aot_autograd`` does) gets
    one disable frame (``eval_frame.py ... in _fn``): Dynamo wraps the result in ``disable``
    again, which unwraps the first. Behind a wrapper Dynamo can't unwrap it, and the user's
    traceback would have two: the wrapper calls what is inside instead, under Dynamo's one."""
    compiled = _inside_disable(compiled)
    owner = getattr(compiled, "__self__", None)
    if getattr(compiled, "__name__", None) != "_lazy_forward" or owner is None:
        return compiled
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule  # a private torch API that may move: the try answers without it
    except ImportError:  # a torch without lazy graph modules never hands out the stub
        return compiled
    if not isinstance(owner, _LazyGraphModule):
        return compiled
    try:
        owner.real_recompile()
    except Exception:  # the stub raises the same when it is called, where Dynamo would have raised it
        return compiled
    return owner.forward


def _inside_disable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What a ``torch._dynamo.disable`` wrapper holds (the recursive kind, which Dynamo wraps results in)."""
    while (getattr(fn, "_torchdynamo_disable", False) and getattr(fn, "_torchdynamo_disable_recursive", True)
           and callable(getattr(fn, "_torchdynamo_orig_callable", None))):
        fn = fn._torchdynamo_orig_callable
    return fn


def call_inputs(args: tuple, boxed: bool) -> list[Any]:
    """The inputs of one call of compiled code, as references of our own. Dynamo calls with
    positional inputs even when the compiled function is boxed (``_boxed_call``); an AOT caller
    passes it one list, which the callee may empty. Only then is the one list the inputs."""
    return list(args[0]) if boxed and len(args) == 1 and isinstance(args[0], list) else list(args)


def positional(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Compiled code called with positional inputs, the way its caller calls it: a boxed function
    (``_boxed_call``: what a forward or backward compiler returns to AOTAutograd, which calls it
    with one list) gets its inputs as one list; anything else is returned as it is. Replay,
    minify's candidates and the repro call a piece this way."""
    if not getattr(compiled, "_boxed_call", False):
        return compiled

    def call(*args: Any) -> Any:
        return compiled(list(args))

    return call
