"""Judging what a graph writes in place: inputs and attributes compared against eager's copies,
and gradients compared against eager's on the same saved tensors.

    >>> compare_mutations(["p"], [torch.ones(2)], [torch.zeros(2)])[0].describe()
    'input 0 (p) after mutation: max abs error 1, ...'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from graphdbg.judge.accuracy import BY_DTYPE, OutputMismatch, Tolerance, compare_value


@dataclass
class InputMismatch(OutputMismatch):
    """A mutated input (or attribute) that ends up different from eager's copy of it."""

    name: str = ""
    what: str = "input"

    def describe(self) -> str:
        label = f"{self.what} {self.index} ({self.name}) after mutation"
        return f"{label}: " + OutputMismatch.describe(self).split(": ", 1)[1]  # every dtype's wording, one place


@dataclass
class GradientMismatch(OutputMismatch):
    """A backward output (a gradient) off eager's on the same saved tensors and tangents."""

    name: str = ""
    what: str = "gradient"

    def describe(self) -> str:
        return f"gradient {self.index} ({self.name}): " + OutputMismatch.describe(self).split(": ", 1)[1]


def compare_mutations(names: list[str], expected: list[Any], actual: list[Any], *, tol: Tolerance = BY_DTYPE,
                      only: set[int] | None = None) -> list[InputMismatch]:
    """Inputs whose value after the compiled call differs from eager's copy after the eager call.

        >>> compare_mutations(["p"], [torch.ones(2)], [torch.zeros(2)])[0].describe()
        'input 0 (p) after mutation: max abs error 1, ...'
    """
    bad: list[InputMismatch] = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        if only is not None and i not in only:
            continue
        if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
            continue
        m = compare_value(i, e.detach(), a.detach(), tol=tol)
        if m is not None:
            bad.append(InputMismatch(**m.to_dict(), name=names[i] if i < len(names) else str(i)))
    return bad


def mutation_mismatches(gm: fx.GraphModule | None, expected: list[Any], actual: list[Any], *,
                        tol: Tolerance = BY_DTYPE, expected_attrs: dict[str, torch.Tensor] | None = None,
                        actual_attrs: dict[str, torch.Tensor] | None = None) -> list[InputMismatch]:
    """``compare_mutations`` over what ``gm`` writes in place: its inputs, and the attributes
    (an optimizer's parameters and states, which Dynamo keeps as ``get_attr``) given here."""
    if gm is None:
        return []
    written, attrs = written_state(gm)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    bad = compare_mutations(names, expected, actual, tol=tol, only=written) if written else []
    if attrs and expected_attrs is not None and actual_attrs is not None:
        keys = [k for k in attrs if k in expected_attrs and k in actual_attrs]
        for m in compare_mutations(keys, [expected_attrs[k] for k in keys], [actual_attrs[k] for k in keys],
                                   tol=tol):
            m.what, m.index = "attr", len(names) + m.index
            bad.append(m)
    return bad


def mutated_inputs(gm: fx.GraphModule) -> set[int]:
    """Indices of placeholders an in-place op of ``gm`` writes to (``add_``, ``_foreach_mul_``, ``copy_``)."""
    return written_state(gm)[0]


def written_state(gm: fx.GraphModule) -> tuple[set[int], list[str]]:
    """(indices of the placeholders, names of the ``get_attr`` tensors) that ``gm`` writes in place."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    written: set[int] = set()
    attrs: list[str] = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or not _in_place(node):
            continue
        first = node.args[0] if node.args else None
        for arg in (first if isinstance(first, (list, tuple)) else [first]):
            root = _alias_root(arg)
            if root in index:
                written.add(index[root])
            elif isinstance(root, fx.Node) and root.op == "get_attr" and str(root.target) not in attrs:
                attrs.append(str(root.target))
    return written, attrs


def attrs_before_call(gm: fx.GraphModule | None, attrs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of the attributes ``gm`` writes, taken from ``attrs`` (the live ones) before a call."""
    if gm is None:
        return {}
    names = written_state(gm)[1]
    return {k: attrs[k].detach().clone() for k in names if isinstance(attrs.get(k), torch.Tensor)}


def load_attrs(gm: fx.GraphModule, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Write ``values`` into ``gm``'s attributes in place; returns those attributes (live)."""
    live = {}
    with torch.no_grad():
        for name, value in values.items():
            obj: Any = gm
            for part in name.split("."):
                obj = getattr(obj, part)
            obj.copy_(value)
            live[name] = obj
    return live


def _in_place(node: fx.Node) -> bool:
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name == "setitem"  # x[i] = v


_VIEWS = {"view", "reshape", "transpose", "t", "permute", "narrow", "select", "expand", "__getitem__", "getitem",
          "unsqueeze", "squeeze", "as_strided", "unbind", "split", "chunk", "flatten", "view_as", "contiguous", "alias"}


def _alias_root(arg: Any) -> Any:
    """The placeholder or attribute a view chain starts from (``p.view(-1).add_`` writes to ``p``)."""
    seen = 0
    while isinstance(arg, fx.Node) and arg.op not in ("placeholder", "get_attr") and seen < 16:
        name = arg.target if isinstance(arg.target, str) else getattr(arg.target, "__name__", "")
        if name.split(".")[0] not in _VIEWS or not arg.args:
            return None
        arg, seen = arg.args[0], seen + 1
        if isinstance(arg, (list, tuple)):
            return None
    return arg
