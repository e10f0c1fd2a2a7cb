"""Inputs for a graph that came without any: made from its annotations, with a seed.

A printed graph says only ``l_input_: "i64[1]"``. Random int64s would index far outside an
embedding table, so each integer input is first traced to what it indexes (embedding,
``index_select``, ``gather``, advanced indexing ``w[topk_ids]``, ``buf[loc] = v``...), through
views and constant shifts and into nested graphs, and gets values inside that dimension. An
input the graph compares against constants (``x >= 75968``, ``x < 94960``: a vocab shard) gets
values in that range. Offsets (``cu_seqlens``, ``query_start_loc``) start at 0, never decrease
and end at the number of tokens; masks are fair coins; floats are small normals.

    >>> plans = plan_inputs(gm)                 # what each input will be, nothing allocated yet
    >>> plans[0].how
    'integers in [0, 18992): indexes dim 0 of torch.nn.functional.embedding(..., weight bf16[18992, 2048])'
    >>> values, stand_ins = synthesize(plans, torch.device("cuda"), seed=0)

Values are made on the target device directly (weights can be many GB). A tensor past
``random_limit_bytes`` is zeros, which costs nothing to allocate on the CPU until touched.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import mmap
import operator
import re
import zlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.judge.op_names import call_name, op_name
from graphdbg.rebuild.inputs import StandIn
from graphdbg.rebuild.int_uses import (
    FLIPPED,
    INDEX_FUNCTIONS,
    INDEX_METHODS,
    SAME_VALUES_FUNCTIONS,
    SAME_VALUES_METHODS,
    SHIFTS,
    SUBSCRIPT_FUNCTIONS,
    SUBSCRIPT_METHODS,
    settle,
    tested_bound,
)
from graphdbg.rebuild.memory_budget import check_fits, tensor_bytes
from graphdbg.store.specs import SymSpec, TensorSpec

__all__ = ["InputPlan", "plan_inputs", "synthesize", "planned_bytes", "FLOAT_STD", "DEFAULT_SYMBOL_SIZE"]

FLOAT_STD = 0.1
DEFAULT_SYMBOL_SIZE = 8  # a dynamic dim nothing pins down: small, and not 0 or 1 (which Dynamo specialises)
FALLBACK_INT_RANGE = (0, 8)  # integers whose use is unknown: small non-negative, valid as an index into most things
_OFFSET_NAME = re.compile(r"cu_seqlens|query_start_loc|start_loc|indptr|offsets")
_TOKEN_NAME = re.compile(r"hidden_states|input_ids|positions|l_input_|l_x_")


@dataclass
class InputPlan:
    """What one input will be: its spec and how its values are chosen (``how`` says why)."""

    name: str
    spec: TensorSpec | SymSpec | None
    kind: str  # "index" | "range" | "offsets" | "mask" | "normal" | "integers" | "symint" | "none"
    low: int = 0
    high: int = 0
    how: str = ""
    shrunk_from: str | None = None  # the annotation before the input was cut to the slots the graph reads
    shrunk_why: str = ""  # which slots the graph reads, said as the stand-in's detail


def plan_inputs(gm: fx.GraphModule, made_up: set[str] | None = None) -> list[InputPlan]:
    """One plan per placeholder of ``gm`` (in order), from annotations and how the graph uses each.

    ``made_up`` names the inputs graphdbg will make (default: all). Only those are shrunk to
    the slots the graph reads: an input indexed by stored, real indices keeps its size.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    env = symbol_sizes(placeholders)
    tokens = _token_count(placeholders, env)
    plans = []
    for node in placeholders:
        spec = node.meta.get("graphdbg_spec")
        plans.append(_shrunk(node, _plan(node, spec, gm, env, tokens)))
    _shrink_indexed(gm, placeholders, plans, env, made_up)
    return plans


def _shrunk(node: fx.Node, plan: InputPlan) -> InputPlan:
    """A cache read only at constant slots of its first dim (``mamba_cache[0]``: this layer's
    slice of a 36-layer cache) is made with just those slots: the values the graph reads are
    the same, and a 4.8 GiB input becomes 134 MiB."""
    if not _cuttable(plan):
        return plan
    slots = _constant_slots(node)
    if slots is not None and slots < plan.spec.shape[0]:
        _cut(plan, slots, f"the graph reads only the first {slots} slots of dim 0",
             f"the graph reads only slots [0, {slots}) of dim 0")
    return plan


def _cuttable(plan: InputPlan) -> bool:
    """An input graphdbg makes up whose dim 0 has a known size: one it may make with fewer slots."""
    spec = plan.spec
    return (plan.kind in ("normal", "mask", "integers") and isinstance(spec, TensorSpec) and bool(spec.shape)
            and isinstance(spec.shape[0], int))


def _cut(plan: InputPlan, slots: int, why: str, how: str) -> None:
    """Make ``plan``'s input with ``slots`` slots of dim 0; ``why`` becomes the stand-in's detail."""
    spec = plan.spec
    plan.spec = dataclasses.replace(spec, shape=[slots, *spec.shape[1:]])
    plan.shrunk_from = spec.annotation()
    plan.shrunk_why = why
    plan.how += f"; shrunk from {spec.annotation()}: {how}"


# A cache read through indices graphdbg makes itself -------------------------------------

_KEEPS_INDEX = {"long", "int", "to", "contiguous", "view", "reshape", "flatten", "clone", "detach", "_to_copy", "alias",
                "_unsafe_view"}


def _shrink_indexed(gm: fx.GraphModule, placeholders: list[fx.Node], plans: list[InputPlan], env: dict[str, int],
                    made_up: set[str] | None) -> None:
    """A cache used only at dim 0 through index inputs that graphdbg synthesises itself
    (``k_buffer[out_cache_loc] = k``, ``cache.index_select(0, cache_indices)``), in the graph or
    the nested graphs it calls, is made with as many slots as the largest such index has
    elements, and those indices are drawn in [0, slots): the graph does the same work on a
    1.5 GiB KV buffer cut to a few rows."""
    by_node = dict(zip(placeholders, plans))
    origins = {p: p for p in placeholders}
    for node, plan in by_node.items():
        spec = plan.spec
        if not _cuttable(plan) or (made_up is not None and plan.name not in made_up):
            continue
        indexers: set[fx.Node] = set()
        if not node.users or not _read_at_dim0(node, gm, origins, indexers) or not indexers:
            continue
        index_plans = [by_node[q] for q in indexers]
        if any(p.kind != "index" or p.low != 0 or not isinstance(p.spec, TensorSpec)
               or (made_up is not None and p.name not in made_up) for p in index_plans):
            continue
        slots = max(max(1, math.prod(p.spec.concrete_shape(_with_defaults(p.spec, env)))) for p in index_plans)
        if slots >= spec.shape[0]:
            continue
        names = ", ".join(sorted(p.name for p in index_plans))
        _cut(plan, slots, f"the graph reads and writes it only at dim 0 through {names}, made in [0, {slots})",
             f"used only through {names} at dim 0")
        for p in index_plans:
            if p.high > slots:
                p.high = slots
                p.how = f"integers in [0, {slots}): indexes dim 0 of {plan.name} (shrunk from {spec.shape[0]} slots)"


def _index_origin(value: Any, origins: dict[fx.Node, fx.Node]) -> fx.Node | None:
    """The outer placeholder whose values ``value`` holds unchanged (through casts and views)."""
    for _ in range(64):
        if not isinstance(value, fx.Node):
            return None
        if value in origins:
            return origins[value]
        name = call_name(value)
        if name not in _KEEPS_INDEX or not value.args:
            return None
        value = value.args[0]
    return None


def _read_at_dim0(node: fx.Node, gm: fx.GraphModule, origins: dict[fx.Node, fx.Node], indexers: set[fx.Node]) -> bool:
    """True when every use of ``node`` (here and in the nested graphs it is passed to) indexes
    its dim 0 with a tensor holding an input's values; those inputs are added to ``indexers``."""
    for user in node.users:
        if user.op == "call_module":
            sub = gm.get_submodule(str(user.target))
            if not isinstance(sub, fx.GraphModule) or user.kwargs:
                return False
            inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
            inner_origins = {}
            for i, arg in enumerate(user.args[:len(inner)]):
                found = _index_origin(arg, origins)
                if found is not None:
                    inner_origins[inner[i]] = found
            for i, arg in enumerate(user.args):
                if arg is node and (i >= len(inner) or not _read_at_dim0(inner[i], sub, inner_origins, indexers)):
                    return False
            continue
        found = _index_origin(_dim0_index(node, user), origins)
        if found is None:
            return False
        indexers.add(found)
    return True


def _dim0_index(node: fx.Node, user: fx.Node) -> Any:
    """The index ``user`` applies to dim 0 of ``node`` (``node[i]``, ``node[i] = v``,
    ``node.index_select(0, i)``, ``node.index_copy_(0, i, v)``, ``node.index_put_((i,), v)``), when
    that is all ``user`` does with ``node``; else None."""
    args, kwargs = user.args, user.kwargs
    if not args or args[0] is not node or any(a is node for a in args[1:]) or kwargs:
        return None
    name = call_name(user)
    if name in SUBSCRIPT_FUNCTIONS and len(args) >= 2:
        index = args[1]
        first = index[0] if isinstance(index, (tuple, list)) and index else index
        rest = list(index[1:]) if isinstance(index, (tuple, list)) else []
        if isinstance(first, fx.Node) and not _nodes_in(rest) and (name != "getitem" or len(args) == 2):
            return first
        return None
    if name in ("index_select", "index_copy", "index_copy_") and len(args) >= 3 and args[1] == 0:
        return args[2]
    return None


def _constant_slots(node: fx.Node) -> int | None:
    """One more than the largest constant index the graph reads ``node`` at on dim 0, when it
    reads it only that way (``x[0]``, ``x[3, :, 1]``); else None."""
    top = -1
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem or user.args[0] is not node:
            return None
        index = user.args[1]
        first = index[0] if isinstance(index, tuple) and index else index
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            return None
        top = max(top, first)
    return top + 1 if top >= 0 else None


def symbol_sizes(placeholders: list[fx.Node]) -> dict[str, int]:
    """A value for every size symbol the annotations use (none of them has a recorded hint)."""
    env: dict[str, int] = {}
    for node in placeholders:
        spec = node.meta.get("graphdbg_spec")
        dims = spec.shape + (spec.stride or []) if isinstance(spec, TensorSpec) else [spec.expr] if isinstance(spec, SymSpec) else []
        for d in dims:
            if isinstance(d, str):
                for name in _names_in(d):
                    env.setdefault(name, DEFAULT_SYMBOL_SIZE)
    return env


def _names_in(expr: str) -> list[str]:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise GraphdbgError(f"cannot read symbolic size {expr!r}") from None
    funcs = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in funcs]


def _token_count(placeholders: list[fx.Node], env: dict[str, int]) -> int | None:
    for node in placeholders:
        spec = node.meta.get("graphdbg_spec")
        if isinstance(spec, TensorSpec) and spec.shape and _TOKEN_NAME.search(node.name):
            return spec.concrete_shape(env)[0]
    return None


def _plan(node: fx.Node, spec: Any, gm: fx.GraphModule, env: dict[str, int], tokens: int | None) -> InputPlan:
    name = node.name
    if isinstance(spec, SymSpec):
        value = spec.hint if spec.hint is not None else env.get(spec.expr, DEFAULT_SYMBOL_SIZE)
        return InputPlan(name, spec, "symint", int(value), int(value), f"{spec.expr} = {value}")
    if not isinstance(spec, TensorSpec):
        return InputPlan(name, None, "none", how="no annotation: passed as None")
    dtype = spec.torch_dtype
    if dtype == torch.bool:
        return InputPlan(name, spec, "mask", how="mask: each element True with probability 1/2")
    if dtype.is_floating_point or dtype.is_complex:
        return InputPlan(name, spec, "normal", how=f"normal(0, {FLOAT_STD})")
    shape = spec.concrete_shape(env)
    uses = IndexUses()
    uses.follow(node, gm, 0)
    lo_dtype, hi_dtype = _dtype_range(dtype)
    if uses.index:
        lo = max(r[0] for r in uses.index)
        hi = min(r[1] for r in uses.index)
        why = uses.index_why[0]
        if hi > 0:
            lo = max(lo, 0)  # negative indices are legal, but a real program's indices are not
        if uses.has_range() and max(lo, uses.low) < min(hi, uses.high):
            lo, hi = max(lo, uses.low), min(hi, uses.high)
            why += f", within the range the graph tests ({uses.range_why()})"
        if lo < hi:
            return InputPlan(name, spec, "index", max(lo, lo_dtype), min(hi, hi_dtype), f"integers in [{lo}, {hi}): {why}")
    if uses.has_range():
        return InputPlan(name, spec, "range", max(uses.low, lo_dtype), min(uses.high, hi_dtype),
                         f"integers in [{uses.low}, {uses.high}): the range the graph tests ({uses.range_why()})")
    if uses.low is not None and uses.high is None:
        return InputPlan(name, spec, "range", uses.low, uses.low + 8, f"integers in [{uses.low}, {uses.low + 8}): the graph tests >= {uses.low}")
    if len(shape) == 1 and shape[0] >= 2 and _OFFSET_NAME.search(name):
        total = tokens if tokens is not None else shape[0] - 1
        return InputPlan(name, spec, "offsets", 0, total,
                         f"offsets: 0 to {total} tokens over {shape[0] - 1} sequences, nondecreasing")
    lo, hi = FALLBACK_INT_RANGE
    return InputPlan(name, spec, "integers", lo, min(hi, hi_dtype), f"integers in [{lo}, {hi}): no indexing use found")


def _dtype_range(dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    return int(info.min), int(info.max) + 1


# How an integer input is used ---------------------------------------------------------

_COMPARE = {operator.ge: "ge", operator.gt: "gt", operator.lt: "lt", operator.le: "le"}


class IndexUses:
    """Walks the users of one integer value: what it indexes (bounds) and what it is compared with."""

    def __init__(self) -> None:
        self.index: list[tuple[int, int]] = []
        self.index_why: list[str] = []
        self.low: int | None = None
        self.high: int | None = None
        self._why: list[str] = []
        self._tests: dict[fx.Node, tuple[str, int, str]] = {}
        self._seen: set[tuple[int, int]] = set()

    def has_range(self) -> bool:
        return self.low is not None and self.high is not None and self.low < self.high

    def range_why(self) -> str:
        return ", ".join(self._why)

    def follow(self, node: fx.Node, gm: fx.GraphModule, offset: int) -> None:
        """``node`` holds the input's values plus ``offset``."""
        if (id(node), offset) in self._seen or len(self._seen) > 10_000:
            return
        self._seen.add((id(node), offset))
        for user in list(node.users):
            self._use(node, user, gm, offset)

    def _bound(self, size: Any, offset: int, why: str) -> None:
        if isinstance(size, int) and size > 0:
            self.index.append((-offset, size - offset))
            self.index_why.append(why)

    def _use(self, node: fx.Node, user: fx.Node, gm: fx.GraphModule, offset: int) -> None:
        if user.op == "call_module":
            self._use_in_module(node, user, gm, offset)
        elif user.op == "call_method":
            self._use_in_method(node, user, gm, offset)
        elif user.op == "call_function":
            self._use_in_function(node, user, gm, offset)

    def _use_in_module(self, node: fx.Node, user: fx.Node, gm: fx.GraphModule, offset: int) -> None:
        """A nested GraphModule called with ``node``: follow its placeholder."""
        sub = gm.get_submodule(str(user.target))
        if isinstance(sub, fx.GraphModule):
            inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for i, a in enumerate(user.args):
                if a is node and i < len(inner):
                    self.follow(inner[i], sub, offset)

    def _use_in_method(self, node: fx.Node, user: fx.Node, gm: fx.GraphModule, offset: int) -> None:
        """``this.name(*args)``: the same values again, or an index into ``this``."""
        name = str(user.target)
        args = user.args[1:]  # after self
        this = user.args[0]
        if name in SAME_VALUES_METHODS and this is node:
            self.follow(user, gm, offset)
        elif name in INDEX_METHODS and len(args) >= 2 and args[1] is node:
            dim = args[0] if isinstance(args[0], int) else 0
            self._bound(_dim_of(this, dim), offset, f"indexes dim {dim} of {_describe(this)}.{name}")
        elif name in SUBSCRIPT_METHODS and args and isinstance(args[0], (tuple, list)):
            self._indices(this, args[0], node, offset, name)

    def _use_in_function(self, node: fx.Node, user: fx.Node, gm: fx.GraphModule, offset: int) -> None:
        """``fn(*args)``: the same values, an index (embedding, gather, []), a shift, or a test."""
        name = op_name(user.target)
        args = user.args
        if name in SAME_VALUES_FUNCTIONS and args and args[0] is node:
            self.follow(user, gm, offset)
        elif name == "getitem" and len(args) == 2 and args[0] is node and not _nodes_in(args[1]):
            self.follow(user, gm, offset)  # a slice of the values: x[:2], x[0]
        elif name == "embedding":
            # F.embedding(input, weight) vs torch.embedding / aten.embedding(weight, indices)
            weight = user.kwargs.get("weight")
            if weight is None and len(args) >= 2:
                weight = args[1] if args[0] is node else args[0]
            self._bound(_dim_of(weight, 0), offset, f"indexes dim 0 of embedding(..., weight {_describe(weight)})")
        elif name in INDEX_FUNCTIONS and len(args) >= 3 and args[2] is node:
            dim = args[1] if isinstance(args[1], int) else 0
            self._bound(_dim_of(args[0], dim), offset, f"indexes dim {dim} of {_describe(args[0])} in {name}")
        elif name in ("getitem", "setitem") and len(args) >= 2 and args[0] is not node:
            self._indices(args[0], args[1], node, offset, "[]" if name == "getitem" else "[] =")
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_") and len(args) >= 2:
            self._indices(args[0], args[1], node, offset, name)
        elif name in SHIFTS and len(args) == 2:
            self._shift(node, user, gm, offset, name)
        elif user.target in _COMPARE and len(args) == 2:
            self._test(node, user, offset)

    def _shift(self, node: fx.Node, user: fx.Node, gm: fx.GraphModule, offset: int, name: str) -> None:
        """``x + c``, ``x - c``: the same values shifted; ``c - x`` reverses the order and is not followed."""
        args = user.args
        other = args[1] if args[0] is node else args[0]
        if not isinstance(other, int) or isinstance(other, bool):
            return
        if name in ("sub", "isub") and args[1] is not node:
            return
        shift = other if name in ("add", "iadd") else -other
        self.follow(user, gm, offset + shift)

    def _test(self, node: fx.Node, user: fx.Node, offset: int) -> None:
        """``x >= c`` and the like: a bound the graph tests the values against."""
        args = user.args
        kind = _COMPARE[user.target] if args[0] is node else FLIPPED[_COMPARE[user.target]]
        other = args[1] if args[0] is node else args[0]
        if isinstance(other, int) and not isinstance(other, bool):
            self._tests[user] = (*tested_bound(kind, other - offset), f"{user.name}: {_COMPARE_TEXT[kind]} {other}")
            low, high = settle(self._tests, lambda n: [next((a for a in u.args if a is not n), None) for u in n.users
                                                        if u.op == "call_function" and u.target is operator.and_])
            self.low, self.high = (low[1] if low else None), (high[1] if high else None)
            self._why = [t[2] for t in (low, high) if t is not None]

    def _indices(self, base: Any, index: Any, node: fx.Node, offset: int, what: str) -> None:
        items = list(index) if isinstance(index, (tuple, list)) else [index]
        dim = 0
        for item in items:
            if item is Ellipsis:
                return  # dims after ... count from the end; the shape alone can't place them reliably
            if item is node:
                self._bound(_dim_of(base, dim), offset, f"indexes dim {dim} of {_describe(base)}{what}")
                return
            if item is None:
                continue
            dim += 1


_COMPARE_TEXT = {"ge": ">=", "gt": ">", "lt": "<", "le": "<="}


def _nodes_in(value: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg(value, found.append)
    return found


def _dim_of(value: Any, dim: int) -> int | None:
    spec = value.meta.get("graphdbg_spec") if isinstance(value, fx.Node) else None
    if isinstance(spec, TensorSpec) and -len(spec.shape) <= dim < len(spec.shape):
        size = spec.shape[dim]
        return size if isinstance(size, int) else None
    return None


def _describe(value: Any) -> str:
    if isinstance(value, fx.Node):
        spec = value.meta.get("graphdbg_spec")
        return f"{value.name} {spec.annotation()}" if spec is not None else value.name
    return repr(value)


# Making the values --------------------------------------------------------------------

def planned_bytes(plans: list[InputPlan], device: torch.device, random_limit_bytes: int | None = None) -> int:
    """Bytes the tensors of ``plans`` will take on ``device``, before any is allocated.

    On the CPU a tensor past the random-fill limit is anonymous zero memory, which takes
    only the pages the graph touches: it counts nothing here.
    """
    limit = _random_limit(device, random_limit_bytes)
    env = {p.spec.expr: p.low for p in plans if p.kind == "symint" and isinstance(p.spec, SymSpec) and p.spec.expr.isidentifier()}
    total = 0
    for p in plans:
        if isinstance(p.spec, TensorSpec):
            n = tensor_bytes(p.spec, env, DEFAULT_SYMBOL_SIZE)
            lazy = device.type == "cpu" and n > limit and p.kind in ("normal", "mask", "integers") and p.spec.stride is None
            total += 0 if lazy else n
    return total


def _random_limit(device: torch.device, given: int | None) -> int:
    if given is not None:
        return given
    return (64 << 30) if device.type == "cuda" else (256 << 20)


def synthesize(plans: list[InputPlan], device: torch.device, *, seed: int = 0,
               random_limit_bytes: int | None = None, max_input_gb: float | None = None) -> tuple[list[Any], list[StandIn]]:
    """The values for ``plans`` on ``device``, and one ``synthesized`` stand-in per input.

    The same seed gives the same values on the same kind of device. Tensors larger than
    ``random_limit_bytes`` (default: 256 MiB on the CPU, 64 GiB on a GPU) are zeros. Inputs
    that don't fit on ``device`` (``graphdbg.rebuild.memory_budget``) raise InputsTooLarge
    before anything is allocated.
    """
    random_limit_bytes = _random_limit(device, random_limit_bytes)
    env = {}
    for p in plans:
        if p.kind == "symint" and isinstance(p.spec, SymSpec) and p.spec.expr.isidentifier():
            env[p.spec.expr] = p.low
    check_fits(planned_bytes(plans, device, random_limit_bytes), device, max_input_gb)
    values, stand_ins = [], []
    for p in plans:
        value, detail = _make(p, device, seed, env, random_limit_bytes)
        values.append(value)
        stand_ins.append(StandIn(p.name, "synthesized", detail))
        if p.shrunk_from:
            stand_ins.append(StandIn(p.name, "shrunk", f"{p.shrunk_from} made as {p.spec.annotation()}: {p.shrunk_why}"))
    return values, stand_ins


def _make(p: InputPlan, device: torch.device, seed: int, env: dict[str, int], limit: int) -> tuple[Any, str]:
    if p.kind == "symint":
        return p.low, p.how
    if p.kind == "none":
        return None, p.how
    spec = p.spec
    assert isinstance(spec, TensorSpec)
    shape = spec.concrete_shape(_with_defaults(spec, env))
    stride = spec.concrete_stride(_with_defaults(spec, env))
    dtype = spec.torch_dtype
    if stride is not None and _is_contiguous(shape, stride):
        stride = None
    nbytes = math.prod(shape) * dtype.itemsize
    label = f"{spec.annotation()}: "
    if nbytes > limit and p.kind in ("normal", "mask", "integers"):
        # Zeros, not random: a many-GB cache filled on the CPU would take longer than the replay.
        return _zeros(shape, stride, dtype, device, nbytes), \
            label + f"zeros ({nbytes / (1 << 30):.1f} GiB is over the {limit / (1 << 20):.0f} MiB random-fill limit)"
    out = torch.empty_strided(shape, stride, dtype=dtype, device=device) if stride else torch.empty(shape, dtype=dtype, device=device)
    gen = torch.Generator(device=device).manual_seed((seed * 1_000_003 + zlib.crc32(p.name.encode())) & 0x7FFF_FFFF_FFFF)
    if p.kind == "normal":
        if dtype.is_complex:
            out.copy_(torch.randn(shape, generator=gen, dtype=dtype, device=device) * FLOAT_STD)
        elif dtype in _NORMAL_DTYPES:
            out.normal_(0.0, FLOAT_STD, generator=gen)
        else:  # float8 and the like have no normal_ kernel: drawn in float32, then rounded
            _fill_cast(out, torch.randn(shape, generator=gen, device=device) * FLOAT_STD, gen)
    elif p.kind == "mask":
        out.copy_(torch.rand(shape, generator=gen, device=device) < 0.5)
    elif p.kind == "offsets":
        n = shape[0] - 1
        cuts = [round(i * p.high / n) for i in range(n + 1)]
        out.copy_(torch.tensor(cuts, dtype=dtype))
    elif p.kind == "index" and 1 < out.numel() <= p.high - p.low <= _DISTINCT_LIMIT:
        # distinct, as a real program's slots are: a write at a repeated index keeps whichever
        # write lands last, which differs between backends and would read as a mismatch
        picked = torch.randperm(p.high - p.low, generator=gen, device=device)[:out.numel()] + p.low
        _fill_cast(out, picked.view(shape), gen)
    else:  # index, range, integers
        _fill_cast(out, torch.randint(p.low, max(p.high, p.low + 1), shape, generator=gen, device=device, dtype=torch.int64), gen)
    return out, label + p.how


_DISTINCT_LIMIT = 1 << 24  # index ranges up to this size are drawn without repeats

_NORMAL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _fill_cast(out: torch.Tensor, values: torch.Tensor, gen: torch.Generator) -> None:
    """``out`` = ``values`` in ``out``'s dtype; random bytes where no cast exists (packed float4)."""
    try:
        out.copy_(values)
    except (RuntimeError, NotImplementedError):
        raw = out.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, generator=gen, device=out.device, dtype=torch.int64))


def _zeros(shape: list[int], stride: list[int] | None, dtype: torch.dtype, device: torch.device, nbytes: int) -> torch.Tensor:
    if device.type == "cpu" and stride is None and nbytes > 0:
        # Anonymous memory is zero and costs nothing until touched: a 5 GB Mamba cache of which
        # the graph reads one slot takes that slot's pages only.
        buffer = mmap.mmap(-1, nbytes)
        return torch.frombuffer(buffer, dtype=dtype).view(shape)
    if stride is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()


def _with_defaults(spec: TensorSpec, env: dict[str, int]) -> dict[str, int]:
    full = dict(env)
    for d in spec.shape + (spec.stride or []):
        if isinstance(d, str):
            for name in _names_in(d):
                full.setdefault(name, DEFAULT_SYMBOL_SIZE)
    return full


def _is_contiguous(shape: list[int], stride: list[int]) -> bool:
    expected = 1
    for size, st in reversed(list(zip(shape, stride))):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True
