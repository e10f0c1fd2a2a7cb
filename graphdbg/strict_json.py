"""The one JSON writer of every ``--json`` output: strict JSON (``null``, never ``NaN``), and an
object output says which graphdbg wrote it and its ``schema`` (``graphdbg schema NAME``).

    >>> json_text({"err": float("nan")}, "replay")
    '{\n "graphdbg": "0.1.0",\n "schema": "replay",\n "err": null\n}\n'
"""

from __future__ import annotations

import json
import math

from graphdbg._version import __version__
from graphdbg.display import gc_paused


def json_text(data: object, schema: str | None = None) -> str:
    """``data`` as the CLI prints it (``indent=1``, a final newline)."""
    return text_of(output_ready(data, schema))


def output_ready(data: object, schema: str | None = None) -> object:
    """``data`` with strict-JSON types only (``json_ready``), and the ``graphdbg`` and ``schema``
    keys first where it is an object output: what ``json_text`` writes, before writing it."""
    if schema is not None and isinstance(data, dict):
        data = {"graphdbg": __version__, "schema": schema, **{k: v for k, v in data.items() if k not in ("graphdbg", "schema")}}
    with gc_paused():  # ls --json of 10,000 files: everything made here lives until it is written
        return json_ready(data)


def text_of(ready: object) -> str:
    """The text of an ``output_ready`` value."""
    with gc_paused():
        return json.dumps(ready, indent=1, allow_nan=False) + "\n"


def json_ready(value: object) -> object:
    """``value`` with only strict-JSON types: non-finite floats and pandas/numpy missing values
    become None, numpy scalars and arrays plain Python, paths and anything else strings.

        >>> json_ready({"err": float("nan"), "shape": (2, 3)})
        {'err': None, 'shape': [2, 3]}
    """
    kind = type(value)
    if kind in _PLAIN or value is None:  # by exact type first: ls --json of 10,000 files is 300,000 values
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): v if type(v) in _PLAIN else json_ready(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if kind is list:
        return [v if type(v) in _PLAIN else json_ready(v) for v in value]  # type: ignore[attr-defined]
    return _json_ready_other(value)


_PLAIN = frozenset({str, int, bool})


def _json_ready_other(value: object) -> object:
    if isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist) and type(value).__module__ == "numpy":
        return json_ready(tolist())
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas.NA, pandas.NaT
        return None
    return str(value)
