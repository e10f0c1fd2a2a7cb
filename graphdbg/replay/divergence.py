"""Where a difference starts: the first node whose value is off the reference.

    >>> d = graph_divergence(case, case.gm, grad=False)     # the graph a backend runs, node by node
    >>> d.node, d.source, d.max_abs_error
    ('mul', 'programs.py:31', 0.25)
    >>> replay_divergence(case, backend_fn, pre_passes, grad=False)   # None where it isn't cheap

Values come from ``ValueRecorder`` (an ``fx.Interpreter``) over the graph as captured, in its
own dtype and in float64 where it can, and over the graph the backend runs, compared node by
node of the same name. That needs the backend to hand back a GraphModule's own ``forward``
(backends that rewrite the FX graph and run it). ``bisect nodes`` (``minify/bisect.py``) uses
this and, for an opaque backend (Inductor), bisects over compiled prefixes instead; a replay
uses it only where it costs one more backend call and three interpreter runs.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from graphdbg.display import Displayed
from graphdbg.graph.hashing import target_name
from graphdbg.judge.accuracy import BY_DTYPE, Tolerance, judge_outputs
from graphdbg.outcome import DIFFERENT_FAILURE
from graphdbg.rebuild.inputs import clone_values
from graphdbg.replay.float64 import Float64Recorder
from graphdbg.replay.graph_meta import with_dynamo_meta
from graphdbg.replay.passes import apply_passes
from graphdbg.replay.values import COMPUTE_OPS, ValueRecorder

if TYPE_CHECKING:
    from graphdbg.case import Case

# A replay looks for the node only where recording every intermediate is cheap: inputs of at
# most this many bytes (the recorded values are a few times the inputs for most graphs).
REPLAY_INPUT_BYTES = 64 << 20


@dataclass
class NodeDivergence(Displayed):
    """The first node whose value is off the reference, where it came from, and how far off."""

    node: str | None
    target: str | None = None
    source: str | None = None  # file:line
    code: str | None = None
    module: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    replaced: str | None = None  # the reference node a pass or backend rewrote away
    new_nodes: list[str] = field(default_factory=list)  # nodes the rewrite put in its place
    method: str = "interpreter"  # or "prefix-bisect" (opaque backends)
    compared: int = 0
    note: str = ""
    failure: str | None = None  # how the backend fails at this node, when it crashes there (bisect's prefixes)
    fails_differently: bool = False  # the failure found is not the one the dump recorded
    captured: str | None = None  # the dump's recorded failure, named when the one found differs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        """``bisect nodes``' exit code: 5 nothing was compared (no verdict); 4 what was found fails,
        not as captured; 1 a node, or a pass that fails before any node runs; 0 none."""
        if self.node is None and self.failure is None:
            return 5 if self.compared == 0 else 0
        return DIFFERENT_FAILURE if self.fails_differently else 1

    def summary(self) -> str:
        if self.node is None and self.failure is not None:  # a pass failed before any node ran
            return self.note
        if self.node is None:
            return f"no node diverges ({self.note})" if self.note else "no node diverges"
        if self.fails_differently:
            return f"{self.node}: fails differently: {self.failure or self.note} (captured: {self.captured})"
        where = f" at {self.source}" if self.source else ""
        what = f" (rewritten from {self.replaced})" if self.replaced else ""
        how = f"max abs error {self.max_abs_error:.3g}" if self.max_abs_error is not None else self.note
        return f"{self.node}{what}{where}: {how}" + (f", in {self.module}" if self.module else "")


def references(case: Case, grad: bool) -> tuple[ValueRecorder, ValueRecorder | Float64Recorder]:
    """Every node's value in the graph as captured: in its own dtypes, and in float64 as the
    float64 reference computes it (``replay.float64``: casts the graph makes stay float64, nodes
    with no float64 kernel run in their own dtypes); empty where it can't be made: each node is
    then judged against its own-dtype value within an ulp bound (``judge.accuracy``)."""
    ref = ValueRecorder(case.gm)
    ref64 = Float64Recorder(case.gm)
    with torch.set_grad_enabled(grad):
        ref.run(*clone_values(case.inputs))
    try:
        with torch.no_grad():
            ref64.run(*clone_values(case.inputs))
    except Exception:
        ref64.values = {}
    return ref, ref64


def graph_divergence(case: Case, runs_gm: fx.GraphModule, ref: ValueRecorder, ref64: ValueRecorder | Float64Recorder, grad: bool,
                     tol: Tolerance = BY_DTYPE) -> NodeDivergence:
    """Run ``runs_gm`` under the interpreter and return its first node that disagrees with the
    reference node of the same name."""
    cand = ValueRecorder(runs_gm)
    crash: Exception | None = None
    with torch.set_grad_enabled(grad):
        try:
            cand.run(*clone_values(case.inputs))
        except Exception as e:  # a crash dump's graph: the node it crashes at is the answer, if nothing diverged before
            crash = e
    ref_nodes = {n.name: n for n in case.gm.graph.nodes}
    compared = 0
    for node in runs_gm.graph.nodes:
        if node.op in COMPUTE_OPS and node.name not in cand.values:
            break  # where the crash stopped the run
        if node.op not in COMPUTE_OPS or node.name not in ref_nodes or node.name not in ref.values:
            continue
        bad = judge_outputs(ref.values[node.name], cand.values[node.name], ref64=ref64.values.get(node.name), tol=tol)
        compared += 1
        if not bad:
            continue
        result = describe_node(case, ref_nodes[node.name], bad, compared)
        # an argument renamed away from the reference is a rewrite: name what it replaced
        ref_args = ref_nodes[node.name].all_input_nodes
        for mine, theirs in zip(node.all_input_nodes, ref_args):
            if mine.name != theirs.name and mine.name not in ref_nodes:
                result.replaced = theirs.name
                result.new_nodes = _new_ancestors(mine, ref_nodes)
                where = describe_node(case, theirs, bad, compared)
                result.source, result.code, result.module = where.source, where.code, where.module
                if result.new_nodes:
                    result.target = target_name(next(n for n in runs_gm.graph.nodes if n.name == result.new_nodes[-1]))
                break
        return result
    if crash is not None:
        return _crash_node(case, runs_gm, cand, ref_nodes, crash, compared)
    if compared == 0:  # no node of the graph the backend runs has a reference node of its name
        return NodeDivergence(None, compared=0, note="nothing was compared: no node of the graph the backend runs "
                                                     "has the name of a node of the graph as captured")
    return NodeDivergence(None, compared=compared, note="every node agrees with the reference")


def _crash_node(case: Case, runs_gm: fx.GraphModule, cand: ValueRecorder, ref_nodes: dict[str, fx.Node],
                crash: Exception, compared: int) -> NodeDivergence:
    """The node the graph crashed at (every node before it agreeing): where the reference has a
    node of that name, its source line; else the rewritten node's own name and target."""
    failed = next((n for n in runs_gm.graph.nodes if n.op in COMPUTE_OPS and n.name not in cand.values), None)
    message = (str(crash).strip().splitlines() or [""])[0][:200]
    note = f"the graph crashes here: {type(crash).__name__}: {message}"
    if failed is None:
        return NodeDivergence(None, compared=compared, note=note)
    if failed.name in ref_nodes:
        result = describe_node(case, ref_nodes[failed.name], [], compared)
    else:
        result = NodeDivergence(failed.name, target=target_name(failed), compared=compared)
    result.note = note
    return result


def graph_it_runs(gm: fx.GraphModule, inputs: list[Any], backend: Callable[..., Any], dump: Any = None) -> fx.GraphModule | None:
    """The GraphModule ``backend`` runs, when it hands back a GraphModule's own forward; it is
    handed a copy of ``gm`` with Dynamo's node meta (``graph_meta``), as a replay hands it."""
    try:
        handed = clone_values(inputs)
        compiled = backend(with_dynamo_meta(copy.deepcopy(gm), handed, dump), handed)
    except Exception:
        return None
    return runs_graph(compiled)


def runs_graph(compiled: Any) -> fx.GraphModule | None:
    """The GraphModule whose code ``compiled`` (what a backend returned) is, else None (opaque code)."""
    owner = getattr(compiled, "__self__", None) or compiled
    return owner if isinstance(owner, fx.GraphModule) else None


def replay_divergence(case: Case, backend: Callable[..., Any], pre_passes: list[Any], grad: bool,
                      tol: Tolerance = BY_DTYPE) -> NodeDivergence | None:
    """Where a replay's mismatch starts, when that is cheap: the backend rewrites the FX graph and
    runs it, and the inputs are small (``REPLAY_INPUT_BYTES``); None otherwise, or when the
    search fails (it never changes a replay's verdict). ``bisect nodes`` goes further."""
    size = sum(v.numel() * v.element_size() for v in case.inputs if isinstance(v, torch.Tensor))
    if size > REPLAY_INPUT_BYTES:
        return None
    try:
        gm, _ = apply_passes(with_dynamo_meta(copy.deepcopy(case.gm), case.inputs, case.dump), pre_passes)
        runs = graph_it_runs(gm, case.inputs, backend, case.dump)
        if runs is None:
            return None
        ref, ref64 = references(case, grad)
        found = graph_divergence(case, runs, ref, ref64, grad, tol)
    except Exception:  # the search is a hint: a graph the interpreter can't run gets none
        return None
    return found if found.node is not None else None


def _new_ancestors(node: fx.Node, ref_nodes: dict[str, fx.Node]) -> list[str]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.name in ref_nodes or n.name in out:
            continue
        out.append(n.name)
        stack.extend(n.all_input_nodes)
    return list(reversed(out))


def describe_node(case: Case, node: fx.Node, bad: list[Any], compared: int, method: str = "interpreter") -> NodeDivergence:
    src = node.meta.get("graphdbg_source") or {}
    modules = case.dump.manifest.graph.node_modules if case.dump is not None else {}
    errs = [m.max_abs_error for m in bad if m.max_abs_error is not None]
    rels = [m.max_rel_error for m in bad if m.max_rel_error is not None]
    return NodeDivergence(node=node.name, target=target_name(node),
                          source=f"{src['file']}:{src['line']}" if src.get("file") else None, code=src.get("code"),
                          module=modules.get(node.name), max_abs_error=max(errs) if errs else None,
                          max_rel_error=max(rels) if rels else None, method=method, compared=compared)
