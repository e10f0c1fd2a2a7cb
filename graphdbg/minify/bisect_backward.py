"""``bisect nodes --backward``: the first forward node whose value, or else the first backward
node whose value (a gradient on its way), diverges.

    >>> found = bisect_training_nodes("dumps/rank0/g0-backward-accuracy-1a2b/forward", "inductor")
    >>> found.node, found.note
    ('relu', 'backward graph of dumps/rank0/g0-backward-accuracy-1a2b')

The forward is bisected as any graph. If no forward node is off, the backward graph is: the
backward dump the forward belongs to (with the backward compiler it names), or, for a forward
dump on its own, the backward graph AOTAutograd makes of it, traced here with the recorded
inputs and seeded tangents, and compiled by ``backend`` like any graph.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from graphdbg.backends.resolve import dump_backend, recorded_backend, resolve_backend
from graphdbg.case import Case
from graphdbg.errors import GraphdbgError
from graphdbg.formats import load as load_dump
from graphdbg.minify.bisect import NodeDivergence, bisect_nodes
from graphdbg.minify.shrinker import as_case
from graphdbg.rebuild.inputs import clone_values
from graphdbg.replay.options import ReplayOptions
from graphdbg.replay.training_replay import TANGENT_SEED, as_graph_backend, differentiable_inputs, grad_leaves, is_backward_dump
from graphdbg.store.safe_files import backward_dump_folder


def bisect_training_nodes(case_or_dump: Any, backend: Any = "eager", passes: Any = None,
                          options: ReplayOptions | None = None, *, trust: bool = True) -> NodeDivergence:
    """The first forward node off the reference; if none, the first backward node. Not ``trust``
    (the CLI without ``--trust-backend``): a backend the backward dump names as code is refused."""
    case = as_case(case_or_dump)
    if is_backward_dump(case.dump):
        return _noted(bisect_nodes(case, backend, passes, options), "backward graph")
    found = bisect_nodes(case, backend, passes, options)
    if found.node is not None:
        return _noted(found, "forward graph")
    bw_case, bw_backend, where = backward_case(case, backend, trust=trust)
    found = bisect_nodes(bw_case, bw_backend, None, options)
    return _noted(found, where if found.node is not None else "no forward or backward node diverges")


def _names_of(dump: Any) -> set[str]:
    """The spellings of the backend a dump records: its name, and its recipe's when it has one."""
    names = {str(dump.backend)}
    try:
        names.add(recorded_backend(dump))
    except GraphdbgError:
        pass  # a recipe in a shape capture doesn't write: only the name counts
    return names


def backward_case(case: Case, backend: Any, trust: bool = True) -> tuple[Case, Any, str]:
    """(the backward graph as a Case, the backend that compiles it, where it came from). The
    backward dump's own backend is code it names: without ``trust`` it is refused (unless a
    registered name)."""
    dump = case.dump
    if dump is not None and dump.manifest.backward_dump is not None:
        parent = load_dump(backward_dump_folder(dump.path, dump.manifest.backward_dump))
        if backend is None or backend in _names_of(dump):  # the user's backend: its bw_compiler compiles the backward

            if not trust:
                dump_backend(parent, trust, "bisect nodes --backward", shown_path=dump.path)
            backend = parent.backend
            if parent.manifest.backward is not None and backend == parent.manifest.backward.compiler:
                backend = as_graph_backend(resolve_backend(backend)[1], backend, parent)
        return parent.case(case.device), backend, f"backward graph of {parent.path}"
    return traced_backward(case), backend, "backward graph traced by AOTAutograd"


def traced_backward(case: Case) -> Case:
    """The backward graph AOTAutograd makes of ``case``'s graph, with the values it gets."""
    # aot_autograd brings torch._dynamo (about 2 s): imported only when needed
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    got: dict[str, Any] = {}

    def forward_compiler(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        return make_boxed_func(gm.forward)

    def backward_compiler(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        got["gm"] = gm

        def run(args: list[Any]) -> Any:
            got["inputs"] = clone_values(list(args))
            return gm(*args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    inputs = differentiable_inputs(case.inputs)
    compiled = aot_module_simplified(case.gm, inputs, forward_compiler, backward_compiler)
    with torch.enable_grad():
        out = compiled(*inputs)
    leaves = grad_leaves(out)
    if not leaves:
        raise GraphdbgError("no output of this graph requires grad; it has no backward")
    gen = torch.Generator().manual_seed(TANGENT_SEED)
    tangents = [torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.device, t.dtype) for t in leaves]
    torch.autograd.grad(leaves, [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad], tangents,
                        allow_unused=True)
    if "inputs" not in got:
        raise GraphdbgError("AOTAutograd made no backward graph of this graph")
    return Case(gm=got["gm"], inputs=got["inputs"], device=case.device, stand_ins=list(case.stand_ins))


def _noted(found: NodeDivergence, where: str) -> NodeDivergence:
    found.note = f"{where}; {found.note}" if found.note else where
    return found


def bisect_nodes_job(request: dict[str, Any], answers: Any) -> dict[str, Any]:
    """``bisect nodes`` as the sandboxed worker runs it (``execution/jobs.py``'s ``JOB_KINDS``)."""
    case = load_dump(request["dump"]).case(device=request["device"])
    opts = ReplayOptions(rtol=request.get("rtol"), atol=request.get("atol"))
    if request.get("backward"):
        found = bisect_training_nodes(case, request["backend"], request["passes"], opts, trust=bool(request.get("trust")))
    else:
        found = bisect_nodes(case, request["backend"], request["passes"], opts)
    return {"divergence": found.to_dict()}


__all__ = ["backward_case", "bisect_nodes_job", "bisect_training_nodes", "traced_backward"]
