"""Which exceptions are Dynamo steering itself, not a backend failing.

Dynamo raises some exceptions through a backend call on purpose: ``TensorifyScalarRestartAnalysis``
(and the other ``RestartAnalysis`` kinds) make it trace the frame again, ``Unsupported`` is a
graph break, ``SkipFrame`` runs the frame eagerly, ``ObservedException`` replays a user
exception in the traced code. The user never sees them, so a dump of one is a false alarm.

    >>> is_control_flow(torch._dynamo.exc.TensorifyScalarRestartAnalysis())
    True
    >>> is_control_flow(RuntimeError("bad"))
    False
"""

from __future__ import annotations

# Looked up by name: the family grows and moves between torch releases.
_CONTROL_FLOW = ("RestartAnalysis", "SkipFrame", "Unsupported", "ObservedException", "ResetRequired")


def control_flow_types() -> tuple[type, ...]:
    """The exception classes of ``torch._dynamo.exc`` that steer Dynamo (subclasses included)."""
    try:
        from torch._dynamo import exc  # torch._dynamo costs about 2 s: imported only when needed
    except ImportError:
        return ()
    return tuple(t for t in (getattr(exc, name, None) for name in _CONTROL_FLOW) if isinstance(t, type))


def is_control_flow(e: BaseException) -> bool:
    """True when ``e`` is Dynamo's own control flow, to pass on untouched and never dump."""
    return isinstance(e, control_flow_types())
