"""A printed graph file read without torch, for ``graphdbg ls``: ``ast.parse`` (of the module with
each ``forward`` cut out, then of each forward's text: ``split_forwards``) and one walk that
follows the statements ``graph/parser.py`` turns into fx nodes, node for node (the front end both
share: ``graph/printed_front.py``). Names are judged by ``names_table`` (made with torch, by the
full reader's own rules). Nothing is executed.

It keeps the nodes and what ``ls`` lists: the graph's hash and its hash with integer literals
masked (the group hash; the literals in order are ``rank_literals``), the device indices it bakes
in, the constructs replay stands in for, the placeholders' annotations and the line its class
starts on (the header is above it). The hashes are this module's whoever reads the file
(``load_printed_graph`` takes them from ``scan_facts`` too): ``ls`` and ``show`` agree by construction.

    >>> scan = scan_source(text, "rank0_0.py")      # Llama-4-Maverick's, in fixtures/sglang-thunderfx
    >>> scan.undecided, scan_facts(scan)["nodes"], devices_and_constructs(scan.graph)
    (None, 53, (set(), ['torch.ops.sglang.inplace_all_reduce']))

Where the scan can't say what the full reader would (a name the table doesn't hold, a statement
shape it doesn't know, no table for this torch), ``undecided`` says why (``Undecided`` where it
can't follow the file at all) and the caller reads the file in full.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import keyword
import os
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_str  # json.dumps's own spelling of a str
from typing import Any, NamedTuple

from graphdbg.formats.names_table import NameTable, names
from graphdbg.graph import printed_front
from graphdbg.graph.printed_front import NO_DEFAULT, Forward, Unsupported, annotation_text, class_parts, graph_class
from graphdbg.rebuild.int_uses import FLIPPED, FOLLOWED_FUNCTIONS, FOLLOWED_METHODS, SHIFTS, settle, tested_bound
from graphdbg.store.specs import parse_annotation

HEADER = re.compile(r"#\s*Rank:\s*(\d+),\s*Graph\s*(\d+)")
_CUDA_INDEX_CALLS = ("torch._C._cuda_exchangeDevice", "torch.cuda.get_device_capability")


# fx's node names (torch.fx.graph._Namespace): placeholders' names are the inputs' names
_NAME = re.compile(r"^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$")
_ILLEGAL_CHARS = re.compile("[^0-9a-zA-Z_]+")
_ILLEGAL_NAMES = frozenset(keyword.kwlist) | frozenset(builtins.__dict__) | {
    "inf", "nan", "NoneType", "torch", "device", "fx_pytree", "pytree"}
_SNAKE = re.compile(r"(?<=[a-z])([A-Z])")


class _Namespace:
    """fx's ``_Namespace.create_name`` for names with no object, as this torch's fx makes them."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.base_count: dict[str, int] = {}

    def create_name(self, candidate: str) -> str:
        match = _NAME.match(candidate)
        if match is None:
            candidate = _ILLEGAL_CHARS.sub("_", candidate) or "_unnamed"
            candidate = f"_{candidate}" if candidate[0].isdigit() else candidate
            match = _NAME.match(candidate)
        base, num_text = match.group(1, 2)  # type: ignore[union-attr]
        if num_text is None or candidate in self.used:
            num = self.base_count.get(base, 0)
            if candidate in _ILLEGAL_NAMES:
                num += 1
                candidate = f"{base}_{num}"
        else:
            num = int(num_text)
        while candidate in self.used:
            num += 1
            candidate = f"{base}_{num}"
        self.used.add(candidate)
        self.base_count[base] = num
        return candidate


@functools.lru_cache(maxsize=4096)
def _target_to_str(name: str) -> str:
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    return _SNAKE.sub(r"_\1", name).lower()


class Undecided(Exception):
    """The scan can't say what the full reader would; the message says why."""


@dataclass(frozen=True)
class Ref:
    """A node of the graph being read, by its index."""
    index: int


@dataclass(frozen=True)
class Device:
    type: str
    index: int | None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


@dataclass(frozen=True)
class DottedName:
    """A dotted name used as a value (``torch.float32``, a function handed to a higher-order op)."""
    path: str


@dataclass
class Node:
    op: str
    target: str
    name: str
    args: tuple
    kwargs: dict
    annotation: str | None = None
    construct: str | None = None
    spec: Any = None  # the annotation parsed (store.specs), for the inputs' descriptors
    fn: str = ""  # what a call_function calls, by __name__ (an op by its name)


class Own(NamedTuple):
    """One forward's own nodes and their facts, made once per forward text (``_Forward.read``)."""
    nodes: list[Node]
    digest: Any  # graph_hash's sha256 over the nodes
    masked: list[str]  # the group hash's rows: the nodes with integer literals masked, as JSON without their "["
    literals: list[Any]  # those literals, in order
    indices: set[int]  # cuda device indices baked in
    constructs: list[str]  # what replay stands in for
    cuda_calls: bool  # whether a call is of a cuda or triton construct (the graph ran on a GPU)
    doubt: str | None  # the first name the scan can't judge
    bad: list[tuple[str, int]]  # annotations that don't read as specs (text, line counted from its def)


@dataclass
class ScannedGraph:
    own: Own
    submodules: dict[str, ScannedGraph] = field(default_factory=dict)

    @property
    def nodes(self) -> list[Node]:
        return self.own.nodes

    def graphs(self) -> list[ScannedGraph]:
        out = [self]
        for sub in self.submodules.values():
            out += sub.graphs()
        return out


class Scan:
    """One printed graph file, scanned (``scan_source``): its ``graph``, its class's first line
    (``class_line``: the header is above it), the annotations that don't read as specs
    (``(text, line)`` each), and ``undecided``: why only the full reader can say what the listing
    shows, or None."""

    def __init__(self) -> None:
        table = names()  # none for this torch: every name doubted, the facts the full reader takes still made
        self.table = table if table is not None else _NO_TABLE
        self.undecided: str | None = None if table is not None else "no names table for this torch"
        self.bad_annotations: list[tuple[str, int]] = []
        self.graph: ScannedGraph = None  # type: ignore[assignment]
        self.class_line = 0

    def read_class(self, cls: ast.ClassDef, blocks: dict[int, tuple[str, int]]) -> ScannedGraph:
        forward, nested, _ = class_parts(cls)
        graph = self.read_forward(forward, blocks.get(forward.lineno), cls.name)
        graph.submodules = {name: self.read_class(c, blocks) for name, c in nested.items()}
        return graph

    def read_forward(self, fn: ast.FunctionDef, block: tuple[str, int] | None, owner: str) -> ScannedGraph:
        """The forward's nodes: from the file's tree, or from its text (``block``: the text without
        its indentation and the line before it), read once per listing however indented."""
        if block is None:
            read, offset = _Forward(self.table, fn).read(), 0
        else:
            text, offset = block
            key = self.table, text
            if (read := _KEPT.get(key)) is None:
                read = _Forward(self.table, _block_forward(text, owner)).read()
                if sharing():
                    _KEPT.keep(key, read)
            else:
                _KEPT.move_to_end(key)
        if read.doubt is not None and self.undecided is None:
            self.undecided = read.doubt
        self.bad_annotations += [(text, line + offset) for text, line in read.bad]
        return ScannedGraph(read)


class _Unsplit(Exception):
    """A forward's text did not parse alone: the file is parsed whole."""


def _block_forward(text: str, owner: str) -> ast.FunctionDef:
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _Unsplit from None
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef):
        raise _Unsplit
    printed_front.check_forward(body[0], owner)  # its decorators are the stub's, checked with the class
    return body[0]


def scan_source(source: str, filename: str) -> Scan:
    """Scan ``source`` (already through ``readable_source``). Raises Undecided where the walk
    can't follow the file at all (then its hash can't be made here either); a Scan whose
    ``undecided`` is set where only the listing's facts need the full reader."""
    split = split_forwards(source) if sharing() else None
    try:
        return _scan(*split, filename) if split is not None else _scan(source, {}, filename)
    except _Unsplit:
        return _scan(source, {}, filename)


def _scan(source: str, blocks: dict[int, tuple[str, int]], filename: str) -> Scan:
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        if blocks:
            raise _Unsplit from None
        raise Undecided(f"not parsed ({type(e).__name__})") from None
    scan = Scan()
    try:
        cls = graph_class(tree)
        scan.graph, scan.class_line = scan.read_class(cls, blocks), cls.lineno
    except Unsupported as e:
        raise Undecided(e.message) from None
    return scan


SHARE_ENV = "GRAPHDBG_LS_SHARE"  # "0": every file and forward scanned on its own (to compare, to measure)


def sharing() -> bool:
    """Whether forwards of one text share a scan (``SHARE_ENV``)."""
    return os.environ.get(SHARE_ENV, "1").strip() != "0"


# Where a token or an indentation may span lines (a triple-quoted string, a backslash
# continuation, a tab or form feed, a line break but \n) the file is not split.
_UNSPLIT = ('"""', "'''", "\\\n", "\t", "\r", "\x0c")


@functools.lru_cache(maxsize=64)
def _end_of_def(n: int) -> re.Pattern:
    return re.compile(rf"\n {{0,{n}}}[^ \n#]")  # the next line of code indented n or less


def split_forwards(source: str) -> tuple[str, dict[int, tuple[str, int]]] | None:
    """``source`` with each ``def forward`` a stub (``def forward(self): pass``, on the line it
    starts on, its other lines blank), and each forward's text without its indentation, with
    the line before it, by that line; None where the file can't be split. A forward's text runs
    to the next line of code indented no more than its ``def`` (the comments and blank lines
    before that line are the rest's); where that is not where the function ends (a bracket
    open across it), its text does not parse alone, and the file is parsed whole."""
    if any(s in source for s in _UNSPLIT):
        return None
    pieces, blocks, at, line, i = [], {}, 0, 1, 0
    while (i := source.find("def forward", i)) >= 0:
        start = source.rfind("\n", 0, i) + 1
        i += 11
        indent = source[start: i - 11]
        if start < at or indent.strip(" ") or source[i: i + 1].isidentifier() or source[i: i + 1].isdigit():
            continue  # inside a forward, or not a line's `def forward`
        stop = (e.start() + 1) if (e := _end_of_def(len(indent)).search(source, i)) else len(source)
        while (prev := source.rfind("\n", i, stop - 1)) >= 0 and source[prev + 1: stop].strip()[:1] in ("", "#"):
            stop = prev + 1  # trailing blank and comment lines
        line += source.count("\n", at, start)
        block = source[start: stop]
        breaks = block.count("\n")
        pieces += [source[at: start], indent, "def forward(self): pass", "\n" * breaks]
        blocks[line] = (block[len(indent):].replace("\n" + indent, "\n") if indent else block), line - 1
        line, at = line + breaks, stop
    return "".join(pieces) + source[at:], blocks


# Forwards kept for later classes and files (Thunder prints each part twice, as thunder_N and its
# _model; the ranks of a model, a few hundred forwards apart, print the same forwards), the least
# recently read let go past this many nodes (docs/benchmarks.md: what they cost, what they save)
_NODES_KEPT = 4096


class _KeptForwards(OrderedDict):
    """The forwards read so far, by their text, the least recently read first."""
    nodes = 0

    def keep(self, key: tuple[NameTable, str], read: Own) -> None:
        self[key] = read
        self.nodes += len(read.nodes) + 1
        while self.nodes > _NODES_KEPT and len(self) > 1:
            self.nodes -= len(self.popitem(last=False)[1].nodes) + 1


_KEPT = _KeptForwards()
_NO_TABLE = NameTable({"names": {}, "methods": [], "op_namespaces": [], "attributes": []})


def forget_forwards() -> None:
    """Let the forwards read so far go (a listing does, when it is made: a notebook that lists
    a big folder keeps nothing of it here)."""
    _KEPT.clear()
    _KEPT.nodes = 0


class _Forward(Forward):
    """One ``def forward`` as the nodes the full reader would make of it (the front end,
    ``printed_front``, recognises each statement; this names the nodes as fx would and judges
    names by the table, doubting where it can't say)."""

    def __init__(self, table: NameTable, fn: ast.FunctionDef):
        super().__init__(fn)
        self.table, self.nodes, self.names = table, [], _Namespace()
        self.first_doubt: str | None = None
        self.bad: list[tuple[str, int]] = []
        self.devices = False  # whether any argument is a device literal or a "cuda:N" string

    def read(self) -> Own:  # type: ignore[override]
        super().read()
        return Own(self.nodes, *_own_facts(self.nodes, self.devices), self.first_doubt, self.bad)

    def doubt(self, why: str) -> None:
        self.first_doubt = self.first_doubt or why

    def add(self, op: str, target: str, args: tuple, kwargs: dict | None = None, construct: str | None = None,
            pyname: str | None = None, name: str | None = None) -> Ref:
        """A node; named as fx names it (the statement's variable, else what it calls)."""
        candidate = name if name is not None else _target_to_str(pyname or target)
        fn = target.split(".")[3] if target.startswith("torch.ops.") and target.count(".") >= 3 else (pyname or "")
        self.nodes.append(Node(op, target, self.names.create_name(candidate), args, kwargs or {}, construct=construct, fn=fn))
        return Ref(len(self.nodes) - 1)

    def create(self, op: str, target: Any, args: tuple, kwargs: dict, name: str | None, at: ast.AST) -> Ref:
        if op == "call_function":  # an operator: "operator.<name>"
            return self.add(op, target, args, kwargs, None, target.rsplit(".", 1)[-1], name)
        return self.add(op, target, args, kwargs, name=name)

    def placeholder(self, target: str, default: Any) -> Ref:
        return self.add("placeholder", target, () if default is NO_DEFAULT else (default,))

    def output(self, value: Any) -> Ref:
        return self.add("output", "output", (value,))

    def operator(self, name: str) -> str:
        return f"operator.{name}"

    def constant(self, name: str) -> Any:
        return {"inf": float("inf"), "nan": float("nan"), "Ellipsis": ..., "NoneType": DottedName("NoneType")}[name]

    def rename(self, ref: Ref, candidate: str) -> None:
        node = self.nodes[ref.index]
        if candidate != node.name:
            node.name = self.names.create_name(candidate)

    def alias(self, name: str, ref: Ref) -> None:
        node = self.nodes[ref.index]
        if node.op == "placeholder" and node.name == node.target:
            self.rename(ref, name)

    def annotate(self, ref: Ref, annotation: ast.expr | None) -> None:
        text = annotation_text(annotation)
        node = self.nodes[ref.index]
        node.spec, node.annotation = _annotation(text) if text else (None, None)
        if text and node.spec is None:
            self.bad.append((text, getattr(annotation, "lineno", None) or self.lineno))

    def is_node(self, value: Any) -> bool:
        return isinstance(value, Ref)

    def holds_node(self, value: Any) -> bool:
        return any(isinstance(v, Ref) for v in _flat(value))

    def self_as_value(self, at: ast.Name) -> Exception:
        return Undecided("self as a value")

    def module_path(self, path: str, dunder: bool, at: ast.expr) -> str:
        if dunder:
            raise Undecided("a dunder attribute")
        return path

    def call_function(self, qualname: str, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> Ref:
        """The target's ``(flags, construct, __name__)`` from the table; doubt where the table can't
        say or the allow-list refuses it (the full reader then gives the error)."""
        entry = self.table.get(qualname)
        if entry is None or "c" not in entry[0]:
            self.doubt(f"the name {qualname}")
            entry = ("", None, qualname.rsplit(".", 1)[-1])
        flags, construct, pyname = entry
        if "g" in flags and not (len(args) >= 2 and isinstance(args[0], Ref) and isinstance(args[1], str)
                                 and args[1] in self.table.attributes):
            self.doubt("a getattr the parser checks")
        if qualname.endswith("higher_order.print"):
            self.doubt("higher_order.print's format string")
        return self.add("call_function", qualname, args, kwargs, construct, pyname, name)

    def call_method(self, attr: str, receiver: ast.expr, args: tuple, kwargs: dict, name: str | None, at: ast.Call) -> Ref:
        # what the full reader refuses by the arguments: .type() with a type name, Tensor.set_ with a source (any set_ here)
        refused = attr == "set_" or (attr == "type" and any(isinstance(a, str) for a in (*args, *kwargs.values())))
        if attr not in self.table.methods or refused:
            self.doubt(f"the method .{attr}()")
        return self.add("call_method", attr, (self.node(receiver), *args), kwargs, name=name)

    def attribute(self, receiver: ast.expr, attr: str, name: str | None, at: ast.Attribute) -> Ref:
        if attr.startswith("__") or attr not in self.table.attributes:
            self.doubt(f"the attribute .{attr}")
        return self.add("call_function", "builtins.getattr", (self.node(receiver), attr), {}, None, "getattr", name)

    def value(self, expr: ast.expr) -> Any:
        if type(expr) is ast.Constant and isinstance(expr.value, str) and expr.value.startswith("cuda:"):
            self.devices = True
        return super().value(expr)

    def path_value(self, path: str, at: ast.AST, refused: str = "r") -> DottedName:
        entry = self.table.get(path)
        if entry is None or "v" not in entry[0] or any(f in entry[0] for f in refused):
            self.doubt(f"the name {path}")
        return DottedName(path)

    def name_value(self, name: str, at: ast.Name) -> DottedName:
        return self.path_value(name, at, "rm")  # bare names never reach the hook (no stand-in for a missing op)

    def literal_call(self, func: str, args: list[Any], kwargs: dict[str, Any], at: ast.Call) -> Any:
        if func == "slice":
            if kwargs or not 1 <= len(args) <= 3:
                raise Undecided("a slice literal")
            return slice(*args)
        self.devices = True
        return _device(args, kwargs)


@functools.lru_cache(maxsize=1 << 16)
def _annotation(text: str) -> tuple[Any, str | None]:
    """parse_annotation and the spec's own spelling, once per distinct text (the scan's users
    read specs, never change them)."""
    spec = parse_annotation(text)
    return spec, spec.annotation() if spec is not None else None


def _device(args: list[Any], kwargs: dict[str, Any]) -> Device:
    """``device('cuda', 1)``, ``device(type='cuda', index=1)``, ``device('cuda:1')`` as torch.device reads them."""
    if len(args) > 2 or set(kwargs) - {"type", "index"} or (args and "type" in kwargs) or (len(args) > 1 and "index" in kwargs):
        raise Undecided("a device literal")
    kind = args[0] if args else kwargs.get("type")
    index = args[1] if len(args) > 1 else kwargs.get("index")
    if not isinstance(kind, str) or (index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0)):
        raise Undecided("a device literal")
    m = re.fullmatch(r"(cpu|cuda|meta|mps|xpu|hpu|privateuseone)(?::(\d+))?", kind)
    if not m or (m[2] is not None and index is not None):
        raise Undecided("a device literal")
    return Device(m[1], int(m[2]) if m[2] is not None else index)


def _flat(value: Any) -> list[Any]:
    """Every leaf of nested tuples, lists, dicts and slices (fx's map_aggregate)."""
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flat(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat(v)]
    if isinstance(value, slice):
        return [x for v in (value.start, value.stop, value.step) for x in _flat(v)]
    return [value]


# Facts ------------------------------------------------------------------------------------

def _spelled(value: Any, literals: list[Any]) -> tuple[str, str]:
    """``value`` as graph_hash spells it (``repr`` text) and as the group hash does (JSON text: integer
    literals and device indices masked, appended to ``literals`` in order), in one walk."""
    t = type(value)  # exact types: the values are the AST's constants, containers and the classes above
    if t is Ref:
        return repr(f"%{value.index}"), f'"%{value.index}"'
    if t is str:
        return repr(value), _json_str(value)
    if value is None or t is bool:
        return repr(value), "null" if value is None else "true" if value else "false"
    if t is int:
        literals.append(value)
        return repr(value), '"#"'
    if t is tuple or t is list:
        items = [_spelled(v, literals) for v in value]
        return f"['{t.__name__}', [{', '.join([i[0] for i in items])}]]", f"[{', '.join([i[1] for i in items])}]"
    if t is dict:
        pairs = [(str(k), _spelled(v, literals)) for k, v in value.items()]
        return (f"['dict', [{', '.join([f'[{k!r}, {v[0]}]' for k, v in pairs])}]]",
                f"[{', '.join([f'[{_json_str(k)}, {v[1]}]' for k, v in pairs])}]")
    if t is slice:
        items = [_spelled(v, literals) for v in (value.start, value.stop, value.step)]
        return f"['slice', {', '.join([i[0] for i in items])}]", f'["slice", {", ".join([i[1] for i in items])}]'
    if t is float or t is complex:
        return repr(repr(value)), _json_str(repr(value))
    if t is Device:
        if value.index is not None:
            literals.append(value.index)
        return repr(f"device:{value}"), _json_str(f"device:{value.type}")
    if t is DottedName:
        return repr(f"@{value.path}"), _json_str(value.path)
    return repr(t.__name__), _json_str(t.__name__)


def _own_facts(nodes: list[Node], devices: bool) -> tuple[Any, list, list, set[int], list[str], bool]:
    """A forward's own facts (``devices``: whether any argument is a device, else none is looked for)."""
    rows, masked, literals, indices, found, cuda_calls = [], [], [], set(), {}, False
    for n in nodes:
        (args, masked_args), (kwargs, masked_kwargs) = _spelled(n.args, literals), _spelled(n.kwargs, literals)
        # repr([op, target, (annotation,) args, kwargs]), and json.dumps([op, target, args, kwargs, annotation]) without its "["
        rows.append(f"[{n.op!r}, {n.target!r}, {n.annotation or ''!r}, {args}, {kwargs}]" if n.op == "placeholder" else
                    f"[{n.op!r}, {n.target!r}, {args}, {kwargs}]")
        masked.append(f"{_json_str(n.op)}, {_json_str(n.target if n.op not in ('placeholder', 'output') else n.op)}, "
                      f"{masked_args}, {masked_kwargs}, {_json_str(n.annotation) if n.annotation is not None else 'null'}]")
        if n.op not in ("call_function", "call_method"):
            continue
        values = _flat((n.args, n.kwargs)) if devices else ()
        for v in values:
            if isinstance(v, Device) and v.type == "cuda" and v.index is not None:
                indices.add(v.index)
            elif isinstance(v, str) and re.fullmatch(r"cuda:\d+", v):
                indices.add(int(v.split(":")[1]))
        if n.construct == "torch.cuda.streams.Stream" and _int(n.kwargs.get("device_index")):
            indices.add(n.kwargs["device_index"])
        elif n.construct in _CUDA_INDEX_CALLS and n.args and _int(n.args[0]):
            indices.add(n.args[0])
        if n.op == "call_function" and n.construct is not None:
            found.setdefault(n.construct)
            cuda_calls = cuda_calls or "cuda" in n.construct or "triton" in n.construct
        elif any(isinstance(v, Device) and v.type == "cuda" for v in values):
            found.setdefault("device(type='cuda')")
    digest = hashlib.sha256("".join(rows).encode())  # as one update per node
    return digest, masked, literals, indices, list(found), cuda_calls


def graph_hash(graph: ScannedGraph) -> str:
    """sha256 over each node's op, target (as written), placeholder annotation and arguments;
    nested classes folded in by name."""
    h = graph.own.digest.copy()
    for name, sub in sorted(graph.submodules.items()):
        h.update(f"{name}:{graph_hash(sub)}".encode())
    return h.hexdigest()


def masked_structure(graph: ScannedGraph) -> tuple[str, list[Any]]:
    """The graph with integer literals masked (device indices too), and those literals in order:
    ranks of one tensor-parallel model print the same graph but for the literals that place them."""
    literals: list[Any] = []
    parts: list[str] = []
    todo = [("", graph)]
    while todo:  # each graph's rows (a forward has one at least: its output), then its nested classes' by name, depth first
        prefix, g = todo.pop()
        head = "[" + json.dumps(prefix) + ", "  # json.dumps([prefix, *row]), row by row, in one join
        parts.append(head + (", " + head).join(g.own.masked))
        literals.extend(g.own.literals)
        todo.extend((f"{prefix}{name}.", g.submodules[name]) for name in sorted(g.submodules, reverse=True))
    return "[" + ", ".join(parts) + "]", literals


def devices_and_constructs(graph: ScannedGraph) -> tuple[set[int], list[str]]:
    """The cuda device indices the graph bakes in (device literals, streams, device switches) and
    what replay stands in for (``rebuild/stand_ins.constructs``, by the table's verdicts)."""
    graphs = graph.graphs()
    return set().union(*(g.own.indices for g in graphs)), list(dict.fromkeys(c for g in graphs for c in g.own.constructs))


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_INT_RANGES = {f"{u}int{b}": (0, 1 << b) if u else (-(1 << (b - 1)), 1 << (b - 1))  # torch.iinfo's, the end past it
               for u in ("", "u") for b in (8, 16, 32, 64)}


def shard_rank(graph: ScannedGraph) -> int | None:
    """printed_graph._rank_from_shard without torch: the first integer input whose only uses
    are range tests (``x >= start & x < end``) and untracked arithmetic; a shard ``[start, end)``
    with ``start`` a multiple of its size is rank ``start // size``. Undecided where an input's
    uses are ones the input plans follow (indexing, views, shifts, submodules)."""
    for i, p in enumerate(graph.nodes):
        if p.op != "placeholder":
            continue
        spec = p.spec
        if getattr(spec, "dtype", None) not in _INT_RANGES or getattr(spec, "shape", None) is None:
            continue
        if not all(_int(d) for d in spec.shape):
            raise Undecided("a symbolic integer input")
        low, high = settle(_range_tests(graph, Ref(i)), lambda j: _partners(graph, j))
        if low is None or high is None or low[1] >= high[1]:
            continue
        lo, hi = _INT_RANGES[spec.dtype]
        low, high = max(low[1], lo), min(high[1], hi)
        if high - low > 1 and low % (high - low) == 0:
            return low // (high - low)
    return None


def _range_tests(graph: ScannedGraph, ref: Ref) -> dict[int, tuple[str, int]]:
    tests: dict[int, tuple[str, int]] = {}
    for j, u in enumerate(graph.nodes):
        if ref not in _flat((u.args, u.kwargs)):
            continue
        if u.op == "call_module" or (u.op == "call_method" and u.target in FOLLOWED_METHODS):
            raise Undecided("an integer input the input plans follow")
        if u.op != "call_function":
            continue
        if u.fn in FOLLOWED_FUNCTIONS or (u.fn in SHIFTS and any(_int(a) for a in u.args)):
            raise Undecided("an integer input the input plans follow")
        if u.fn in FLIPPED and len(u.args) == 2:
            if u.target.split(".")[0] not in ("operator", "_operator"):
                raise Undecided("a comparison by another name")
            other = u.args[1] if u.args[0] == ref else u.args[0]
            if _int(other):
                tests[j] = tested_bound(u.fn if u.args[0] == ref else FLIPPED[u.fn], other)
    return tests


def _partners(graph: ScannedGraph, j: int) -> list[int]:
    """The nodes ``&``-joined to node ``j``."""
    return [other.index for u in graph.nodes if u.op == "call_function" and u.target in ("operator.and_", "_operator.and_")
            and Ref(j) in u.args and isinstance(other := next((a for a in u.args if a != Ref(j)), None), Ref)]


def op_histogram(graph: ScannedGraph) -> dict[str, int]:
    """How many times each target (as written) is called in the outer graph."""
    counts = Counter(n.target if n.op != "call_method" else f"Tensor.{n.target}"
                     for n in graph.nodes if n.op not in ("placeholder", "output"))
    return dict(counts.most_common())


def scan_facts(scan: Scan) -> dict[str, Any]:
    """The facts both readers of a printed graph take from the scan."""
    masked, literals = masked_structure(scan.graph)
    return {"hash": graph_hash(scan.graph), "group_hash": hashlib.sha256(masked.encode()).hexdigest(),
            "rank_literals": literals, "nodes": sum(len(g.nodes) for g in scan.graph.graphs()), "ops": op_histogram(scan.graph)}
