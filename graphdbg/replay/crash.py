"""A failure as an Outcome, the same way for the forward replay (``replay.run``) and the
training one (``replay.backward``): the backend's own exception under Dynamo's wrappers, its
text and signature, and the pass that raised when a pass did."""

from __future__ import annotations

import traceback as tb
from typing import TYPE_CHECKING

from graphdbg.graph.hashing import target_name
from graphdbg.judge.signature import WRAPPERS, exception_text, signature, unwrap_backend_exception
from graphdbg.replay.passes import PassFailed, find_pass_failure

if TYPE_CHECKING:
    import torch.fx as fx

    from graphdbg.outcome import Outcome


def unwrap(e: BaseException) -> BaseException:
    """The backend's own exception, not Dynamo's or Inductor's wrapper around it."""
    for _ in range(5):
        if type(e).__name__ == "InternalTorchDynamoError":
            # Dynamo formats the backend's exception into its wrapper; when that exception's
            # __str__ raises, Dynamo reports the __str__ failure: the backend's own is its context.
            inner = _raised_by_str(e.__cause__ or e.__context__)
        else:
            inner = unwrap_backend_exception(e)
            if inner is e and type(e).__name__ in WRAPPERS:  # a wrapper that kept only the cause
                inner = e.__cause__
            inner = None if inner is e else inner
        if inner is None:
            break
        e = inner
    return e


def _raised_by_str(e: BaseException | None) -> BaseException | None:
    """The exception whose ``__str__`` raised ``e``, or None."""
    frame, last = (e.__traceback__ if e is not None else None), None
    while frame is not None:
        last, frame = frame, frame.tb_next
    if last is not None and last.tb_frame.f_code.co_name == "__str__" and e.__context__ is not None:
        return e.__context__
    return None


def failed_pass(e: BaseException) -> PassFailed | None:
    """The pass that raised ``e``: a ``pre`` pass raises PassFailed itself, a post_grad pass
    raises it inside Inductor, under Inductor's and Dynamo's wrappers."""
    return e if isinstance(e, PassFailed) else find_pass_failure(e)


def set_crash(outcome: Outcome, e: BaseException, stage: str, node: fx.Node | None = None) -> None:
    """``outcome`` becomes the crash ``e`` in ``stage``, at ``node`` when known."""
    msg = exception_text(e)
    outcome.status = "crash"
    outcome.stage = stage
    outcome.error_type = type(e).__name__
    outcome.message = msg
    outcome.traceback = "".join(tb.format_exception(type(e), e, e.__traceback__))[-8000:]
    if node is not None:
        outcome.node, outcome.node_target = node.name, target_name(node)
    outcome.signature = signature(type(e).__name__, msg, outcome.node_target)


def set_pass_crash(outcome: Outcome, failed: PassFailed) -> None:
    """``outcome`` becomes the crash of the pass ``failed`` names (``pass:<name>``)."""
    set_crash(outcome, failed.__cause__ or failed, f"pass:{failed.report.name}")
