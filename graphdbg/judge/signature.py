"""A failure's identity: exception type, normalised message, failing node's target.

Two runs of the same bug differ in addresses, object ids, temp paths, line numbers of
generated code and the sizes in shapes; the signature strips those so that the same bug on
two ranks or two runs compares equal.

    >>> signature("RuntimeError", "bad at 0x7f3a2c and /tmp/tmpab12/x.py, shape [4, 8]")
    'RuntimeError: bad at 0x? and /tmp/?, shape [?, ?]'
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Any

_RULES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\[?\b\d{1,3}(?:\.\d{1,3}){3}\]?:\d+"), "?:?"),  # peer address and port
    (re.compile(r"(/tmp|/var/folders|/private/var)/[^\s'\",:)]+"), r"\1/?"),
    (re.compile(r"\b(?:at|id|object at)\s+\d{6,}\b"), "id ?"),
    (re.compile(r"\b\d{7,}\b"), "?"),
    (re.compile(r"(line )\d+"), r"\1?"),
    (re.compile(r"\[rank\d+\]:?"), ""),
    (re.compile(r"\bcuda:\d+\b"), "cuda:?"),
    (re.compile(r"\b\d+(?:x\d+)+\b"), lambda m: "x".join("?" * (m.group(0).count("x") + 1))),
]
_SHAPE = re.compile(r"[\[(](\s*-?[\w*+]+\s*(?:,\s*-?[\w*+]+\s*)*,?)[\])]")


def _strip_shape_numbers(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        inner = re.sub(r"\b\d+\b", "?", m.group(1))
        return m.group(0)[0] + inner + m.group(0)[-1]

    return _SHAPE.sub(repl, text)


def normalize_message(message: str, max_len: int = 300) -> str:
    """First meaningful line of an error message with volatile parts replaced by '?'."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    text = _strip_shape_numbers(text)
    return text[:max_len]


# Exceptions that only wrap the backend's own: Dynamo's, and Inductor's around CppCompileError.
WRAPPERS = ("BackendCompilerFailed", "InductorError")
_WRAPPED = re.compile(r"^(?:backend=.* raised:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Failed|Interrupt)\w*): ?(.*)$", re.S)


def unwrap_backend_exception(e: BaseException) -> BaseException:
    """The backend's own exception inside Dynamo's and Inductor's wrappers (``inner_exception``)."""
    for _ in range(8):
        inner = getattr(e, "inner_exception", None) if type(e).__name__ in WRAPPERS else None
        if inner is None:
            return e
        e = inner
    return e


def unwrapped_error(exc_type: str, message: str) -> tuple[str, str]:
    """(type, message) of the wrapped exception when ``exc_type`` is a wrapper whose message
    names it ("InductorError", "CppCompileError: C++ compile error ..."); else unchanged. The
    same failure then has one signature at capture, in replay and in repro.py."""
    for _ in range(8):
        m = _WRAPPED.match(message.strip()) if exc_type in WRAPPERS else None
        if m is None:
            return exc_type, message
        exc_type, message = m.group(1).rsplit(".", 1)[-1], m.group(2)
    return exc_type, message


def signature(exc_type: str, message: str, node_target: str | None = None) -> str:
    exc_type, message = unwrapped_error(exc_type, message)
    sig = f"{exc_type}: {normalize_message(message)}"
    if node_target:
        sig += f" @ {node_target}"
    return sig


def same_signature(a: str | None, b: str | None) -> bool:
    """Equal, or equal once the failing node is dropped from the one that knows it (a capture
    often can't tell which node failed where a replay can)."""
    if a is None or b is None:
        return a == b
    if a == b:
        return True
    base_a, _, node_a = a.partition(" @ ")
    base_b, _, node_b = b.partition(" @ ")
    return base_a == base_b and not (node_a and node_b)


def exception_text(e: BaseException) -> str:
    """``str(e)``, or a note saying it failed: a backend's exception whose ``__str__`` raises
    must become an Outcome like any other, not replace the failure with a second one.

        >>> class Bad(Exception):
        ...     def __str__(self): raise ValueError("no")
        >>> exception_text(Bad())
        '<str() of Bad raised ValueError>'
    """
    try:
        text = str(e)
    except BaseException as inner:  # noqa: BLE001 - whatever __str__ does, the failure is still recorded
        if isinstance(inner, (KeyboardInterrupt, SystemExit)):
            raise
        return f"<str() of {type(e).__name__} raised {type(inner).__name__}>"
    return text if isinstance(text, str) else f"<str() of {type(e).__name__} returned {type(text).__name__}>"


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # graphdbg's own folder


def format_exception(exc: BaseException) -> dict[str, Any]:
    """A captured exception as a dump records it; its traceback starts at the first frame that is
    not graphdbg's (the frame of capture's wrapper that caught it is no part of the user's failure)."""
    t = type(exc)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
        tb = tb.tb_next
    return {
        "type": t.__name__,
        "qualified_type": f"{t.__module__}.{t.__qualname__}",
        "message": exception_text(exc),
        "traceback": "".join(traceback.format_exception(t, exc, tb)),
    }
