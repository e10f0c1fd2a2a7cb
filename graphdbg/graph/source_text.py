"""A printed graph's text as Python can parse it, without torch (``ls`` reads files' text from
its cache's side without importing the parser)."""

from __future__ import annotations

import re

_ANGLED_CLASS = re.compile(r"^(\s*class\s+)<(\w+)>(\s*\()", re.M)
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours (ANSI select-graphic-rendition), nothing else


def readable_source(source: str) -> str:
    """``print_readable()`` output as Python can parse it, line for line: terminal colours
    (``colored=True``, a log copied from a terminal) dropped, and the class of a GraphModule
    made from a lambda (Inductor's ``fx_graph_readable.py``: ``class <lambda>(torch.nn.Module):``)
    given a name (``_lambda_``)."""
    if "\x1b" in source:
        source = _SGR.sub("", source)
    if "class <" in source:
        source = _ANGLED_CLASS.sub(r"\1_\2_\3", source)
    return source
