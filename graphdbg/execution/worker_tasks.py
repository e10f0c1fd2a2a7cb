"""The parent's side of the sandboxed worker's tasks besides a replay (``execution.worker``):
every node's value (minify's original graph), and bisect nodes.

    >>> values = recorded_values(pool, case, grad=False, timeout=60)   # executor.SandboxedWorkers' ``values`` job
    >>> sandboxed_bisect_nodes(dump, "inductor", None, ReplayOptions(), timeout=1800)

An untrusted graph never runs in graphdbg's own process here: the worker is sandboxed and
capped as a replay child is, and each run is bounded by the timeout (a C loop that never
returns to Python is ended by killing the worker). What comes back is data, read through the
gate: JSON and safetensors, bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors

from graphdbg.case import Case
from graphdbg.errors import DumpError, GraphdbgError
from graphdbg.execution.worker import ANSWER, WORKER_MODULE, Reply, WorkerPool
from graphdbg.judge.fatal_signal import exit_signal
from graphdbg.replay.divergence import NodeDivergence
from graphdbg.store.safe_files import read_child_file, read_json

VALUES_FILE = "values.safetensors"
MAX_VALUES_BYTES = 1 << 40  # what one recording may send back: bounded by the worker's memory cap first


class Unrecorded:
    """A node's value the worker could not send (a tuple from ``split``, None, a dtype): a
    candidate can't take it as an input, so its producer stays in the candidate."""

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind} value, kept in the worker>"


def _failed(what: str, reply: Reply, timeout: float) -> GraphdbgError:
    if reply.returncode is None:
        return GraphdbgError(f"{what}: no result after {timeout:g}s (--timeout)")
    how = f"killed by {exit_signal(reply.returncode)}" if reply.returncode < 0 else f"exited with code {reply.returncode}"
    last = reply.err.strip().splitlines()[-1:] if reply.err.strip() else []
    return GraphdbgError(f"{what}: the sandboxed worker was {how}" + (f" ({last[0][:200]})" if last else ""))


def _answer(folder: Path, what: str) -> dict[str, Any]:
    try:
        data = read_json(folder, ANSWER, what="worker answer")
    except DumpError as e:
        raise GraphdbgError(f"{what}: {e}") from None
    if not isinstance(data, dict):
        raise GraphdbgError(f"{what}: garbage answer from the sandboxed worker")
    if "error" in data:  # its first line: fx adds the node and a traceback below
        first = next((ln.strip() for ln in str(data["error"]).splitlines() if ln.strip()), "an error")
        raise GraphdbgError(f"{what}: {first[:500]}")
    return data


def recorded_values(pool: WorkerPool, case: Case, grad: bool, timeout: float) -> dict[str, Any]:
    """Every node's value in one eager run of ``case``, run in one of ``pool``'s workers: the
    graph input values are this process's own, the rest come back."""
    what = "recording every node's value"
    request = {"task": "values", "device": str(case.device), "grad": grad}
    folder, reply, worker = pool.ask(request, timeout, case=_as_saved(case))
    try:
        if not reply.answered:
            raise _failed(what, reply, timeout)
        kinds = _answer(folder, what).get("values")
        if not isinstance(kinds, dict):
            raise GraphdbgError(f"{what}: garbage answer from the sandboxed worker")
        try:
            data = read_child_file(folder / VALUES_FILE, max_bytes=MAX_VALUES_BYTES)
            tensors = load_safetensors(data) if data else {}
        except (DumpError, Exception) as e:
            raise GraphdbgError(f"{what}: {e}") from None
        return _values(case, kinds, tensors)
    finally:
        pool.done(folder, worker, keep=reply.answered)


def _as_saved(case: Case) -> Case:
    """The Case as the worker must see it: its own input values, saved (a Case straight from a
    dump would be rebuilt there, and synthesized inputs drawn again)."""
    return Case(gm=case.gm, inputs=case.inputs, device=case.device, stand_ins=case.stand_ins, dump=case.dump, modified=True)


def _values(case: Case, kinds: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    inputs = dict(zip((n.name for n in case.gm.graph.nodes if n.op == "placeholder"), case.inputs))
    values: dict[str, Any] = {}
    for name, info in kinds.items():
        kind = info.get("kind") if isinstance(info, dict) else None
        if kind == "input" and name in inputs:
            value = inputs[name]
            values[name] = value.detach().clone() if isinstance(value, torch.Tensor) else value
        elif kind == "tensor" and name in tensors:
            values[name] = _strided(tensors[name], info.get("stride"), case.device)
        elif kind in ("bool", "int", "float") and isinstance(info.get("value"), (bool, int, float)):
            values[name] = {"bool": bool, "int": int, "float": float}[kind](info["value"])
        else:
            values[name] = Unrecorded(str(info.get("type") or kind) if isinstance(info, dict) else "unknown")
    return values


def _strided(t: torch.Tensor, stride: Any, device: Any) -> torch.Tensor:
    """``t`` with the strides the value had (a dense layout: a permutation of the dims), else contiguous."""
    if isinstance(stride, list) and len(stride) == t.dim() and all(isinstance(s, int) and s >= 0 for s in stride):
        dims = sorted(range(t.dim()), key=lambda d: (stride[d], -d))
        expect, dense = 1, True
        for d in dims:
            if t.shape[d] > 1 and stride[d] != expect:
                dense = False
                break
            expect *= t.shape[d]
        if dense:
            out = torch.empty_strided(tuple(t.shape), tuple(stride), dtype=t.dtype, device=device)
            return out.copy_(t)
    return t.to(device)


def sandboxed_bisect_nodes(dump: Any, backend: Any, passes: Any, opts: Any, *, timeout: float, backward: bool = False,
                           trust: bool = False) -> NodeDivergence:
    """``bisect nodes`` (``bisect_nodes``, or ``bisect_training_nodes`` with ``backward``) over
    ``dump`` (a Dump, or a Case whose inputs are sent as they are), in a sandboxed worker; a
    GraphdbgError past ``timeout`` or when the worker dies."""
    what = "bisect nodes"
    case = dump if isinstance(dump, Case) else None
    if case is not None:
        device = str(case.device)
    else:
        device = "cpu" if dump.cpu_replay(opts.device) else str(dump.resolve_device(opts.device))
    request = {"task": "bisect_nodes", "device": device, "backend": backend, "passes": passes, "rtol": opts.rtol,
               "atol": opts.atol, "backward": backward, "trust": trust}
    if case is None:
        request["dump"] = str(dump.path)
    specs = [backend if isinstance(backend, str) else None, passes if isinstance(passes, str) else None]
    with WorkerPool(WORKER_MODULE, dump=str(dump.path) if case is None else None) as pool:
        folder, reply, worker = pool.ask(request, timeout, case=_as_saved(case) if case is not None else None, specs=specs)
        if not reply.answered:
            raise _failed(what, reply, timeout)
        found = _answer(folder, what).get("divergence")
    try:
        return NodeDivergence(**found)
    except TypeError:
        raise GraphdbgError(f"{what}: garbage answer from the sandboxed worker") from None
