"""The one JSON writer of every ``--json`` output: strict JSON (``null``, never ``NaN``), and an
object output says which graphdbg wrote it and its ``schema`` (``graphdbg schema NAME``).

    >>> json_text({"err": float("nan")}, "replay")
    '{\n "graphdbg": "0.1.0",\n "schema": "replay",\n "err": null\n}\n'
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
from typing import Iterator

from graphdbg._version import __version__


def json_text(data: object, schema: str | None = None) -> str:
    """``data`` as the CLI prints it (``indent=1``, a final newline)."""
    return encode_jsonable(output_ready(data, schema))


def output_ready(data: object, schema: str | None = None) -> object:
    """``data`` with strict-JSON types only (``jsonable``), and the ``graphdbg`` and ``schema``
    keys first where it is an object output: what ``json_text`` writes, before writing it."""
    if schema is not None and isinstance(data, dict):
        data = {"graphdbg": __version__, "schema": schema, **{k: v for k, v in data.items() if k not in ("graphdbg", "schema")}}
    with gc_paused():  # ls --json of 10,000 files: everything made here lives until it is written
        return jsonable(data)


ENCODER = json.JSONEncoder(indent=1, allow_nan=False)  # what every --json output is written with


def encode_jsonable(ready: object) -> str:
    """The text of an ``output_ready`` value: ``json.dumps(ready, indent=1)`` and a newline,
    joined a few thousand pieces at a time (the encoder's pieces of a 10,000-file listing,
    a million small strings, are never all held at once)."""
    with gc_paused():
        parts, batch = [], []
        for piece in ENCODER.iterencode(ready):
            batch.append(piece)
            if len(batch) >= 8192:
                parts.append("".join(batch))
                batch.clear()
        batch.append("\n")
        parts.append("".join(batch))
        return parts[0] if len(parts) == 1 else "".join(parts)


def jsonable(value: object) -> object:
    """``value`` with only strict-JSON types: non-finite floats and pandas/numpy missing values
    become None, numpy scalars and arrays plain Python, paths and anything else strings.

        >>> jsonable({"err": float("nan"), "shape": (2, 3)})
        {'err': None, 'shape': [2, 3]}
    """
    kind = type(value)
    if kind in _PLAIN or value is None:  # by exact type first: ls --json of 10,000 files is 300,000 values
        return value
    if kind is dict:  # a dict or list that needs no change is itself (not a copy of the whole output)
        out: dict | None = None
        for i, (k, v) in enumerate(value.items()):  # type: ignore[attr-defined]
            r = v if type(v) in _PLAIN or v is None else jsonable(v)
            if out is None and (r is not v or type(k) is not str):
                out = dict(itertools.islice(value.items(), i))  # type: ignore[attr-defined]
            if out is not None:
                out[k if type(k) is str else str(k)] = r
        return value if out is None else out
    if kind is list:
        items: list | None = None
        for i, v in enumerate(value):  # type: ignore[arg-type]
            r = v if type(v) in _PLAIN or v is None else jsonable(v)
            if items is None and r is not v:
                items = value[:i]  # type: ignore[index]
            if items is not None:
                items.append(r)
        return value if items is None else items
    return _jsonable_other(value)


_PLAIN = frozenset({str, int, bool})


def _jsonable_other(value: object) -> object:
    if isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist) and type(value).__module__ == "numpy":
        return jsonable(tolist())
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas.NA, pandas.NaT
        return None
    return str(value)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a big result is built (a listing of 10,000 files, its
    JSON): everything made lives until it is done, and the collector would scan it again and
    again (a fifth of a cached ``ls``). What is left (a caught exception's frames) is collected after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
