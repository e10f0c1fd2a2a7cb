"""A user's compiler whose FX passes read the node meta Dynamo gives (``example_value`` or
``val``), with a seeded bug, and its capture: issue 53 (bisect, minify's repro.py and exported
tests handed backends a graph without that meta). ``tests/test_bisect.py`` and
``tests/test_repro_meta.py`` use it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

import graphdbg

USER_CC = '''
"""A user's compiler: three FX passes over Dynamo's graph, then the graph runs behind a plain function."""
import operator
import torch

KEY = "{key}"
MODE = "{mode}"


def count_meta(gm):
    """a: harmless; reads the sizes, as a planning pass does."""
    for n in gm.graph.nodes:
        v = n.meta.get(KEY)
        n.meta["cc_numel"] = v.numel() if isinstance(v, torch.Tensor) else None
    return gm


def widen_tanh(gm):
    """b: the buggy one."""
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is torch.tanh:
            v = n.meta.get(KEY)
            rank = len(v.shape) if v is not None else None
            if MODE == "crash":
                v.shape[rank]  # off by one: IndexError
            elif v is not None and v.dtype.is_floating_point:
                with gm.graph.inserting_after(n):
                    new = gm.graph.call_function(operator.add, (n, 1.01))
                n.replace_all_uses_with(new, delete_user_cb=lambda u: u is not new)
    gm.recompile()
    return gm


def strict_tanh(gm):
    """b': refuses tanh outright: another failure than b's."""
    if any(n.target is torch.tanh for n in gm.graph.nodes):
        raise NotImplementedError("cc has no tanh kernel")
    return gm


def tidy(gm):
    """c: harmless."""
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def backend(gm, example_inputs):
    for p in (count_meta, widen_tanh, tidy):
        gm = p(gm)
    return lambda *args: gm(*args)  # opaque: bisect nodes can only compile prefixes
'''



def write_user_cc(folder: Path, modes: tuple[str, ...] = ("crash", "acc"), keys: tuple[str, ...] = ("example_value", "val")) -> None:
    """``cc_{mode}_{key}.py`` in ``folder``: each pass reads ``node.meta[key]``; ``crash``: an
    IndexError (an off-by-one rank), ``acc``: tanh's output off by 1.01."""
    for mode in modes:
        for key in keys:
            (folder / f"cc_{mode}_{key}.py").write_text(USER_CC.replace("{key}", key).replace("{mode}", mode))


def program(x, w):
    h = torch.tanh(x @ w)
    return h * 2 + 1


def capture_user_cc(mods: Path, dumps: Path, mode: str = "crash", key: str = "example_value") -> Path:
    """The dump ``graphdbg.capture`` writes for ``program`` compiled with ``cc_{mode}_{key}`` of
    ``mods`` (imported from there, and forgotten after: another folder may hold its namesake)."""
    name = f"cc_{mode}_{key}"
    sys.path.insert(0, str(mods))
    try:
        module = importlib.import_module(name)
        torch._dynamo.reset()
        torch.manual_seed(0)
        compiled = torch.compile(program, backend=graphdbg.capture(module.backend, dumps,
                                                                   **({"mode": "accuracy"} if mode == "acc" else {})))
        try:
            compiled(torch.randn(4, 8), torch.randn(8, 8))
        except Exception:
            pass
    finally:
        torch._dynamo.reset()
        sys.path.remove(str(mods))
        sys.modules.pop(name, None)
    return next(Path(dumps).glob("rank0/g0-*"))
