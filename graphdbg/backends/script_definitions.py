"""The definitions a backend needs from the user's script, chosen by reading it, never by running it.

A script in the README's pattern defines its backend and then runs the model (often in a
top-level ``try:``). Replay, minify, bisect, compare and export-test need the backend, never
the program: ``needed`` starts from the backend's name and follows the names it reads
(``symtable``: a function's globals, transitively) to the top-level statements that bind them.
Only those run, and each must be a *definition*:

- an import, a function or a class (its decorators, defaults, bases and class body definitions too);
- an assignment of an effect-free expression: literals, names, attributes, subscripts,
  operators, lambdas, and calls of what the script imports (library code: ``torch.device(...)``,
  ``aot_autograd(fw_compiler=fw)``, ``functools.partial(...)``), never a call of something
  the script defines or binds itself (``CONFIG = make_config()``, ``model(x)``) nor of a builtin
  that does I/O (``open``, ``print``, ...);
- an ``if``/``try`` made only of definitions (``try: import triton`` / ``except ImportError: triton = None``).

A needed name that only something else binds (a ``with`` block, a loop, a call) stops the load
with one line that says which statement and what to do. Statements the backend does not need
never run, whatever they are: the model in a ``try:``, a file written at the top level.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import symtable
from dataclasses import dataclass, field
from pathlib import Path

from graphdbg.errors import GraphdbgError
from graphdbg.store.safe_files import MAX_TEXT_BYTES, read_regular

# builtins whose call is the program doing something, not a definition
_EFFECT_BUILTINS = frozenset({"open", "print", "input", "exec", "eval", "compile", "breakpoint", "__import__", "exit",
                              "quit", "setattr", "delattr", "help"})
_BUILTINS = frozenset(dir(builtins))
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# calls whose result runs the model when called: torch.compile(...), graphdbg.capture(...)
_COMPILES = frozenset({"compile", "capture"})
_MOVE = "move the backend (and what it uses) into a module the script imports, or give --backend module:function"


@dataclass
class Script:
    """A script read and parsed, nothing run."""
    path: Path
    source: str
    tree: ast.Module
    table: symtable.SymbolTable
    binds: list[set[str]] = field(default_factory=list)  # per top-level statement: the names it binds or changes
    imported: set[str] = field(default_factory=set)  # names bound by imports
    defined: set[str] = field(default_factory=set)  # names bound otherwise (functions, classes, assignments)
    source_mtime: int | None = None  # the file's st_mtime_ns when read

    @classmethod
    def read(cls, path: str | Path) -> Script:
        file = Path(path).resolve()
        try:  # through the gate: a FIFO or a device named as the script neither hangs nor is read whole
            mtime = file.stat().st_mtime_ns
            source = read_regular(file, max_bytes=MAX_TEXT_BYTES, text=True)
            tree = ast.parse(source, filename=str(file))
            table = symtable.symtable(source, str(file), "exec")
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError, GraphdbgError) as e:
            first = (str(e).strip().splitlines() or [""])[0]
            raise GraphdbgError(f"{path}: cannot read the backend's script ({type(e).__name__}: {first})") from e
        script = cls(file, source, tree, table, source_mtime=mtime)
        changes = []
        for stmt in tree.body:
            names, changed = _bound(stmt)
            script.binds.append(names)
            changes.append(changed)
            (script.imported if isinstance(stmt, (ast.Import, ast.ImportFrom)) else script.defined).update(names)
        script.defined -= script.imported
        for names, changed in zip(script.binds, changes):  # X.append(1), X[k] = v: a change of the script's own X
            names |= changed & script.defined
        return script

    def names(self) -> set[str]:
        return set().union(*self.binds) if self.binds else set()

    def check_name(self, qualname: str, spec: str) -> None:
        """GraphdbgError with a did-you-mean when the script binds no ``qualname`` at its top level."""
        root = qualname.split(".")[0]
        dynamic = "__getattr__" in self.names() or "globals()" in self.source  # names made when it runs: not checked here
        if root in self.names() or dynamic or any(_star(s) for s in self.tree.body):
            return
        raise GraphdbgError(f"{spec!r}: {self.path.name} defines no {root}{did_you_mean(root, self.names())}")

    def runs_program(self) -> bool:
        """Whether importing the file would run a program: outside the ``__main__`` block, a
        ``with`` block, a loop, or an expression statement that calls what the script runs — its
        own functions and classes, what they made (``model = Block()``; ``print(model(x))``), what
        ``torch.compile``/``capture`` made — or a builtin doing I/O. Assignments, even
        ``refuses_gelu = make_backend("gelu")``, are what modules do; so are calls on library
        objects (``LIB = torch.library.Library(...)``; ``LIB.impl(...)`` registers an op) and library
        calls given nothing of the script's (``torch.manual_seed(0)``)."""
        runnable = self._runnable()
        return any(self._runs(stmt, runnable) for stmt in self.tree.body)

    def _runnable(self) -> set[str]:
        """The script's functions and classes, and the top-level names bound to what calling one of
        them, or compiling, returned."""
        made = {s.name for s in self.tree.body if isinstance(s, _DEFS)}
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                calls = [_root_name(n.func) for n in _walk_outside_defs(stmt.value) if isinstance(n, ast.Call)]
                compiles = any(isinstance(n, ast.Call) and _called_name(n.func) in _COMPILES for n in _walk_outside_defs(stmt.value))
                if compiles or any(c in made for c in calls):
                    made |= _bound(stmt)[0]
        return made

    def _runs(self, stmt: ast.stmt, runnable: set[str]) -> bool:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Pass, ast.Delete)
                      + _DEFS):
            return False
        if isinstance(stmt, ast.Expr):
            return not isinstance(stmt.value, ast.Constant) and _effect(stmt.value, runnable) is not None
        if isinstance(stmt, ast.If):
            return not _main_block(stmt) and any(self._runs(s, runnable) for s in stmt.body + stmt.orelse)
        if isinstance(stmt, ast.Try):
            body = stmt.body + stmt.orelse + stmt.finalbody + [s for h in stmt.handlers for s in h.body]
            return any(self._runs(s, runnable) for s in body)
        return True

    def needed(self, qualname: str) -> list[int]:
        """The indexes of the top-level statements ``qualname`` needs, in order; GraphdbgError when
        one of them is not a definition."""
        wanted, seen, keep = [qualname.split(".")[0]], set(), set()
        if any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in self.tree.body):
            keep |= {i for i, s in enumerate(self.tree.body) if isinstance(s, ast.ImportFrom) and s.module == "__future__"}
        while wanted:
            name = wanted.pop()
            if name in seen:
                continue
            seen.add(name)
            binders = [i for i, names in enumerate(self.binds) if name in names]
            if not binders and name not in _BUILTINS:
                binders = [i for i, s in enumerate(self.tree.body) if _star(s)]
            for i in binders:
                why = not_definition(self.tree.body[i], self.defined)
                if why:
                    raise GraphdbgError(
                        f"{self.path.name}: the backend {qualname} needs {name}, which line {self.tree.body[i].lineno} "
                        f"{'binds' if not _mutates(self.tree.body[i], name) else 'changes'} by running the program ({why}); "
                        f"graphdbg runs only a script's definitions (imports, functions, classes, constants): {_MOVE}")
                if i not in keep:
                    keep.add(i)
                    wanted.extend(self.reads(self.tree.body[i]))
        return sorted(keep)

    def reads(self, stmt: ast.stmt) -> set[str]:
        """The module-level names a statement reads, when it runs or when what it defines is called."""
        names = {n.id for n in _walk_outside_defs(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for node in ast.walk(stmt):
            if isinstance(node, _DEFS):
                for expr in _def_time_expressions(node):
                    names |= {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
                names |= _globals(self._table_of(node))
        return names

    def _table_of(self, node: ast.AST) -> symtable.SymbolTable | None:
        def find(table: symtable.SymbolTable) -> symtable.SymbolTable | None:
            for child in table.get_children():
                if child.get_name() == node.name and child.get_lineno() == node.lineno:
                    return child
                if child.get_type() == "class":  # a method's class: methods are found through it
                    found = find(child)
                    if found is not None:
                        return found
            return None

        return find(self.table)

    def definitions_source(self, indexes: list[int]) -> str:
        """The statements at ``indexes`` as source: their own lines (comments kept), or unparsed
        when a line holds another statement too (``import x; run()``)."""
        lines = self.source.splitlines()
        spans = [(_first_line(s), s.end_lineno or s.lineno) for s in self.tree.body]
        text, before = "", None
        for i in indexes:
            start, end = spans[i]
            shared = any(j != i and not (e < start or s > end) for j, (s, e) in enumerate(spans))
            imports = isinstance(self.tree.body[i], (ast.Import, ast.ImportFrom))
            text += ("" if before is None else "\n" if imports and before else "\n\n\n")
            text += ast.unparse(self.tree.body[i]) if shared else "\n".join(lines[start - 1:end])
            before = imports
        return text + "\n"


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _main_block(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "__name__" in {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}


def _star(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)


def did_you_mean(name: str, names: set[str] | list[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _bound(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names a top-level statement binds at module level, the roots of what it may change in
    place: ``TABLE[k] = v``, ``X.a = 1``, ``X.append(1)``)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}, set()
    if isinstance(stmt, _DEFS):
        return {stmt.name}, set()
    out: set[str] = set()
    changed: set[str] = set()
    for node in _walk_outside_defs(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            changed.add(_root_name(node) or "")
        elif isinstance(node, _DEFS) and node is not stmt:
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= _bound(node)[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            changed.add(_root_name(node.func.value) or "")
    return out, changed


def _mutates(stmt: ast.stmt, name: str) -> bool:
    return name not in {n.id for n in _walk_outside_defs(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} \
        and not (isinstance(stmt, _DEFS) and stmt.name == name)


def _walk_outside_defs(stmt: ast.AST):
    """ast.walk, not into the bodies of functions, classes and lambdas (their own scopes)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, _DEFS + (ast.Lambda,)) and node is not stmt:
            todo.extend(_def_time_expressions(node))
            continue
        if isinstance(node, _DEFS):
            todo.extend(_def_time_expressions(node))
            continue
        todo.extend(ast.iter_child_nodes(node))


def _def_time_expressions(node: ast.AST) -> list[ast.AST]:
    """What Python evaluates when it runs a def, class or lambda: decorators, defaults, bases,
    annotations (a class body runs too; it is checked statement by statement)."""
    out: list[ast.AST] = list(getattr(node, "decorator_list", []))
    if isinstance(node, ast.ClassDef):
        return out + list(node.bases) + [k.value for k in node.keywords]
    args = node.args  # type: ignore[attr-defined]
    out += [d for d in args.defaults + args.kw_defaults if d is not None]
    if not isinstance(node, ast.Lambda):
        out += [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]
                if a is not None and a.annotation is not None]
        out += [node.returns] if node.returns is not None else []  # type: ignore[attr-defined]
    return out


def _globals(table: symtable.SymbolTable | None) -> set[str]:
    """The module-level names a function or class reads, its nested functions' included."""
    if table is None:
        return set()
    names = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        names |= _globals(child)
    return names


def _called_name(func: ast.AST) -> str | None:
    """The last name of what a call calls: ``torch.compile`` -> ``compile``."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def not_definition(stmt: ast.stmt, defined: set[str]) -> str | None:
    """Why running ``stmt`` would be running the program (None: it is a definition).
    ``defined``: the names the script binds other than by imports."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
        return None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return None  # a docstring
    if isinstance(stmt, _DEFS):
        for expr in _def_time_expressions(stmt):
            why = _effect(expr, defined)
            if why:
                return why
        if isinstance(stmt, ast.ClassDef):
            return next((w for w in (not_definition(s, defined) for s in stmt.body) if w), None)
        return None
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        parts = [*targets, *([stmt.value] if stmt.value is not None else [])]
        return next((w for w in (_effect(p, defined) for p in parts) if w), None)
    if isinstance(stmt, ast.If):
        return _effect(stmt.test, defined) or _all_definitions(stmt.body + stmt.orelse, defined)
    if isinstance(stmt, ast.Try):
        handlers = [h.type for h in stmt.handlers if h.type is not None]
        return (next((w for w in (_effect(h, defined) for h in handlers) if w), None)
                or _all_definitions(stmt.body + stmt.orelse + stmt.finalbody + [s for h in stmt.handlers for s in h.body], defined))
    kind = type(stmt).__name__.lower()
    return f"a top-level {'expression' if kind == 'expr' else kind} statement"


def _all_definitions(body: list[ast.stmt], defined: set[str]) -> str | None:
    return next((w for w in (not_definition(s, defined) for s in body) if w), None)


def _effect(expr: ast.AST, defined: set[str]) -> str | None:
    """What in ``expr`` runs the program: a call of something the script defines or binds, or of
    a builtin that does I/O; a ``yield`` or ``await``. None: evaluating it has no effect of the script's."""
    for node in _walk_outside_defs(expr):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return f"a {type(node).__name__.lower()}"
        if isinstance(node, ast.Call):
            root = _root_name(node.func)
            if root in defined:
                return f"a call of the script's {root}"
            if root in _EFFECT_BUILTINS:
                return f"a call of {root}()"
    return None
