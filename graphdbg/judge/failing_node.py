"""Which node of a graph a failure happened in, from the exception or from its traceback's text.

    >>> failing_node(e, gm)            # the live exception: fx's generated code's frames, or fx.Interpreter's note
    <Node linear>
    >>> node_of_traceback(dump.manifest.failure.exception.traceback)   # a recorded traceback's text
    'linear'

Capture records what the live exception says (the manifest's ``failure.node``); a replay names
the node the same way; a dump that recorded none is read from its traceback's text.
"""

from __future__ import annotations

import linecache
import re
import traceback as tb
from typing import TYPE_CHECKING

from graphdbg.judge.signature import exception_text

if TYPE_CHECKING:  # torch-free at import: show and report read a recorded traceback without torch
    import torch.fx as fx

_WHILE_EXECUTING = re.compile(r"While executing %(\w+)")
_ASSIGNS = re.compile(r"\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")  # fx's line for a node: `name = ...` or `name: T = ...`
# a recorded traceback's frame in fx's generated code, and the line it ran: `    linear = torch._C._nn.linear(...)`
_GENERATED_FRAME = re.compile(r'^  File "<eval_with_key>[^"]*", line \d+, in \w+\n    (\w+)\s*(?::[^=\n]*)?=(?!=)', re.M)


def failing_node(e: BaseException, gm: fx.GraphModule) -> fx.Node | None:
    """The node whose code raised, from the traceback through ``gm``'s generated forward, or the
    'While executing %name' note fx.Interpreter adds.

    Only frames of ``gm``'s own code count: with a graph break the traceback also passes
    through the code of the graph Dynamo split (at the line it broke on), and through other
    GraphModules' code, whose line numbers mean nothing in ``gm``."""
    nodes = {n.name: n for n in gm.graph.nodes}
    text = exception_text(e) + "".join(str(n) for n in (getattr(e, "__notes__", None) or []) if isinstance(n, str))
    m = _WHILE_EXECUTING.search(text)
    if m and m.group(1) in nodes:
        return nodes[m.group(1)]
    own = code_file(gm)
    if own is None:
        return None
    for frame in reversed(tb.extract_tb(e.__traceback__)):
        if frame.filename == own and frame.lineno:
            node = node_on_line(gm, frame.lineno)
            if node is not None:
                return node
    return None


def node_of_traceback(text: str) -> str | None:
    """The node fx's generated code was running when it raised, from a traceback's text: the
    last ``<eval_with_key>`` frame's line (``linear = torch._C._nn.linear(...)``)."""
    names = _GENERATED_FRAME.findall(text or "")
    return names[-1] if names else None


def code_file(gm: fx.GraphModule) -> str | None:
    """The file name of ``gm``'s generated forward (``<eval_with_key>.N``), or None."""
    code = getattr(getattr(type(gm), "forward", None), "__code__", None)
    name = getattr(code, "co_filename", None)
    return name if isinstance(name, str) and name.startswith("<eval_with_key>") else None


def node_on_line(gm: fx.GraphModule, lineno: int) -> fx.Node | None:
    """The node line ``lineno`` of ``gm``'s generated code computes."""
    line = linecache.getline(code_file(gm) or "", lineno) or _line(gm.code, lineno)
    m = _ASSIGNS.match(line)
    if m is None:
        return None
    return next((n for n in gm.graph.nodes if n.name == m.group(1) and n.op != "placeholder"), None)


def _line(text: str, lineno: int) -> str:
    lines = text.splitlines()
    return lines[lineno - 1] if 0 < lineno <= len(lines) else ""
