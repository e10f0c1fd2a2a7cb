"""How a printed graph's ``forward`` is recognised, without torch: the few statement shapes fx
codegen emits, the calls, the literals and the annotations, each turned into what a consumer
makes of it. Two consumers: the full reader (``graph/parser.py``: fx nodes, every target
resolved and judged) and the scan ``ls`` lists printed graphs with (``formats/scan.py``: nodes
as records, names judged by a table made with torch). A statement shape taught here is taught
to both.

``graph_class`` and ``class_parts`` recognise the module around the forward (its one class,
the imports and docstrings beside it, the class's body) for both. A consumer subclasses
``Forward`` and says what a node is (``create``), what a dotted name calls (``call_function``)
or is as a value (``path_value``, ``name_value``), what the literals ``slice(...)`` and
``device(...)`` are, and how an annotation is kept (``annotate``). What the front end can't
recognise is ``Unsupported``, with the message and the place.
"""

from __future__ import annotations

import ast
from typing import Any

from graphdbg.graph.source_text import dotted_name, is_alias

# binary, unary and comparison operators as fx calls them: the function of that name in ``operator``
OPERATORS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
             ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.LShift: "lshift", ast.RShift: "rshift",
             ast.BitAnd: "and_", ast.BitOr: "or_", ast.BitXor: "xor", ast.USub: "neg", ast.UAdd: "pos",
             ast.Invert: "invert", ast.Not: "not_", ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le",
             ast.Gt: "gt", ast.GtE: "ge", ast.Is: "is_", ast.IsNot: "is_not"}
# Dynamo keeps in-place Python operators (`x += y`) as operator.iadd & co.
INPLACE = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.Div: "itruediv", ast.FloorDiv: "ifloordiv",
           ast.Mod: "imod", ast.Pow: "ipow", ast.MatMult: "imatmul", ast.BitAnd: "iand", ast.BitOr: "ior",
           ast.BitXor: "ixor", ast.LShift: "ilshift", ast.RShift: "irshift"}
# Names fx codegen binds in the generated module's globals (torch.fx.graph._custom_builtins).
CONSTANT_NAMES = ("inf", "nan", "Ellipsis", "NoneType")
NO_DEFAULT = object()
ROOTS = ("torch", "operator", "_operator", "math")  # the modules a printed graph may import (and name)
_KINDS = {ast.Assign: "an assignment", ast.AnnAssign: "an assignment", ast.AugAssign: "an assignment",
          ast.FunctionDef: "a function", ast.AsyncFunctionDef: "a function", ast.If: "an if", ast.For: "a loop",
          ast.While: "a loop", ast.With: "a with block", ast.Try: "a try block"}


class Unsupported(Exception):
    """A shape the front end doesn't know; ``where``: the AST node or line it is at."""

    def __init__(self, message: str, where: ast.AST | int | None):
        super().__init__(message)
        self.message, self.where = message, where


def annotation_text(annotation: ast.expr | None) -> str | None:
    """The text of a string annotation (``x: "f32[2, 8]"``), else None."""
    return annotation.value if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str) else None


def show(node: ast.AST, limit: int = 100) -> str:
    text = ast.unparse(node).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def graph_class(tree: ast.Module) -> ast.ClassDef:
    """The module's one class; beside it only docstrings, ``from __future__`` and imports of ``ROOTS``."""
    classes = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            classes.append(stmt)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__" and not stmt.level:
                continue  # a compiler directive (vLLM and SGLang write `from __future__ import annotations`)
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            for name in [""] if isinstance(stmt, ast.ImportFrom) and stmt.level else names:
                if name.split(".")[0] not in ROOTS:
                    raise Unsupported(f"refusing import of {name or 'a relative module'}", stmt)
        elif not _docstring(stmt):  # named by kind, not quoted: a file that is no printed graph may hold anything
            kind = ("a call" if isinstance(stmt.value, ast.Call) else "an expression") if isinstance(stmt, ast.Expr) else (
                _KINDS.get(type(stmt), f"a {type(stmt).__name__} statement"))
            raise Unsupported(f"unexpected statement outside the graph class ({kind}; not a printed graph?)", stmt)
    if not classes:
        raise Unsupported("not a printed graph: no `class ...(torch.nn.Module)` with a forward", 1)
    if len(classes) > 1:
        lines = ", ".join(str(c.lineno) for c in classes)
        raise Unsupported(f"expected one graph class, found {len(classes)} (lines {lines})", classes[1])
    return classes[0]


def class_parts(cls: ast.ClassDef, lenient: bool = False
                ) -> tuple[ast.FunctionDef, dict[str, ast.ClassDef], list[ast.FunctionDef]]:
    """A graph class's ``forward``, its nested classes by name, and (``lenient``: a script's
    class, whose other methods are skipped, never run) its ``__init__`` definitions."""
    if cls.decorator_list or cls.keywords:
        raise Unsupported(f"unexpected decorator or keyword on class {cls.name}", cls)
    if not any((dotted_name(b) or "").endswith("Module") for b in cls.bases):
        raise Unsupported(f"class {cls.name} is not a torch.nn.Module", cls)
    forward, nested, inits = None, {}, []
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "forward":
            forward = stmt
        elif isinstance(stmt, ast.ClassDef):
            nested[stmt.name] = stmt
        elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        elif lenient and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inits += [stmt] if stmt.name == "__init__" and isinstance(stmt, ast.FunctionDef) else []
        else:
            raise Unsupported(f"unexpected statement in class {cls.name}: {show(stmt)}", stmt)
    if forward is None:
        raise Unsupported(f"class {cls.name} has no forward (truncated?)", cls)
    check_forward(forward, cls.name)
    return forward, nested, inits


def check_forward(forward: ast.FunctionDef, owner: str) -> None:
    """A forward of class ``owner`` without decorators, its return annotation a name if any."""
    if forward.decorator_list or forward.returns is not None and not isinstance(forward.returns, (ast.Constant, ast.Name, ast.Attribute)):
        raise Unsupported(f"unexpected decorator or return annotation on {owner}.forward", forward)


def header_lines(lines: list[str], class_line: int) -> list[str]:
    """The comment lines above the graph class (``# Rank: R, Graph G``), stripped."""
    return [ln.strip() for ln in lines[: class_line - 1] if ln.strip().startswith("#")]


class Forward:
    """One ``def forward``, statement by statement, as the nodes its consumer makes."""

    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn
        self.env: dict[str, Any] = {}
        self.self_name = ""
        self.lineno = fn.lineno

    # what a consumer says -------------------------------------------------------------------
    def create(self, op: str, target: Any, args: tuple, kwargs: dict, name: str | None, at: ast.AST) -> Any:
        raise NotImplementedError

    def placeholder(self, target: str, default: Any) -> Any:
        raise NotImplementedError

    def output(self, value: Any) -> Any:
        raise NotImplementedError

    def operator(self, name: str) -> Any:
        """The target of ``operator.<name>``."""
        raise NotImplementedError

    def call_function(self, qualname: str, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> Any:
        raise NotImplementedError

    def call_method(self, attr: str, receiver: Any, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> Any:
        raise NotImplementedError

    def attribute(self, receiver: Any, attr: str, name: str | None, at: ast.Attribute) -> Any:
        """``value.attr`` of a graph value."""
        raise NotImplementedError

    def module_path(self, path: str, dunder: bool, at: ast.expr) -> str:
        """``self.a.b`` as ``a.b``; ``dunder``: a part of it is one."""
        raise NotImplementedError

    def path_value(self, path: str, at: ast.Attribute) -> Any:
        """A dotted name as an argument (a dtype, a function handed to a higher-order op)."""
        raise NotImplementedError

    def name_value(self, name: str, at: ast.Name) -> Any:
        """A bare name that is neither a graph value nor a constant name, as an argument."""
        raise NotImplementedError

    def constant(self, name: str) -> Any:
        """One of ``CONSTANT_NAMES``."""
        raise NotImplementedError

    def literal_call(self, func: str, args: list[Any], kwargs: dict[str, Any], at: ast.Call) -> Any:
        """``slice(...)`` or ``device(...)`` with these values."""
        raise NotImplementedError

    def rename(self, node: Any, name: str) -> None:
        raise NotImplementedError

    def annotate(self, node: Any, annotation: ast.expr | None) -> None:
        raise NotImplementedError

    def is_node(self, value: Any) -> bool:
        raise NotImplementedError

    def holds_node(self, value: Any) -> bool:
        raise NotImplementedError

    def self_as_value(self, at: ast.Name) -> Exception:
        return Unsupported(f"`{at.id}` itself is not a graph value", at)

    def before(self, stmt: ast.stmt, after: int) -> None:
        """Called before each statement (``after``: the line the one before it ended on)."""

    def alias(self, name: str, node: Any) -> None:
        """``name = value`` of a graph value: no node (a placeholder's alias renames it)."""

    def assigned(self, node: Any, name: str | None) -> None:
        """A statement's node, annotated."""

    # the shapes -----------------------------------------------------------------------------
    def read(self) -> None:
        self._placeholders(self.fn.args)
        prev_end, returned = self.fn.lineno, False
        setitem: tuple[Any, str, int] | None = None
        for stmt in self.fn.body:
            self.before(stmt, prev_end)
            prev_end, self.lineno = stmt.end_lineno or stmt.lineno, stmt.lineno
            if returned:
                raise Unsupported(f"statement after return: {show(stmt)}", stmt)
            if setitem and is_alias(stmt) and stmt.value.id == setitem[1] and stmt.lineno == setitem[2]:  # type: ignore[union-attr]
                # fx prints `x[0] = v;  setitem = x` and `x += y;  x_1: "f32[3]" = x`: the second
                # half names the node the first half made (and annotates it).
                alias = stmt.target.id if isinstance(stmt, ast.AnnAssign) else stmt.targets[0].id  # type: ignore[union-attr]
                self.rename(setitem[0], alias)
                if isinstance(stmt, ast.AnnAssign):
                    self.annotate(setitem[0], stmt.annotation)
                self.env[alias], setitem = setitem[0], None
                continue
            returned, setitem = self._statement(stmt)
        if not returned:
            raise Unsupported("forward has no return statement (truncated?)", self.fn.body[-1].end_lineno or self.fn)

    def _statement(self, stmt: ast.stmt) -> tuple[bool, tuple[Any, str, int] | None]:
        if isinstance(stmt, ast.Return):
            self.annotate(self.output(self.value(stmt.value) if stmt.value is not None else None), None)
            return True, None
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript) and len(stmt.targets) == 1:
            tgt = stmt.targets[0]
            node = self.create("call_function", self.operator("setitem"),
                               (self.node(tgt.value), self.value(tgt.slice), self.value(stmt.value)), {}, None, stmt)
            return False, (node, dotted_name(tgt.value) or "", stmt.lineno)
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and type(stmt.op) in INPLACE:
            node = self.create("call_function", self.operator(INPLACE[type(stmt.op)]),
                               (self.node(stmt.target), self.value(stmt.value)), {}, None, stmt)
            self.env[stmt.target.id] = node
            return False, (node, stmt.target.id, stmt.lineno)
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                return False, None  # `a = b = None`: fx freeing references early
            if len(stmt.targets) != 1:
                raise Unsupported(f"unexpected multiple assignment: {show(stmt)}", stmt)
            self.assign(stmt.value, stmt.targets[0].id, None)  # type: ignore[attr-defined]
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            self.assign(stmt.value, stmt.target.id, stmt.annotation)
        elif isinstance(stmt, ast.Expr):
            if not (isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                self.assign(stmt.value, None, None)
        elif not isinstance(stmt, ast.Pass):
            raise Unsupported(f"unsupported statement in forward: {show(stmt)}", stmt)
        return False, None

    def _placeholders(self, args: ast.arguments) -> None:
        positional = args.posonlyargs + args.args
        if not positional:
            raise Unsupported("forward has no `self` argument", self.fn)
        self.self_name = positional[0].arg
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        entries = [(a, d, a.arg) for a, d in zip(positional[1:], defaults[1:])]
        if args.vararg:
            entries.append((args.vararg, None, "*" + args.vararg.arg))
        entries += [(a, d, a.arg) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
        for arg, default, target in entries:
            self.lineno = arg.lineno
            value = NO_DEFAULT if default is None else self.value(default)
            if value is not NO_DEFAULT and self.holds_node(value):
                raise Unsupported(f"default value is not a constant: {show(default)}", default)  # type: ignore[arg-type]
            node = self.placeholder(target, value)
            self.annotate(node, arg.annotation)
            self.env[arg.arg] = node

    def assign(self, expr: ast.expr, name: str | None, annotation: ast.expr | None) -> Any:
        if name is not None and isinstance(expr, ast.Name) and expr.id in self.env and annotation is None:
            node = self.env[expr.id]  # `l_x_ = L_x_`: Dynamo's alias of an input
            self.alias(name, node)
            self.env[name] = node
            return node
        node = self.call_node(expr, name)
        self.annotate(node, annotation)
        self.assigned(node, name)
        if name is not None:
            self.env[name] = node
        return node

    def call_node(self, expr: ast.expr, name: str | None) -> Any:
        """The node computing ``expr``; ``name`` is the statement's variable, if any (nested
        expressions' nodes, made first, are named by what they call)."""
        if isinstance(expr, ast.Call):
            args, kwargs = self._arguments(expr)
            func = expr.func
            if (path := self.self_path(func)) is not None:
                return self.create("call_module", path, args, kwargs, name, expr)
            if isinstance(func, ast.Attribute) and self.rooted(func.value):
                return self.call_method(func.attr, func.value, args, kwargs, name, expr)
            qualname = dotted_name(func)
            if qualname is None:
                raise Unsupported(f"unsupported call `{show(expr)}`", expr)
            return self.call_function(qualname, args, kwargs, name, expr)
        if isinstance(expr, ast.Attribute):
            if (path := self.self_path(expr)) is not None:
                return self.create("get_attr", path, (), {}, name, expr)
            if self.rooted(expr.value):
                return self.attribute(expr.value, expr.attr, name, expr)
        if isinstance(expr, ast.Subscript):
            return self.create("call_function", self.operator("getitem"), (self.value(expr.value), self.value(expr.slice)), {}, name, expr)
        if isinstance(expr, ast.BinOp) and type(expr.op) in OPERATORS:
            return self.create("call_function", self.operator(OPERATORS[type(expr.op)]),
                               (self.value(expr.left), self.value(expr.right)), {}, name, expr)
        if isinstance(expr, ast.UnaryOp) and type(expr.op) in OPERATORS:
            return self.create("call_function", self.operator(OPERATORS[type(expr.op)]), (self.value(expr.operand),), {}, name, expr)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            op, right = expr.ops[0], expr.comparators[0]
            if isinstance(op, (ast.In, ast.NotIn)):
                node = self.create("call_function", self.operator("contains"), (self.value(right), self.value(expr.left)),
                                   {}, None if isinstance(op, ast.NotIn) else name, expr)
                return node if isinstance(op, ast.In) else self.create("call_function", self.operator("not_"), (node,), {}, name, expr)
            if type(op) in OPERATORS:
                return self.create("call_function", self.operator(OPERATORS[type(op)]),
                                   (self.value(expr.left), self.value(right)), {}, name, expr)
        raise Unsupported(f"unsupported expression `{show(expr)}`", expr)

    def _arguments(self, expr: ast.Call) -> tuple[tuple, dict]:
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(k.arg is None for k in expr.keywords):
            raise Unsupported(f"unsupported */** arguments in `{show(expr)}`", expr)
        return tuple(self.value(a) for a in expr.args), {k.arg: self.value(k.value) for k in expr.keywords}  # type: ignore[misc]

    def self_path(self, expr: ast.expr) -> str | None:
        """``"a.b"`` for ``self.a.b``, else None."""
        path = dotted_name(expr)
        if path is None or not path.startswith(self.self_name + ".") or self.self_name in self.env:
            return None
        path = path[len(self.self_name) + 1:]
        return self.module_path(path, any(p.startswith("__") for p in path.split(".")), expr)

    def rooted(self, expr: ast.expr) -> bool:
        """Whether ``expr`` computes from graph values (so ``expr.m()`` is a method call)."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        if isinstance(expr, ast.Name):
            return expr.id in self.env or expr.id == self.self_name
        return isinstance(expr, (ast.Call, ast.Subscript, ast.BinOp, ast.UnaryOp))

    def node(self, expr: ast.expr) -> Any:
        value = self.value(expr)
        if not self.is_node(value):
            raise Unsupported(f"expected a graph value, got `{show(expr)}`", expr)
        return value

    def value(self, expr: ast.expr) -> Any:
        """An argument: a constant, a container, a known node, or a node for a nested expression."""
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in self.env:
                return self.env[expr.id]
            if expr.id in CONSTANT_NAMES:
                return self.constant(expr.id)
            if expr.id == self.self_name:
                raise self.self_as_value(expr)
            return self.name_value(expr.id, expr)
        if isinstance(expr, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in expr.elts):
                raise Unsupported(f"unsupported starred element in `{show(expr)}`", expr)
            items = [self.value(e) for e in expr.elts]
            return tuple(items) if isinstance(expr, ast.Tuple) else items
        if isinstance(expr, ast.Dict):
            if any(k is None for k in expr.keys):
                raise Unsupported(f"unsupported ** in `{show(expr)}`", expr)
            keys = [self.value(k) for k in expr.keys]  # type: ignore[arg-type]
            if any(self.is_node(k) or isinstance(k, (list, dict)) for k in keys):
                raise Unsupported(f"dict keys must be constants in `{show(expr)}`", expr)
            return dict(zip(keys, (self.value(v) for v in expr.values)))
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)) and (
                isinstance(expr.operand, ast.Constant) or isinstance(expr.operand, ast.Name) and expr.operand.id in ("inf", "nan")):
            # `-1`, `-inf` are constants in printed args, not neg nodes.
            operand = expr.operand.value if isinstance(expr.operand, ast.Constant) else self.constant(expr.operand.id)  # type: ignore[union-attr]
            if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
                return -operand if isinstance(expr.op, ast.USub) else operand
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("slice", "device"):
            args, kwargs = self._arguments(expr)
            return self.literal_call(expr.func.id, list(args), kwargs, expr)
        if isinstance(expr, ast.Attribute) and not self.rooted(expr.value):
            path = dotted_name(expr)
            if path is None:
                raise Unsupported(f"unsupported expression `{show(expr)}`", expr)
            return self.path_value(path, expr)
        return self.call_node(expr, None)
