"""A candidate is a subset of the original graph; ``OriginalGraph.build`` turns one into a runnable Case.

Every candidate the shrinker tries is described relative to the graph it started from: which
compute nodes it keeps, which of them it returns, which scalar inputs it inlines and how it
narrows its tensor inputs. A kept node whose argument was dropped reads that argument's real
value (recorded once by ``ValueRecorder``) as a new graph input, so cutting the graph anywhere
gives a graph that computes exactly what the original computed there.

    >>> original = OriginalGraph.of(case)
    >>> cand = Candidate(keep=frozenset({"gelu"}))
    >>> small = original.build(cand)          # placeholder up_1 -> gelu -> output
    >>> [n.op for n in small.gm.graph.nodes]
    ['placeholder', 'call_function', 'output']
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from graphdbg.case import Case
from graphdbg.replay.graph_meta import stack_trace_from_source
from graphdbg.replay.values import COMPUTE_OPS, record_values
from graphdbg.store.specs import SymSpec, TensorSpec

# values a graph input can hold in a dump (a tuple from split(), say, can't: its producer stays)
_INPUTABLE = (torch.Tensor, bool, int, float)


@dataclass(frozen=True)
class Candidate:
    keep: frozenset[str]
    outputs: tuple[str, ...] | None = None  # None: every kept node no kept node uses
    inline: frozenset[str] = frozenset()  # scalar inputs written into the graph as literals
    narrow: tuple[tuple[str, tuple[int, ...]], ...] = ()  # input name -> shape it is cut down to

    def with_(self, **changes: Any) -> Candidate:
        return Candidate(**{**self.__dict__, **changes})


@dataclass
class OriginalGraph:
    """The graph minification started from, with every node's value on its inputs."""

    case: Case
    values: dict[str, Any]
    nodes: list[fx.Node] = field(default_factory=list)
    by_name: dict[str, fx.Node] = field(default_factory=dict)
    index: dict[str, int] = field(default_factory=dict)
    size_symbols: dict[str, str] = field(default_factory=dict)  # size symbol (s77) -> the placeholder holding it

    @classmethod
    def of(cls, case: Case, values: dict[str, Any] | None = None) -> OriginalGraph:
        """``values``: every node's value, recorded elsewhere (minify's sandboxed worker);
        None: recorded here, in one eager run of the graph."""
        grad = case.dump is not None and case.dump.manifest.grad_enabled
        if values is None:
            values = record_values(case.gm, list(case.inputs), grad=grad)
        nodes = list(case.gm.graph.nodes)
        return cls(case=case, values=values, nodes=nodes, by_name={n.name: n for n in nodes},
                   index={n.name: i for i, n in enumerate(nodes)}, size_symbols=_size_symbols(nodes))

    @property
    def compute(self) -> list[str]:
        return [n.name for n in self.nodes if n.op in COMPUTE_OPS]

    def initial(self) -> Candidate:
        out = self.nodes[-1]
        outputs: list[str] = []
        fx.node.map_arg(out.args, lambda n: outputs.append(n.name) or n)
        return Candidate(keep=frozenset(self.compute), outputs=tuple(dict.fromkeys(outputs)))

    def order(self, names: Any) -> list[str]:
        return sorted(names, key=self.index.__getitem__)

    # ---------------------------------------------------------------------------------
    def resolve(self, cand: Candidate) -> tuple[list[str], list[str], list[str]] | None:
        """(inputs, live nodes, outputs) in graph order, or None for an empty graph."""
        keep = set(cand.keep)
        # A value that can't be an input (a tuple, None) pulls its producer back in.
        changed = True
        while changed:
            changed = False
            for name in list(keep):
                for arg in self.by_name[name].all_input_nodes:
                    if arg.name not in keep and arg.op != "placeholder" and not isinstance(self.values.get(arg.name), _INPUTABLE):
                        keep.add(arg.name)
                        changed = True
        if cand.outputs is None:
            used = {a.name for k in keep for a in self.by_name[k].all_input_nodes}
            outputs = [k for k in self.order(keep) if k not in used]
        else:
            outputs = [o for o in cand.outputs if o in keep or self.by_name[o].op == "placeholder"]
        # outputs that hold no tensor (None from an in-place op, a tuple) say nothing a test can check
        outputs = [o for o in outputs if isinstance(self.values.get(o), (torch.Tensor, int, float, bool))]
        # Nodes nothing reads are there for their effect (stream.wait_stream, copy_, set_stream):
        # kept ones stay, or a failure that is about the effect could never be isolated.
        effects = [k for k in keep if not self.by_name[k].users]
        if not outputs and not effects:
            return None
        live: set[str] = set()
        stack = [o for o in outputs if o in keep] + effects
        while stack:
            name = stack.pop()
            if name in live:
                continue
            live.add(name)
            stack.extend(a.name for a in self.by_name[name].all_input_nodes if a.name in keep)
        inputs = {a.name for k in live for a in self.by_name[k].all_input_nodes if a.name not in live}
        inputs |= {o for o in outputs if o not in keep}
        return self.order(inputs), self.order(live), outputs

    def build(self, cand: Candidate) -> Case | None:
        """The Case for ``cand``; None when it leaves nothing to run."""
        resolved = self.resolve(cand)
        if resolved is None:
            return None
        inputs, live, outputs = resolved
        inputs, keep_symbolic = self._with_size_symbols(inputs)
        narrow = dict(cand.narrow)
        graph = fx.Graph()
        env: dict[str, Any] = {}
        values: list[Any] = []
        for name in inputs:
            value = self.values[name]
            if name in cand.inline and name not in keep_symbolic and isinstance(value, (bool, int, float)):
                env[name] = value
                continue
            if name in narrow and isinstance(value, torch.Tensor):
                value = value[tuple(slice(0, d) for d in narrow[name])].clone()
            ph = graph.placeholder(name)
            _describe_placeholder(ph, self.by_name[name], value)
            env[name] = ph
            values.append(value)
        for name in live:
            node = self.by_name[name]
            new = graph.node_copy(node, lambda n: env[n.name])
            stack_trace_from_source(new)  # print_readable's '# File:' comments, as the dump had them
            env[name] = new
        result = tuple(env[o] for o in outputs)
        graph.output(result)
        gm = fx.GraphModule(self.case.gm, graph)
        return Case(gm=gm, inputs=values, device=self.case.device, stand_ins=list(self.case.stand_ins),
                    dump=self.case.dump, modified=True)


    def _with_size_symbols(self, inputs: list[str]) -> tuple[list[str], set[str]]:
        """``inputs`` plus the placeholders of the size symbols their symbolic annotations use
        (a cut graph keeps taking ``Sym(s77)`` as Dynamo's graphs do, so its sizes stay
        symbolic when it is traced and saved), and the names of those size placeholders."""
        if not self.size_symbols:
            return inputs, set()
        used = {sym for name in inputs for sym in symbols_of(_symbolic_spec(self.by_name[name]))}
        keep = {self.size_symbols[sym] for sym in used if sym in self.size_symbols}
        return self.order(set(inputs) | keep), keep


_SYMBOL = re.compile(r"[A-Za-z_]\w*")


def _symbolic_spec(node: fx.Node) -> Any:
    """The annotation of ``node`` as captured, sizes symbolic (``f32[s77, 32]``, ``Sym(s77)``)."""
    return node.meta.get("graphdbg_symbolic_spec", node.meta.get("graphdbg_spec"))


def symbols_of(spec: Any) -> set[str]:
    """The size symbols an annotation uses: ``{"s77", "s27"}`` for ``f32[s77, 8*s27]``."""

    if isinstance(spec, TensorSpec):
        dims = [d for d in [*spec.shape, *(spec.stride or [])] if isinstance(d, str)]
    elif isinstance(spec, SymSpec):
        dims = [spec.expr]
    else:
        return set()
    return {m for d in dims for m in _SYMBOL.findall(d)}


def has_symbolic_sizes(gm: fx.GraphModule) -> bool:
    """Whether ``gm``'s inputs were captured with symbolic sizes (a dynamic-shape graph)."""
    return any(symbols_of(_symbolic_spec(n)) for n in gm.graph.nodes if n.op == "placeholder")


def _size_symbols(nodes: list[fx.Node]) -> dict[str, str]:
    """Each size symbol a placeholder holds (``s77: "Sym(s77)"``) -> that placeholder's name."""

    out = {}
    for n in nodes:
        spec = _symbolic_spec(n)
        if n.op == "placeholder" and isinstance(spec, SymSpec) and spec.expr.isidentifier():
            out[spec.expr] = n.name
    return out


def _describe_placeholder(ph: fx.Node, original: fx.Node, value: Any) -> None:
    """The meta a dump's printer and the graph hash read: spec, example value, source line, and
    the symbolic annotation where the original had one (``replay.retrace.as_captured`` then traces
    those dims dynamic, as they were captured)."""

    for key in ("graphdbg_source", "nn_module_stack", "stack_trace"):
        if key in original.meta:
            ph.meta[key] = copy.copy(original.meta[key])
    symbolic = _symbolic_spec(original)
    if symbols_of(symbolic) and (isinstance(symbolic, SymSpec) and isinstance(value, int)
                                 or isinstance(value, torch.Tensor) and len(symbolic.shape) == value.dim()):
        ph.meta["graphdbg_symbolic_spec"] = symbolic
    if isinstance(value, torch.Tensor):
        ph.meta["graphdbg_spec"] = TensorSpec.of(value)
        ph.meta["example_value"] = value
        ph.meta["val"] = value
    else:
        ph.meta["example_value"] = value
