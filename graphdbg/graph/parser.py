"""Printed FX graphs back into ``GraphModule``s, by reading their AST and never running them.

A printed graph (``GraphModule.print_readable()`` output, ours or a stranger's) is Python
source, but it may come from anyone, so we treat it as data: every statement is matched
against the few shapes fx codegen emits and turned into a node; every function it names is
looked up by walking attributes from allow-listed roots. Nothing in the file is exec'd,
eval'd or compiled.

    >>> pg = parse_printed_graph('''
    ... class GraphModule(torch.nn.Module):
    ...     def forward(self, L_x_: "f32[2, 8][8, 1]cpu"):
    ...         l_x_ = L_x_
    ...         y: "f32[2, 8][8, 1]cpu" = torch.relu(l_x_);  l_x_ = None
    ...         return (y,)
    ... ''')
    >>> gm = pg.to_module()
    >>> [n.name for n in gm.graph.nodes]
    ['l_x_', 'y', 'output']

What resolves (see ``resolve_target``): paths under ``torch``, ``operator`` and ``math``
whose object is on the allow-list in ``graphdbg.graph.allow_list`` (torch ops, tensor
functions, a few named grad-mode, symbolic-size, stream and device calls), the builtins in
``ALLOWED_BUILTINS``, and the mangled globals fx codegen writes for functions it can't spell
as a ``torch.*`` path (``math_sqrt``, ``_operator_not_``,
``torch__dynamo_..._get_external_object_by_index``). Names that resolve nowhere go to the
caller's ``resolve`` hook; names that resolve to something not allowed (``torch.load``,
``torch.utils.collect_env.run``, ``torch.os``), dunders and ``DENIED_ROOTS`` never do. Method
calls and attribute reads are limited the same way (``allowed_methods``, ``ALLOWED_ATTRIBUTES``).
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib
import math
import operator
import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.fx as fx

from graphdbg.errors import GraphSourceError
from graphdbg.graph.allow_list import (
    ALLOWED_ATTRIBUTES,
    ALLOWED_BUILTINS,
    FUNCTION_MODULES,
    NAMED_FUNCTIONS,
    allow_target,
    allowed_methods,
    call_refusal,
    check_value,
    refusal,
)
from graphdbg.graph.hashing import graph_hash
from graphdbg.graph.printed_front import (
    NO_DEFAULT,
    ROOTS,
    Forward,
    Unsupported,
    annotation_text,
    class_parts,
    graph_class,
    header_lines,
)
from graphdbg.graph.printed_front import show as _show
from graphdbg.graph.source_text import dotted_name, readable_source  # noqa: F401 (readable_source: where it always was)
from graphdbg.store.specs import TensorSpec, parse_annotation

__all__ = ["AttrConstruction", "PrintedGraph", "parse_module_class", "parse_printed_graph", "resolve_target", "mangled_name"]

ALLOWED_ROOTS: dict[str, types.ModuleType] = dict(zip(ROOTS, (torch, operator, operator, math)))  # what the front end lets a file import

# printed_front.CONSTANT_NAMES, as values
CONSTANT_NAMES: dict[str, Any] = {"inf": math.inf, "nan": math.nan, "Ellipsis": ..., "NoneType": type(None)}

# Roots refused before the user's hook is consulted, so a catch-all hook can't let them in.
DENIED_ROOTS = frozenset({"os", "posix", "nt", "subprocess", "sys", "shutil", "importlib", "builtins", "pickle",
                          "marshal", "ctypes", "socket", "io", "pathlib", "runpy", "code", "codeop", "signal",
                          "multiprocessing", "threading", "tempfile", "urllib", "http", "shelve", "types",
                          "inspect", "gc", "dill", "requests"} | (set(dir(builtins)) - set(ALLOWED_BUILTINS)))
# Modules under torch that a path may walk through: those holding allowed targets (see
# graph/allow_list.py), and the op namespaces. Walking elsewhere (torch.utils, torch.storage,
# torch._utils) is refused before anything there is looked up or imported.
_WALKABLE_PREFIXES = ("torch.ops", "torch._higher_order_ops")


@functools.lru_cache(maxsize=1)
def _walkable_modules() -> frozenset[str]:
    out = {"torch", "torch.nn", "torch.cuda", "torch.cuda.streams", "torch._C", "torch.amp", "torch._dynamo"}
    for path in (*FUNCTION_MODULES, *NAMED_FUNCTIONS):
        parts = path.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


def _walkable(name: str) -> bool:
    return name in _walkable_modules() or name.startswith(tuple(p + "." for p in _WALKABLE_PREFIXES)) \
        or name in _WALKABLE_PREFIXES or name in ("operator", "_operator", "math")


# fx may put a node's `custom` meta (`Annotation: {'stream': 1}`), recompute tags or extra meta
# before the stack trace on the same comment line: the source is wherever `File:` starts.
_SOURCE_COMMENT = re.compile(r"^\s*#(?:.*?\bAnnotation: (?P<annotation>\{.*?\})(?= ))?.*?\bFile: (?P<file>.+?):(?P<line>\d+) "
                             r"in (?P<fn>.+?), code: (?P<code>.*)$")
_NO_SOURCE_COMMENT = re.compile(r"^\s*#.*\bNo stacktrace found for following nodes")


class Refused(Exception):
    """A name that must never resolve, whatever the user's hook says."""


def mangled_name(qualname: str) -> str:
    """The global name fx codegen gives a function it can't spell as a torch path.

        >>> mangled_name("math.sqrt"), mangled_name("torch._dynamo.utils.foo")
        ('math_sqrt', 'torch__dynamo_utils_foo')
    """
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", qualname) or "_unnamed"
    return f"_{name}" if name[0].isdigit() else name


def _check_path(qualname: str) -> None:
    parts = qualname.split(".")
    if any(p.startswith("__") and p.endswith("__") or p == "" for p in parts):
        raise Refused(f"refusing {qualname}: dunder or empty names are never resolved")
    if parts[0] in DENIED_ROOTS:
        raise Refused(f"refusing {qualname}: not allowed in a replayed graph")


def _module_allowed(obj: Any) -> bool:
    return _walkable(getattr(obj, "__name__", "") or "")


def _check_object(qualname: str, obj: Any) -> Any:
    # Judge the object a path reached, not the path: re-exports (torch.os, torch.hub.urlopen)
    # and helpers (torch.utils.collect_env.run) are "under torch" but are not graph operations.
    why = check_value(obj)
    if why:
        raise Refused(f"refusing {qualname}: {why.split(': ', 1)[-1] if callable(obj) else why}, "
                       "not something a replayed graph may use")
    return obj


def _walk(qualname: str) -> Any:
    """Resolve a dotted path from an allowed root; LookupError if it isn't there."""
    _check_path(qualname)
    parts = qualname.split(".")
    if parts[0] not in ALLOWED_ROOTS:
        raise LookupError(qualname)
    obj: Any = ALLOWED_ROOTS[parts[0]]
    for i, part in enumerate(parts[1:], start=2):
        if isinstance(obj, types.ModuleType) and not _module_allowed(obj):
            raise Refused(f"refusing {qualname}: {'.'.join(parts[:i - 1])} holds no graph operations")
        try:
            obj = getattr(obj, part)
        except Exception:  # torch.ops raises AttributeError or RuntimeError for unknown ops
            if qualname.startswith("torch.ops.higher_order.") and i == 4 and _import_hop(part):
                obj = getattr(obj, part)
            else:
                raise LookupError(qualname) from None
        if isinstance(obj, types.ModuleType) and not _module_allowed(obj):
            raise Refused(f"refusing {qualname}: {'.'.join(parts[:i])} (module {obj.__name__}) holds no graph operations")
    if isinstance(obj, types.ModuleType):
        raise Refused(f"refusing {qualname}: a module is not a graph target")
    return _check_object(qualname, obj)


def _import_hop(name: str) -> bool:
    # Some higher-order ops register only when their module is imported (Triton's wrapper
    # is one); import those modules, which are torch's own, and look again.
    modules = {"triton_kernel_wrapper_mutation": "triton_kernel_wrap", "triton_kernel_wrapper_functional": "triton_kernel_wrap"}
    try:
        importlib.import_module(f"torch._higher_order_ops.{modules.get(name, name)}")
    except Exception:
        return False
    return hasattr(torch.ops.higher_order, name)


@functools.lru_cache(maxsize=1024)
def _unmangle(name: str) -> str | None:
    """The dotted path behind a mangled global, found by walking real attributes, or None."""
    for root in ("torch", "_operator", "operator", "math"):
        if name.startswith(root + "_"):
            found = _search(ALLOWED_ROOTS[root], root, name[len(root) + 1:], depth=6)
            if found:
                return found
    return None


def _search(obj: Any, qual: str, rest: str, depth: int) -> str | None:
    # "torch__dynamo_x_y" could be torch._dynamo.x_y or torch._dynamo_x.y: try each split,
    # longest first, keeping only those that name real attributes.
    cuts = [i for i, ch in enumerate(rest) if ch == "_" and i > 0] + [len(rest)]
    for cut in sorted(cuts, reverse=True):
        head, tail = rest[:cut], rest[cut + 1:]
        path = f"{qual}.{head}"
        try:
            _check_path(path)
        except Refused:
            continue
        child = getattr(obj, head, None)
        if child is None and isinstance(obj, types.ModuleType) and qual.startswith("torch") and _walkable(path):
            try:
                child = importlib.import_module(path)
            except Exception:
                child = None
        if child is None or isinstance(child, types.ModuleType) and not _module_allowed(child):
            continue
        if cut == len(rest):
            return path
        if depth > 0 and isinstance(child, (types.ModuleType, type)):
            found = _search(child, path, tail, depth - 1)
            if found:
                return found
    return None


def resolve_target(qualname: str) -> Any:
    """The object a printed graph means by ``qualname``, if it is allow-listed.

    Accepts dotted paths (``torch.ops.aten.add.Tensor``), allowed builtins (``getattr``),
    fx's custom builtins (``inf``, ``device``) and mangled globals (``math_sqrt``).

        >>> resolve_target("torch.ops.aten.add.Tensor")
        <OpOverload(op='aten.add', overload='Tensor')>
        >>> resolve_target("torch.load")
        Traceback (most recent call last):
        graphdbg.errors.GraphSourceError: refusing torch.load: not allowed in a replayed graph

    Raises GraphSourceError (without a location) for refused or unknown names.
    """
    try:
        return resolve_name(qualname)
    except Refused as e:
        raise GraphSourceError(str(e)) from None
    except LookupError:
        raise GraphSourceError(f"cannot resolve {qualname}") from None


def resolve_name(qualname: str) -> Any:
    if "." not in qualname:
        if qualname in ALLOWED_BUILTINS:
            return ALLOWED_BUILTINS[qualname]
        if qualname in CONSTANT_NAMES:
            return CONSTANT_NAMES[qualname]
        if qualname == "device":
            return torch.device
        _check_path(qualname)
        if qualname.startswith("builtins_") and qualname[9:] in ALLOWED_BUILTINS:
            return ALLOWED_BUILTINS[qualname[9:]]
        dotted = _unmangle(qualname)
        if dotted is None:
            raise LookupError(qualname)
        return _walk(dotted)
    return _walk(qualname)


@dataclass
class AttrConstruction:
    """One attribute a module's ``__init__`` builds, read from the source as data.

    ``self.register_buffer('_tensor_constant0', tensor([0.5, 2.]))`` reads as
    ``AttrConstruction('_tensor_constant0', 'buffer', 'tensor', ([0.5, 2.0],), {}, None, 12)``;
    ``self.w = torch.nn.Parameter(torch.randn([8, 8], dtype=torch.float32))`` as kind
    ``'parameter'``, func ``'torch.randn'``; ``self.fc = Linear(in_features=8, ...)`` as kind
    ``'module'``, func ``'Linear'``. A trailing ``.to("cuda:0")`` becomes ``device``. Arguments
    are literals (numbers, strings, lists, dtypes, devices); nothing is called.
    """

    name: str
    kind: str  # "buffer" | "parameter" | "module" | "attribute"
    func: str
    args: tuple
    kwargs: dict[str, Any]
    device: str | None
    lineno: int


@dataclass
class PrintedGraph:
    """One class of a printed graph: its forward as an ``fx.Graph``, plus nested classes.

        >>> pg = parse_printed_graph(open("rank0_0.py").read(), filename="rank0_0.py", resolve=stand_in)
        >>> sorted(pg.submodules), [n.name for n in pg.submodules["thunder_0"].graph.find_nodes(op="placeholder")]
        (['inductor_1', 'thunder_0'], ['l_input_', 'l_self_parameters_weight_'])
        >>> gm = pg.to_module(missing_attr=lambda name, spec: torch.zeros(spec.concrete_shape()))
    """

    name: str
    graph: fx.Graph
    submodules: dict[str, PrintedGraph] = field(default_factory=dict)
    attrs: dict[str, TensorSpec | None] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)
    filename: str = "<graph>"
    # What ``__init__`` builds (``parse_module_class`` only): read as data, never run.
    inits: list[AttrConstruction] = field(default_factory=list)

    def to_module(
        self,
        attr_values: Mapping[str, Any] | None = None,
        missing_attr: Callable[[str, TensorSpec | None], Any] | None = None,
    ) -> fx.GraphModule:
        """A fresh GraphModule (the graph is copied, so this can be called again).

        ``attr_values`` and ``missing_attr`` see qualified names: ``"_tensor_constant0"`` for
        this class, ``"thunder_0._tensor_constant0"`` for a nested one.
        """
        return self._build("", attr_values or {}, missing_attr)

    def graphs(self) -> list[fx.Graph]:
        """This class's forward graph and those of every nested class, outermost first."""
        out = [self.graph]
        for sub in self.submodules.values():
            out += sub.graphs()
        return out

    def structural_hash(self) -> str:
        """graph_hash of the forward, with each nested class's hash folded in by name."""
        h = hashlib.sha256(graph_hash(self.graph).encode())
        for name in sorted(self.submodules):
            h.update(name.encode())
            h.update(self.submodules[name].structural_hash().encode())
        return h.hexdigest()

    def _build(self, prefix: str, values: Mapping[str, Any], missing: Callable | None) -> fx.GraphModule:
        root = torch.nn.Module()
        children = {name: sub._build(f"{prefix}{name}.", values, missing) for name, sub in self.submodules.items()}
        for name, child in children.items():
            setattr(root, name, child)
        for target, spec in self.attrs.items():
            qualname = prefix + target
            if qualname in values:
                value = values[qualname]
            elif missing is not None:
                value = missing(qualname, spec)
            else:
                raise GraphSourceError(f"no value for attribute {qualname} of {self.name}", file=self.filename)
            *path, leaf = target.split(".")
            owner = root
            for part in path:
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            if isinstance(value, torch.nn.Module):
                owner.add_module(leaf, value)
            else:
                setattr(owner, leaf, value)
        try:  # fx generates and compiles Python for the graph: what it cannot build is bad input (exit 2)
            gm = fx.GraphModule(root, _copy_graph(self.graph), class_name=self.name)
        except (SyntaxError, ValueError, TypeError, NameError, AttributeError, RuntimeError, RecursionError) as e:
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise GraphSourceError(f"fx cannot build this graph ({type(e).__name__}: {first})", file=self.filename) from None
        # GraphModule only copies what the graph references; an unused nested class stays too.
        for name, child in children.items():
            if not hasattr(gm, name):
                gm.add_submodule(name, child)
        return gm


def _copy_graph(graph: fx.Graph) -> fx.Graph:
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        env[node] = new.node_copy(node, lambda n: env[n])
    return new


def parse_printed_graph(
    source: str, *, filename: str = "<graph>", resolve: Callable[[str], Any] | None = None
) -> PrintedGraph:
    """Read ``print_readable()`` output into a PrintedGraph, without running any of it.

        >>> pg = parse_printed_graph(text, filename="rank0_0.py",
        ...                          resolve=lambda q: my_stand_ins.get(q))
        >>> pg.graph.find_nodes(op="call_module")[0].target
        'thunder_0'

    ``resolve`` is asked for names the allow-list doesn't know (custom ops this machine
    lacks); it returns a callable, or None. Refused names never reach it. Raises
    GraphSourceError with file and line for anything that isn't a readable printed graph.
    """
    check_source_size(source, filename)
    return _Reader(source, filename, resolve).read()


MAX_SOURCE_LINES = 200_000  # about a minute of parsing (~0.2 ms a node); the corpus graphs are under 1,000 lines
MAX_SOURCE_CHARS = 64 << 20


def check_source_size(source: str, filename: str) -> None:
    """Refuse at once a file too large to be a printed graph (a hostile 1,000,000-node one)."""
    if len(source) > MAX_SOURCE_CHARS:
        raise GraphSourceError(f"{len(source)} characters is more than a printed graph graphdbg reads ({MAX_SOURCE_CHARS})", file=filename)
    lines = source.count("\n")
    if lines > MAX_SOURCE_LINES:
        raise GraphSourceError(f"{lines} lines is more than a printed graph graphdbg reads ({MAX_SOURCE_LINES})", file=filename)


def parse_module_class(
    source: str, class_name: str, *, filename: str = "<graph>", resolve: Callable[[str], Any] | None = None,
    tree: ast.Module | None = None,
) -> PrintedGraph:
    """Read one named ``nn.Module`` class of a larger script (a minifier's ``class Repro``).

        >>> pg = parse_module_class(open("repro.py").read(), "Repro", filename="repro.py")
        >>> [(c.name, c.kind, c.func) for c in pg.inits]
        [('_tensor_constant0', 'buffer', 'tensor')]
        >>> gm = pg.to_module({"_tensor_constant0": torch.tensor([0.5, 2.0])})

    Unlike ``parse_printed_graph``, the rest of the file (imports, config lines, helper
    functions, the ``__main__`` block) is not judged: it is never run, only skipped. In the
    class, ``forward`` is read as a printed graph; ``__init__`` is read into ``inits`` as data
    (see ``AttrConstruction``); other methods are ignored. ``tree`` saves a second parse when
    the caller already has the module's AST.
    """
    reader = _Reader(source, filename, resolve)
    check_source_size(source, filename)
    if tree is None:
        try:
            tree = ast.parse(source, filename=filename)
        except SyntaxError as e:
            raise reader.fail(f"not a readable Python file (truncated?): {e.msg}", e.lineno or 1) from None
    classes = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == class_name]
    if not classes:
        raise reader.fail(f"no `class {class_name}(torch.nn.Module)` in this file", 1)
    if len(classes) > 1:
        raise reader.fail(f"class {class_name} is defined {len(classes)} times", classes[1])
    return reader._read_class(classes[0], [], lenient=True)


class _Reader:
    def __init__(self, source: str, filename: str, resolve: Callable[[str], Any] | None):
        self.source, self.filename, self.hook = source, filename, resolve
        self.lines = source.splitlines()
        self.resolved: dict[str, Any] = {}

    def fail(self, message: str, where: ast.AST | int | None) -> GraphSourceError:
        line = where if isinstance(where, int) else getattr(where, "lineno", None)
        return GraphSourceError(message, file=self.filename, line=line or 1)

    def read(self) -> PrintedGraph:
        try:
            tree = ast.parse(readable_source(self.source), filename=self.filename)
        except SyntaxError as e:
            raise self.fail(f"not a readable printed graph (truncated?): {e.msg}", e.lineno or 1) from None
        try:
            cls = graph_class(tree)
        except Unsupported as e:
            raise self.fail(e.message, e.where) from None
        return self._read_class(cls, header_lines(self.lines, cls.lineno))

    def _read_class(self, cls: ast.ClassDef, header: list[str], lenient: bool = False) -> PrintedGraph:
        try:
            forward, nested, init_defs = class_parts(cls, lenient)
        except Unsupported as e:
            raise self.fail(e.message, e.where) from None
        inits = []
        for init in init_defs:  # the last one is the class's (each read: none is run)
            inits = self._read_init(init)
        submodules = {name: self._read_class(c, []) for name, c in nested.items()}
        graph, attrs = _ForwardReader(self, forward, set(nested)).read()
        return PrintedGraph(cls.name, graph, submodules, attrs, header, self.filename, inits)

    def _read_init(self, fn: ast.FunctionDef) -> list[AttrConstruction]:
        """The attributes ``__init__`` builds, as data. Only the shapes torch's minifier
        writes are accepted; anything else is an error, not something to skip, since the
        graph would then miss an attribute."""
        positional = fn.args.posonlyargs + fn.args.args
        this = positional[0].arg if positional else "self"
        out: list[AttrConstruction] = []
        for stmt in fn.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if isinstance(stmt, ast.Pass):
                continue
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
                    and isinstance(call.func.value, ast.Call) and dotted_or(call.func.value.func, "") == "super"):
                continue  # super().__init__()
            if (isinstance(call, ast.Call) and dotted_or(call.func, "") == f"{this}.register_buffer"
                    and len(call.args) >= 2 and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
                out.append(self._construction(call.args[0].value, "buffer", call.args[1], stmt))
                continue
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
                    and dotted_or(stmt.targets[0], "") == f"{this}.{stmt.targets[0].attr}"):
                value, kind = stmt.value, "attribute"
                if isinstance(value, ast.Call) and dotted_or(value.func, "") in ("torch.nn.Parameter", "nn.Parameter", "Parameter"):
                    if not value.args:
                        raise self.fail(f"Parameter without a value: {_show(stmt)}", stmt)
                    value, kind = value.args[0], "parameter"
                out.append(self._construction(stmt.targets[0].attr, kind, value, stmt))
                continue
            raise self.fail(f"unsupported statement in __init__: {_show(stmt)}", stmt)
        return out

    def _construction(self, name: str, kind: str, expr: ast.expr, stmt: ast.stmt) -> AttrConstruction:
        if name.startswith("__"):
            raise self.fail(f"refusing dunder attribute {name!r}", stmt)
        device = None
        # `<value>.to("cuda:0")`: the minifier's way of saying where a buffer or module lives.
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "to"
                and isinstance(expr.func.value, ast.Call) and len(expr.args) == 1 and not expr.keywords):
            device = self._literal(expr.args[0], stmt)
            if not isinstance(device, (str, torch.device)):
                raise self.fail(f"unsupported .to() argument in `{_show(stmt)}`", stmt)
            device, expr = str(device), expr.func.value
        if not isinstance(expr, ast.Call) or dotted_or(expr.func, None) is None:
            raise self.fail(f"unsupported value for {name}: `{_show(expr)}`", stmt)
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(k.arg is None for k in expr.keywords):
            raise self.fail(f"unsupported */** arguments in `{_show(stmt)}`", stmt)
        try:
            func = dotted_or(expr.func, "")
            _check_path(func)  # never called, but a torch.load here is no repro
            if "." in func:
                resolve_name(func)
        except LookupError:
            raise self.fail(f"cannot resolve {dotted_or(expr.func, '')} (in `{_show(stmt)}`)", stmt) from None
        except Refused as e:
            raise self.fail(f"{e} (in `{_show(stmt)}`)", stmt) from None
        args = tuple(self._literal(a, stmt) for a in expr.args)
        kwargs = {k.arg: self._literal(k.value, stmt) for k in expr.keywords}
        if kind == "attribute" and dotted_or(expr.func, "")[:1].isupper():
            kind = "module"  # `Linear(in_features=...)`: a torch.nn class, by the minifier's `from torch.nn import *`
        return AttrConstruction(name, kind, dotted_or(expr.func, ""), args, kwargs, device, stmt.lineno)

    def _literal(self, expr: ast.expr, stmt: ast.stmt) -> Any:
        """A constant argument: numbers (inf and nan too), strings, containers, dtypes, devices."""
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name) and expr.id in CONSTANT_NAMES:
            return CONSTANT_NAMES[expr.id]
        if isinstance(expr, (ast.List, ast.Tuple)):
            items = [self._literal(e, stmt) for e in expr.elts]
            return items if isinstance(expr, ast.List) else tuple(items)
        if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
            return {self._literal(k, stmt): self._literal(v, stmt) for k, v in zip(expr.keys, expr.values)}
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
            value = self._literal(expr.operand, stmt)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return -value if isinstance(expr.op, ast.USub) else value
        if isinstance(expr, ast.Attribute) and (path := dotted_or(expr, None)) is not None:
            value = self.resolve(path, expr)  # torch.float32, torch.contiguous_format
            if isinstance(value, (torch.dtype, torch.layout, torch.memory_format, int, float, bool, str)):
                return value
        if (isinstance(expr, ast.Call) and dotted_or(expr.func, "") in ("device", "torch.device")
                and all(isinstance(a, ast.Constant) for a in expr.args) and all(k.arg for k in expr.keywords)):
            try:
                return torch.device(*[a.value for a in expr.args], **{k.arg: self._literal(k.value, stmt) for k in expr.keywords})
            except Exception as e:
                raise self.fail(f"bad device literal `{_show(expr)}`: {e}", expr) from None
        raise self.fail(f"not a constant: `{_show(expr)}` (in `{_show(stmt)}`)", expr)

    def resolve(self, qualname: str, at: ast.AST) -> Any:
        if qualname in self.resolved:
            return self.resolved[qualname]
        try:
            target = resolve_name(qualname)
        except Refused as e:
            raise self.fail(f"{e} (in `{_show(at)}`)", at) from None
        except LookupError:
            target = None
            if self.hook is not None:
                try:
                    target = self.hook(qualname)
                except Exception:
                    target = None
            if target is None:
                raise self.fail(f"cannot resolve {qualname} (in `{_show(at)}`)", at) from None
            allow_target(target)  # the caller's own hook chose it (a stand-in, a registered op)
        self.resolved[qualname] = target
        return target


class _ForwardReader(Forward):
    """Turns one ``def forward`` into an fx.Graph (the front end, ``printed_front``, recognises
    each statement; this makes its node, every target resolved and judged)."""

    def __init__(self, reader: _Reader, fn: ast.FunctionDef, nested: set[str]):
        super().__init__(fn)
        self.r, self.nested = reader, nested
        self.graph = fx.Graph()
        self.attrs: dict[str, TensorSpec | None] = {}
        self.source: dict[str, Any] | None = None

    def fail(self, message: str, where: ast.AST | int) -> GraphSourceError:
        return self.r.fail(message, where)

    def read(self) -> tuple[fx.Graph, dict[str, TensorSpec | None]]:  # type: ignore[override]
        try:
            super().read()
        except Unsupported as e:
            raise self.fail(e.message, e.where) from None  # type: ignore[arg-type]
        return self.graph, self.attrs

    def before(self, stmt: ast.stmt, after: int) -> None:
        # Comments are not in the AST; the `# File:` lines fx prints before each group of
        # statements are the only record of where the user's code was.
        for text in self.r.lines[after: stmt.lineno - 1]:
            if m := _SOURCE_COMMENT.match(text):
                self.source = {"file": m["file"], "line": int(m["line"]), "fn": m["fn"], "code": m["code"],
                               **({"annotation": m["annotation"]} if m["annotation"] else {})}
            elif _NO_SOURCE_COMMENT.match(text):
                self.source = None

    def placeholder(self, target: str, default: Any) -> fx.Node:
        return self.graph.placeholder(target, **({} if default is NO_DEFAULT else {"default_value": default}))

    def output(self, value: Any) -> fx.Node:
        return self.graph.output(value)

    def rename(self, node: fx.Node, name: str) -> None:
        node._rename(name)

    def alias(self, name: str, node: fx.Node) -> None:
        if node.op == "placeholder" and node.name == node.target:
            node._rename(name)  # fx prints a renamed placeholder as `l_x_ = L_x_`

    def assigned(self, node: fx.Node, name: str | None) -> None:
        if node.op == "get_attr" and node.target in self.attrs and isinstance(node.meta["graphdbg_spec"], TensorSpec):
            self.attrs[node.target] = node.meta["graphdbg_spec"]  # type: ignore[index]

    def annotate(self, node: fx.Node, annotation: ast.expr | None) -> None:
        text = annotation_text(annotation)
        node.meta["graphdbg_spec"] = parse_annotation(text) if text else None
        if text and node.meta["graphdbg_spec"] is None:  # readers refuse it with its line (no second parse)
            node.meta["graphdbg_bad_annotation"] = (text, getattr(annotation, "lineno", None) or self.lineno)
        node.meta["graphdbg_lineno"] = self.lineno
        if self.source is not None:
            node.meta["graphdbg_source"] = dict(self.source)

    def is_node(self, value: Any) -> bool:
        return isinstance(value, fx.Node)

    def holds_node(self, value: Any) -> bool:
        nodes: list[fx.Node] = []
        fx.node.map_arg(value, nodes.append)
        return bool(nodes)

    def operator(self, name: str) -> Any:
        return getattr(operator, name)

    def constant(self, name: str) -> Any:
        return CONSTANT_NAMES[name]

    def create(self, op: str, target: Any, args: tuple, kwargs: dict, name: str | None, at: ast.AST) -> fx.Node:
        if op in ("call_function", "call_method", "call_module"):
            # a callable handed over as an argument (tree_map(a.tofile, ...)) is a target too
            why = check_value((args, kwargs))
            if why:
                raise self.fail(f"refusing `{_show(at)}`: {why} is not something a replayed graph may use", at)
        if op == "call_function" and (why := refusal(target)):
            raise self.fail(f"refusing `{_show(at)}`: {why}", at)
        if op in ("call_function", "call_method") and (why := call_refusal(op, target, args, kwargs)):
            raise self.fail(f"refusing `{_show(at)}`: {why}", at)
        try:
            node = self.graph.create_node(op, target, args, kwargs, name=name)
        except Exception as e:
            raise self.fail(f"cannot build a node for `{_show(at)}`: {e}", at) from None
        if node.meta.get("graphdbg_lineno") is None:
            self.annotate(node, None)
        return node

    def module_path(self, path: str, dunder: bool, at: ast.expr) -> str:
        if dunder:
            raise self.fail(f"refusing dunder attribute in `{_show(at)}`", at)
        if path not in self.nested:
            self.attrs.setdefault(path, None)
        return path

    def call_method(self, attr: str, receiver: ast.expr, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> fx.Node:
        if attr not in allowed_methods():
            raise self.fail(f"refusing method call .{attr}() in `{_show(at)}`: methods run only on "
                            "tensors, streams, events, symbolic sizes and numbers, and never reach files, "
                            "storage or callbacks", at)
        if attr == "type" and any(isinstance(a, str) for a in (*args, *kwargs.values())):
            raise self.fail(f"refusing .type() with a type name in `{_show(at)}`", at)
        return self.create("call_method", attr, (self.node(receiver), *args), kwargs, name, at)

    def call_function(self, qualname: str, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> fx.Node:
        target = self.r.resolve(qualname, at)
        if target is builtins.getattr:
            self._check_getattr(args, at)
        return self.create("call_function", target, args, kwargs, name, at)

    def attribute(self, receiver: ast.expr, attr: str, name: str | None, at: ast.Attribute) -> fx.Node:
        if attr.startswith("__"):
            raise self.fail(f"refusing dunder attribute .{attr} in `{_show(at)}`", at)
        if attr not in ALLOWED_ATTRIBUTES:
            raise self.fail(f"refusing attribute .{attr} in `{_show(at)}`: a graph reads only tensor "
                            "metadata and a few fields of devices and slices", at)
        return self.create("call_function", builtins.getattr, (self.node(receiver), attr), {}, name, at)

    def _check_getattr(self, args: tuple, expr: ast.expr) -> None:
        if len(args) < 2 or not isinstance(args[0], fx.Node) or not isinstance(args[1], str):
            raise self.fail(f"getattr needs a graph value and a constant name: `{_show(expr)}`", expr)
        if args[1].startswith("__"):
            raise self.fail(f"refusing dunder attribute {args[1]!r} in `{_show(expr)}`", expr)
        if args[1] not in ALLOWED_ATTRIBUTES:
            raise self.fail(f"refusing attribute {args[1]!r} in `{_show(expr)}`: a graph reads only tensor "
                            "metadata and a few fields of devices and slices", expr)

    def name_value(self, name: str, at: ast.Name) -> Any:
        # Bare names in argument position are only mangled globals fx wrote (functions
        # handed to higher-order ops); an unknown one is a typo or a truncation, so the
        # user's catch-all hook is not asked.
        try:
            return resolve_name(name)
        except Refused as e:
            raise self.fail(f"{e} (in `{_show(at)}`)", at) from None
        except LookupError:
            raise self.fail(f"unknown name {name} (used before it is assigned?)", at) from None

    def path_value(self, path: str, at: ast.Attribute) -> Any:
        return self.r.resolve(path, at)  # dtypes, layouts, memory formats, and functions passed to higher-order ops

    def literal_call(self, func: str, args: list[Any], kwargs: dict[str, Any], at: ast.Call) -> Any:
        if func == "slice":
            return slice(*args)
        try:
            return torch.device(*args, **kwargs)
        except Exception as e:
            raise self.fail(f"bad device literal `{_show(at)}`: {e}", at) from None


def dotted_or(expr: ast.expr, default: Any) -> Any:
    name = dotted_name(expr)
    return default if name is None else name
