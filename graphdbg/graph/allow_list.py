"""What a replayed graph may do: the operations Dynamo puts in graphs, and nothing else.

A dump is untrusted input. Its graph is parsed, never run as Python, but replaying it calls
whatever its nodes name, so each node is judged against an allow-list, by the object it
resolved to (not by the path that reached it):

- ``call_function``: ``torch.ops`` overloads and packets and higher-order ops (minus the few
  that read or write files: ``aten::save``, ``aten::from_file``, ``debugprims::*``); torch's
  tensor functions (``torch._C._VariableFunctions``, ``_nn``, ``_fft``, ``_linalg``,
  ``_special``, ``torch.functional``, public ``torch.nn.functional``); ``operator`` (minus
  ``attrgetter``, ``methodcaller``, ``call``); ``math``; a few builtins; and the named
  grad-mode, autocast, symbolic-size, stream and device calls in ``NAMED_FUNCTIONS``.
- ``call_method``: public ``Tensor`` methods, minus those that reach storage, files, numpy,
  pickling or Python callbacks (``DENIED_METHODS``), plus stream and event methods.
- attribute reads (``getattr`` nodes): the names in ``ALLOWED_ATTRIBUTES`` only.
- constants in arguments: numbers, strings, dtypes, devices, slices; a callable only if it is
  itself an allowed target (so ``tree_map(a.tofile, ...)`` has nothing to hand over).

``check_graph_module`` applies the same rules to a built GraphModule right before it runs
(``run_case``), so a graph changed after loading, or a value that is not what the loader saw,
is refused there too.

    >>> is_allowed_function(torch.ops.aten.add.Tensor), is_allowed_function(torch.from_file)
    (True, False)
    >>> check_graph_module(gm, inputs)      # GraphSourceError naming the node, or None
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import math
import operator
import os
import re
import string
import sys
import types
import weakref
from typing import Any, Iterable

import torch
import torch.fx as fx

from graphdbg.errors import GraphdbgError, GraphSourceError
from graphdbg.graph.index_bounds import index_bound, index_refusal, is_index_backward
from graphdbg.judge.op_names import op_parts

# Isolated replays run in a child process; it reads the registrations from here.
OPS_ENV = "GRAPHDBG_OPS"

# Python module paths whose functions may be graph targets, besides torch/operator/math.
_allowed_namespaces: list[str] = []


def register_ops(modules: Iterable[str]) -> list[str]:
    """Import modules that define real implementations (``torch.library`` ops, or plain functions
    a graph calls); their ops then resolve instead of getting stand-ins. Returns the modules.

        >>> register_ops(["mypkg.sglang_ops"])   # defines torch.ops.sglang.inplace_all_reduce
        ['mypkg.sglang_ops']

    The modules are also allow-listed as namespaces (a graph may call ``mypkg.sglang_ops.f``),
    and exported in ``$GRAPHDBG_OPS`` so an isolated replay's child process imports them too.
    This runs the user's own code, never code from a graph file.
    """
    names = [m.strip() for m in modules if m and m.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:
            raise GraphdbgError(f"cannot import ops module {name}: {type(e).__name__}: {e}") from None
        if name not in _allowed_namespaces:
            _allowed_namespaces.append(name)
    os.environ[OPS_ENV] = ",".join(_allowed_namespaces)
    return names


def allowed_namespaces() -> list[str]:
    """The user's allow-listed namespaces (registered modules), after those in ``$GRAPHDBG_OPS``."""
    pending = [m for m in os.environ.get(OPS_ENV, "").split(",") if m.strip() and m.strip() not in _allowed_namespaces]
    if pending:
        register_ops(pending)
    return list(_allowed_namespaces)



__all__ = ["ALLOWED_ATTRIBUTES", "ALLOWED_BUILTINS", "allowed_methods", "allow_target", "call_refusal",
           "check_graph_module", "check_value", "format_refusal", "is_allowed_function", "refusal", "schema_refusal"]

# Builtins fx graphs actually call (getattr/getitem on shapes, symbolic arithmetic).
ALLOWED_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in ("abs", "bool", "float", "getattr", "int", "isinstance", "len", "list",
                 "max", "min", "range", "round", "slice", "tuple")
}

# Torch calls Dynamo writes into graphs that live outside the tensor-function modules below:
# grad mode, autocast, symbolic sizes and checks, functorch levels, and the stream/device
# calls that have stand-ins (rebuild/stand_ins.py). Missing ones (an older torch) are skipped.
NAMED_FUNCTIONS = (
    "torch._C._set_grad_enabled", "torch._C._set_fwd_grad_enabled", "torch._C._log_api_usage_once",
    "torch.is_grad_enabled", "torch.get_default_dtype", "torch.is_autocast_enabled",
    "torch.amp.autocast_mode._enter_autocast", "torch.amp.autocast_mode._exit_autocast",
    "torch.sym_int", "torch.sym_float", "torch.sym_max", "torch.sym_min", "torch.sym_not", "torch.sym_ite",
    "torch.sym_sum", "torch._sym_sqrt", "torch.sym_sqrt",
    "torch._check", "torch._check_is_size", "torch._check_with", "torch._check_index", "torch._check_value",
    "torch._check_type", "torch._check_not_implemented", "torch._assert",
    "torch._C._functorch._add_batch_dim", "torch._C._functorch._remove_batch_dim",
    "torch._C._functorch._vmap_increment_nesting", "torch._C._functorch._vmap_decrement_nesting",
    "torch._C._functorch._wrap_for_grad", "torch._C._functorch._unwrap_for_grad",
    "torch._C._functorch._grad_increment_nesting", "torch._C._functorch._grad_decrement_nesting",
    "torch._C._functorch._jvp_increment_nesting", "torch._C._functorch._jvp_decrement_nesting",
    "torch._C._functorch.set_inplace_requires_grad_allowed",
    "torch._functorch.predispatch._add_batch_dim", "torch._functorch.predispatch._remove_batch_dim",
    "torch._functorch.predispatch._vmap_increment_nesting", "torch._functorch.predispatch._vmap_decrement_nesting",
    "torch._functorch.predispatch.lazy_load_decompositions",  # Dynamo emits it before vmap (transformers masks)
    "torch._dynamo.graph_bytecode_inputs.get_external_object_by_index",
    "torch.cuda.streams.Stream", "torch.cuda.Stream", "torch.cuda.streams.Event", "torch.cuda.Event",
    "torch.cuda.current_stream", "torch.cuda.set_stream", "torch.cuda.current_device", "torch.cuda.synchronize",
    "torch.cuda.get_device_capability", "torch._C._cuda_exchangeDevice", "torch._C._cuda_maybeExchangeDevice",
    "torch.Size", "torch.device",
    "torch._C._autograd._get_data_attr",  # what `param.data` becomes in a Dynamo graph
)

# Modules whose every public callable is a tensor operation (C bindings of ATen ops, or thin
# Python over them); `torch.X` for an ATen function is the same object as its binding here.
FUNCTION_MODULES = ("torch._C._VariableFunctions", "torch._C._nn", "torch._C._fft", "torch._C._linalg",
                     "torch._C._special", "torch.functional", "torch.nn.functional", "torch.fft", "torch.linalg",
                     "torch.special", "torch.masked._ops", "torch.signal.windows.windows")  # the last two: OpInfo sweep

# Functions in those modules (and op names) that read or write files.
DENIED_FUNCTION_NAMES = frozenset({"from_file", "save", "load"})
# C bindings in those modules that are not ATen ops (no schema to judge them by) yet take only
# tensors and plain values; every other schemaless binding (``_from_blob``: a raw address,
# ``frombuffer``, ``from_numpy``: foreign memory) is refused.
SCHEMALESS_OK = frozenset({"asarray", "dsmm", "hsmm", "saddmm", "spmm", "_parse_to"})
_C_BINDINGS = ("torch._C._VariableFunctions", "torch._C._nn", "torch._C._fft", "torch._C._linalg", "torch._C._special")

# What an op can touch, read from its schema (``schema_refusal``): an argument of type Storage
# (raw memory), an int argument that is an address or an offset into a storage, a string
# argument that is a file, folder, library or program name.
_RAW_INT_ARG = re.compile(r"((^|_)(ptr|pointer|address|addr|blob)$|offset_bytes|offset_increment|storage_offset)", re.I)
_NAME_STR_ARG = re.compile(r"(file|path|dir|folder|lib|library|module|program|command|cmd|shell|url)", re.I)
# Views whose size, stride and storage offset the op itself checks against the storage's bounds.
BOUNDS_CHECKED = frozenset({"aten::as_strided", "aten::as_strided_", "aten::as_strided_copy", "aten::as_strided_scatter",
                            "prims::as_strided", "prims::as_strided_scatter"})
DENIED_OPS = frozenset({"aten::save", "aten::from_file", "aten::from_file.out"})
DENIED_OP_NAMESPACES = frozenset({"debugprims"})
DENIED_OPERATOR = frozenset({"attrgetter", "methodcaller", "call"})

# Tensor methods that reach storage, files, numpy, shared memory, pickling or Python callbacks.
DENIED_METHODS = frozenset({
    "apply_", "map_", "map2_", "numpy", "storage", "untyped_storage", "storage_type", "share_memory_",
    "register_hook", "register_post_accumulate_grad_hook", "backward", "as_subclass", "tofile", "dump",
})
STREAM_METHODS = frozenset({"wait_stream", "wait_event", "record_event", "synchronize", "query", "record", "wait",
                            "elapsed_time"})
# Methods of SymInt/SymFloat/SymBool and Python scalars that Dynamo writes in dynamic graphs
# (``mask.__and__(other)``, ``s0.__floordiv__(2)``): the number protocol (what ``operator``
# spells with dunders, reflected forms too), conversions, and the types' public methods.
_NUMBER_DUNDERS = {n for n in dir(operator) if n.startswith("__") and n.endswith("__") and callable(getattr(operator, n))
                   and n not in ("__call__", "__getitem__", "__setitem__", "__delitem__", "__contains__", "__concat__",
                                 "__iconcat__", "__index__", "__not__", "__inv__")}
SCALAR_METHODS = frozenset(
    _NUMBER_DUNDERS | {"__r" + n[2:] for n in _NUMBER_DUNDERS if not n.startswith(("__i", "__r"))}
    | {"__bool__", "__int__", "__float__", "__round__", "__trunc__", "__floor__", "__ceil__", "__sym_float__",
       "__sym_int__", "__sym_not__", "__sym_max__", "__sym_min__", "__sym_ite__", "__index__"}
    | {n for c in (torch.SymInt, torch.SymFloat, torch.SymBool) for n in dir(c)
       if not n.startswith("_") and callable(getattr(c, n))})

# Attributes a graph may read off a value (tensor metadata, a device's parts, a slice's bounds).
ALLOWED_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "layout", "ndim", "T", "mT", "H", "mH", "real", "imag", "data", "grad",
    "requires_grad", "is_leaf", "itemsize", "nbytes", "is_cpu", "is_cuda", "is_meta", "is_sparse", "is_sparse_csr",
    "is_quantized", "is_nested", "is_mkldnn", "is_xpu", "is_mps", "type", "index", "start", "stop", "step",
    "is_floating_point", "is_signed",
})

# Values a graph argument may hold as a constant, besides allowed callables.
_CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes, slice, type(...), torch.dtype, torch.device,
                   torch.layout, torch.memory_format, torch.Size, torch.finfo, torch.iinfo)
# Classes a graph may name as a value (`isinstance(x, torch.Tensor)`, `torch.float32` is not a class).
_ALLOWED_CLASSES = (int, float, bool, complex, str, tuple, list, dict, slice, type(None), torch.Tensor, torch.SymInt,
                    torch.SymFloat, torch.SymBool, torch.Size, torch.device, torch.dtype)

# Targets the caller's resolve hook supplied (custom-op stand-ins, a registered namespace's
# functions): trusted because the user's own code chose them, remembered for the run-time check.
_EXTRA: weakref.WeakSet = weakref.WeakSet()
_EXTRA_IDS: set[int] = set()


def allow_target(obj: Any) -> Any:
    """Accept ``obj`` as a graph target from now on (what a trusted resolve hook returned)."""
    try:
        _EXTRA.add(obj)
    except TypeError:
        _EXTRA_IDS.add(id(obj))
    return obj


_NOT_LOADED = object()  # walk_torch's answer for a name in a module nobody has imported yet


def walk_torch(path: str, load: bool = True) -> Any:
    """The object ``path`` names under torch; None if it doesn't exist. With ``load=False`` a
    name inside a module not imported yet is ``_NOT_LOADED`` instead: building the allow-list
    must not import ``torch._dynamo`` (2 s) for a command that only reads graphs."""

    parts = path.split(".")
    obj: Any = torch
    for i, part in enumerate(parts[1:], start=2):
        here = ".".join(parts[:i])
        if isinstance(obj, types.ModuleType) and part not in vars(obj):
            if here in sys.modules:
                obj = sys.modules[here]
                continue
            if not load and "__getattr__" in vars(obj):  # torch's __getattr__ imports submodules: don't ask
                return _NOT_LOADED
        nxt = getattr(obj, part, None)
        if nxt is None:
            try:
                nxt = importlib.import_module(here)
            except Exception:
                return None
        obj = nxt
    return obj


# Named functions whose module wasn't imported when the allow-list was built; checked by
# identity once their module is imported (a graph that names one imports it when parsed).
_DEFERRED: list[str] = []


def _deferred_allowed(obj: Any) -> bool:

    for path in list(_DEFERRED):
        if path.rsplit(".", 1)[0] not in sys.modules:
            continue
        found = walk_torch(path, load=False)
        if found is _NOT_LOADED:
            continue
        _DEFERRED.remove(path)
        if found is not None:
            _KEEP.append(found)
            _EXTRA_IDS.add(id(found))
            if found is obj:
                return True
    return False


@functools.lru_cache(maxsize=1)
def _allowed_ids() -> frozenset[int]:
    objs: list[Any] = []
    for path in FUNCTION_MODULES:
        mod = walk_torch(path)
        if mod is None:
            continue
        names: Iterable[str] = getattr(mod, "__all__", None) or dir(mod)
        for name in names:
            if name.startswith("__") or name in DENIED_FUNCTION_NAMES:
                continue
            obj = getattr(mod, name, None)
            if obj is None or isinstance(obj, (types.ModuleType, type)) or not callable(obj):
                continue
            if path in _C_BINDINGS and name not in SCHEMALESS_OK and not _has_aten_schema(name):
                continue
            if _unchecked_by_name(name) or _wraps_unchecked(obj):  # an op that doesn't check its bounds, or Python over one
                continue
            where = getattr(obj, "__module__", None) or ""
            if path.startswith("torch._C.") or where.startswith(("torch.functional", "torch.nn.functional", "torch._C",
                                                                  "torch.fft", "torch.linalg", "torch.special",
                                                                  "torch.masked._ops", "torch.signal.windows")) \
                    or where == "torch":
                objs.append(obj)
    for path in NAMED_FUNCTIONS:
        obj = walk_torch(path, load=False)
        if obj is _NOT_LOADED:
            _DEFERRED.append(path)
        elif obj is not None:
            objs.append(obj)
    objs += [getattr(math, n) for n in dir(math) if callable(getattr(math, n)) and not n.startswith("_")]
    objs += [getattr(operator, n) for n in dir(operator)
             if callable(getattr(operator, n)) and not n.startswith("_") and n not in DENIED_OPERATOR]
    objs += list(ALLOWED_BUILTINS.values())
    objs += [getattr(torch.Tensor, n) for n in allowed_methods() if hasattr(torch.Tensor, n)]
    return frozenset(id(o) for o in objs) | frozenset(id(o) for o in _KEEP)


# The objects behind _allowed_ids stay alive (they are module attributes); this keeps the few
# that are made on access (bound or wrapped callables) from being collected and their ids reused.
_KEEP: list[Any] = []


@functools.lru_cache(maxsize=1)
def _unchecked_names() -> frozenset[str]:
    """ATen op names (``max_unpool2d``) with an overload ``unchecked_memory`` refuses."""
    return frozenset(s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas()
                     if s.name.startswith("aten::") and unchecked_memory(s))


def _unchecked_by_name(name: str) -> bool:
    return name in _unchecked_names()


def _wraps_unchecked(fn: Any) -> bool:
    """A Python function (``F.max_unpool1d``) whose code names an op ``unchecked_memory``
    refuses. ``embedding_renorm_`` is left to ``call_refusal``: F.embedding reaches it only
    with ``max_norm``, which is judged per call."""
    code = getattr(fn, "__code__", None)
    return code is not None and any(_unchecked_by_name(n) for n in code.co_names if n != "embedding_renorm_")


@functools.lru_cache(maxsize=1)
def allowed_methods() -> frozenset[str]:
    """Method names a ``call_method`` node may use: public Tensor methods, minus DENIED_METHODS
    and those of ops that don't check their bounds (``unchecked_memory``), plus stream and event
    methods, plus the number methods of symbolic sizes and scalars."""
    names = {n for n in dir(torch.Tensor) if not n.startswith("_") and callable(getattr(torch.Tensor, n, None))
             and not _unchecked_by_name(n)}
    return frozenset(names - DENIED_METHODS) | STREAM_METHODS | SCALAR_METHODS


@functools.lru_cache(maxsize=1)
def _aten_names() -> frozenset[str]:
    return frozenset(s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::"))


def _has_aten_schema(name: str) -> bool:
    names = _aten_names()
    return any(n in names for n in (name, name.rstrip("_"), f"fft_{name}", f"linalg_{name}", f"special_{name}"))


def _view_geometry(schema: Any) -> bool:
    """A view the caller shapes (an argument named ``*stride*``: strides, a nested tensor's
    strides) that returns an alias of its input: nothing checks it stays inside the storage."""
    returns_view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    return returns_view and any("stride" in a.name for a in schema.arguments)


@functools.lru_cache(maxsize=1)
def _unchecked_views() -> frozenset[str]:
    return frozenset(s.name for s in torch._C._jit_get_all_schemas() if _view_geometry(s) and s.name not in BOUNDS_CHECKED)


def unchecked_memory(schema: Any) -> str | None:
    """Whether the op reads or writes memory by values the graph gives without checking them
    against the tensor's storage (the rule, from the schema alone; ``tests/test_security_ops``
    sweeps every ATen overload through it):

    - a view shaped by given strides (``_view_geometry``), or the ``*_copy`` that materializes
      one (``_reshape_alias``, ``_nested_view_from_buffer``), unless torch itself checks the
      bounds (``BOUNDS_CHECKED``: ``as_strided`` and its family);
    - ``set_`` with a source: it re-points a tensor at another tensor's or a storage's memory;
    - ``resize_storage_bytes_``: a storage resized under the tensors that view it, which keep
      their sizes (shrunk, their next read is past its end: a segfault, not an error);
    - a sparse tensor built from index tensors and a given size (``*indices`` and ``size``):
      torch checks its indices only when asked (``check_invariants``), so it is refused;
    - an op that writes by an ``indices`` tensor it is given (into one of its inputs, or into
      an output whose size comes from elsewhere: ``output_size``): ``embedding_renorm_``,
      ``max_unpool2d``; autograd's own index backwards only where their bound can't be derived
      (``graph.index_bounds``: the others are checked per call, on the values they are given);
    - an op with an ``unsafe`` flag: refused when the call sets it (``call_refusal``).
    """
    base = schema.name.split("::", 1)[-1]
    names = {a.name for a in schema.arguments}
    if schema.name not in BOUNDS_CHECKED and (_view_geometry(schema) or (
            base.endswith("_copy") and f"{schema.name[:-5]}" in _unchecked_views())):
        return "makes a view of given strides that nothing checks against its storage"
    if base in ("set_", "set") and len(schema.arguments) > 1:
        return "re-points a tensor at another tensor's memory"
    if base == "resize_storage_bytes_":  # issue 51: shrunk under a tensor that still views it, the next read is past its end
        return "sets a storage's size under the tensors that view it (a smaller one is memory read past its end)"
    if (any(a.name.endswith("indices") and str(a.type) == "Tensor" for a in schema.arguments) and "size" in names
            and schema.returns and not any(r.alias_info is not None for r in schema.returns)):
        return "builds a sparse tensor from indices it does not check against its size"
    if is_index_backward(schema):
        # autograd's own index backwards (embedding_dense_backward, the max-pool backwards): every
        # language model's and CNN's backward graph calls them, so each call's indices are checked
        # against the bound the schema implies before the graph runs (``graph.index_bounds``);
        # one with no bound graphdbg can derive is refused
        return None if index_bound(schema) is not None else "writes by index tensors graphdbg can't check"
    index = next((a for a in schema.arguments if a.name == "indices" and str(a.type) == "Tensor"), None)
    if index is not None and not (index.alias_info is not None and index.alias_info.is_write):
        written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only]
        if written or "output_size" in names:
            return "writes by an indices tensor it does not check"
    return None


def _schema_arg(schema: Any, name: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """(given, value) of argument ``name`` in a call of ``schema``."""
    if name in kwargs:
        return True, kwargs[name]
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if i < len(args) and not a.kwarg_only:
                return True, args[i]
            return False, None
    return False, None


def schema_refusal(schema: Any) -> str | None:
    """Why an op with this schema may not run in a replayed graph (what it can touch), or None."""
    full = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    why = unchecked_memory(schema)
    if why:
        return f"the op {full} {why}"
    if schema.name in BOUNDS_CHECKED:
        return None
    for arg in schema.arguments:
        kind = str(arg.type)
        if "Storage" in kind:
            return f"the op {full} takes a Storage ({arg.name}): raw memory"
        if "int" in kind.lower() and _RAW_INT_ARG.search(arg.name):
            return f"the op {full} takes a raw address or storage offset ({arg.name})"
        if kind.startswith("str") and _NAME_STR_ARG.search(arg.name):
            return f"the op {full} takes a file, library or program name ({arg.name})"
    return None


_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]*")


def format_refusal(text: Any) -> str | None:
    """Why a format string (``higher_order.print``) may not be used: a field that reads an
    attribute or an item (``{0.__class__...}`` reaches os.environ), or a nested field."""
    if not isinstance(text, str):
        return None
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as e:
        return f"a malformed format string ({e})"
    for _, field, spec, _ in parts:
        if field is not None and not _FIELD.fullmatch(field):
            return f"a format field {field[:40]!r} that reads attributes or items"
        if spec and ("{" in spec or "}" in spec):
            return "a nested format field"
    return None


_SET_VIEW_ARGS = ("storage_offset", "size", "stride")


def call_refusal(op: str, target: Any, args: tuple, kwargs: dict) -> str | None:
    """Why this call, with these arguments, may not run (rules that depend on the arguments):
    ``Tensor.set_`` given a storage offset, size or stride; ``higher_order.print`` with a
    format string that reads attributes."""
    is_set = (op == "call_method" and target == "set_") or (op == "call_function" and target is getattr(torch.Tensor, "set_", None))
    if is_set and (len(args) > 1 or any(k in kwargs for k in ("source", *_SET_VIEW_ARGS))):
        return "Tensor.set_ with a source re-points a tensor at other memory"
    params = _python_parameters(target) if op == "call_function" else ()
    if "max_norm" in params:  # F.embedding(max_norm=...) runs embedding_renorm_, which doesn't check its indices
        i = params.index("max_norm")
        if kwargs.get("max_norm", args[i] if i < len(args) else None) is not None:
            return f"{_name(target)} with max_norm renormalizes rows by indices it does not check"
    if op == "call_function" and isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        schemas = [target._schema] if isinstance(target, torch._ops.OpOverload) else [o._schema for o in _overloads(target)]
        for schema in schemas:
            given, value = _schema_arg(schema, "unsafe", args, kwargs)
            if given and value is not False:
                return f"the op {schema.name} with unsafe={value!r} skips its bounds checks"
    if op == "call_function" and isinstance(target, torch._ops.HigherOrderOperator) and target.name() == "print":
        fmt = args[0] if args else kwargs.get("format_str")
        why = format_refusal(fmt)
        if why:
            return f"higher_order.print with {why}"
    return None


def _python_parameters(fn: Any) -> tuple[str, ...]:
    code = getattr(fn, "__code__", None)
    return tuple(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) if code is not None else ()


def _op_refusal(obj: Any) -> str | None:
    if isinstance(obj, torch._ops.HigherOrderOperator):
        return None
    ns, op, overload = op_parts(obj)
    name = f"{ns}::{op}"
    full = f"{name}.{overload}" if overload else name
    if ns in DENIED_OP_NAMESPACES or name in DENIED_OPS or full in DENIED_OPS:
        return f"the op {name} reads or writes files"
    if isinstance(obj, torch._ops.OpOverload):
        return schema_refusal(obj._schema)
    for overload in _overloads(obj):  # a packet picks its overload by the arguments: any refused one refuses it
        why = schema_refusal(overload._schema)
        if why:
            return why
    return None


def _overloads(packet: Any) -> list[Any]:
    try:
        return [getattr(packet, n) for n in packet.overloads()]
    except Exception:
        return []


def is_allowed_function(obj: Any) -> bool:
    """Whether ``obj`` may be a ``call_function`` target (see the module docstring)."""
    return refusal(obj) is None


def refusal(obj: Any) -> str | None:
    """Why ``obj`` may not be a graph target, or None if it may."""
    if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return _op_refusal(obj)
    if id(obj) in _allowed_ids() or id(obj) in _EXTRA_IDS:
        return None
    try:
        if obj in _EXTRA:
            return None
    except TypeError:
        pass
    if _is_graphdbg_stand_in(obj) or _in_registered_namespace(obj) or (_DEFERRED and _deferred_allowed(obj)):
        return None
    if isinstance(obj, types.ModuleType):
        return "a module is not a graph operation"
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and (_unchecked_by_name(name) or _wraps_unchecked(obj)) \
            and str(getattr(obj, "__module__", "") or "torch").startswith("torch"):
        return f"the op {name} reads or writes memory by values it does not check against the tensor's bounds"
    return "not a graph operation"


def _is_graphdbg_stand_in(obj: Any) -> bool:
    # Stand-ins are plain functions graphdbg's own code makes after loading (rebuild/stand_ins.py,
    # the compile-cache reader); a graph can't name them, it only gets them by replacement.
    if type(obj).__name__ == "MissingOp" and type(obj).__module__ == "graphdbg.rebuild.stand_ins":
        return True
    code = getattr(obj, "__code__", None)
    return (isinstance(obj, types.FunctionType) and str(obj.__module__).startswith("graphdbg.") and code is not None
            and os.path.dirname(os.path.abspath(code.co_filename)).startswith(_PACKAGE_DIR))


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graphdbg/, this is graphdbg/graph/


def _in_registered_namespace(obj: Any) -> bool:

    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or not callable(obj):
        return False
    return any(module == ns or module.startswith(ns + ".") for ns in allowed_namespaces())


def check_value(value: Any) -> str | None:
    """Why a constant argument may not appear in a graph, or None. Callables must be allowed
    targets; classes, the few in ``_ALLOWED_CLASSES``; anything else a plain constant."""
    if isinstance(value, (list, tuple)):
        return next((r for r in map(check_value, value) if r), None)
    if isinstance(value, dict):
        return next((r for r in map(check_value, [*value.keys(), *value.values()]) if r), None)
    if isinstance(value, fx.Node):
        return None
    if isinstance(value, type):
        if value in _ALLOWED_CLASSES or refusal(value) is None:
            return None
        return f"the class {value.__module__}.{value.__qualname__}"
    if isinstance(value, _CONSTANT_TYPES):
        return None
    if callable(value):
        why = refusal(value)
        return f"{_name(value)}: {why}" if why else None
    return f"a constant of type {type(value).__name__}"


_DANGEROUS_VALUES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                     types.FrameType, types.CodeType, types.GeneratorType, types.CoroutineType, types.TracebackType,
                     type, torch.nn.Module)


def _input_refusal(value: Any, depth: int = 0) -> str | None:
    if depth > 20:
        return "nested too deeply"
    if isinstance(value, (list, tuple)):
        return next((r for v in value if (r := _input_refusal(v, depth + 1))), None)
    if isinstance(value, dict):
        return next((r for v in value.values() if (r := _input_refusal(v, depth + 1))), None)
    if isinstance(value, _DANGEROUS_VALUES):
        return f"an input of type {type(value).__name__}"
    return None


def check_graph_module(gm: fx.GraphModule, inputs: Iterable[Any] | None = None) -> None:
    """Refuse (GraphSourceError naming the node) a GraphModule that does anything outside the
    allow-list, or inputs that are code, modules or frames. Run right before a replay runs."""
    where = getattr(gm, "_graphdbg_file", None)
    inputs = list(inputs) if inputs is not None else None
    given = dict(zip((n for n in gm.graph.nodes if n.op == "placeholder"), inputs or ()))
    for prefix, mod in [(n, m) for n, m in gm.named_modules() if isinstance(m, fx.GraphModule)]:
        for node in mod.graph.nodes:
            why = _node_refusal(mod, node)
            if not why and inputs is not None:  # an index backward's indices, on the values given (none in a subgraph)
                why = index_refusal(node, given if mod is gm else {})
            if why:
                name = f"{prefix}.{node.name}" if prefix else node.name
                line = node.meta.get("graphdbg_lineno")
                raise GraphSourceError(f"refusing node {name} ({node.format_node()[:120]}): {why}", file=where,
                                       line=line if where else None)
    for i, value in enumerate(inputs or ()):
        why = _input_refusal(value)
        if why:
            raise GraphSourceError(f"refusing input {i}: {why} can't be handed to a replayed graph", file=where)


def _node_refusal(mod: fx.GraphModule, node: fx.Node) -> str | None:
    if node.op in ("call_function", "call_method"):
        why = call_refusal(node.op, node.target, node.args, node.kwargs)
        if why:
            return why
    if node.op == "call_function":
        why = refusal(node.target)
        if why:
            return f"{_name(node.target)}: {why}"
        if node.target is builtins.getattr:
            attr = node.args[1] if len(node.args) > 1 else None
            if not isinstance(attr, str) or attr not in ALLOWED_ATTRIBUTES:
                return f"reading attribute {attr!r} is not allowed"
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            # a higher-order op calls what it is handed: a method read with getattr would run with
            # arguments no check saw (``x.type("a.module")`` imports by name); call_method checks them
            for arg in _nodes_in((node.args, node.kwargs)):
                if _reads_method(arg):
                    return f"a method read through getattr ({arg.args[1]!r}) handed to {_name(node.target)}"
    elif node.op == "call_method":
        if node.target not in allowed_methods():
            return f"method .{node.target}() is not allowed"
        if node.target == "type" and any(isinstance(a, str) for a in (*node.args[1:], *node.kwargs.values())):
            return "method .type() with a type name is not allowed"
    elif node.op == "get_attr":
        value = _attr(mod, str(node.target))
        if not isinstance(value, (torch.Tensor, fx.GraphModule, torch.nn.Module, int, float, bool, type(None))):
            return f"attribute of type {type(value).__name__}"
        return None
    elif node.op == "call_module":
        sub = _attr(mod, str(node.target))
        if not isinstance(sub, torch.nn.Module):
            return f"{node.target} is not a module"
        cls = type(sub)
        if not (isinstance(sub, fx.GraphModule) or cls.__module__.startswith("torch.nn.modules.")):
            return f"module class {cls.__module__}.{cls.__qualname__} is not allowed"
    if node.op in ("call_function", "call_method", "call_module"):
        return check_value((node.args, node.kwargs))
    return None


# Allowed attribute names that are methods when read off a tensor (``type``): read with getattr
# they are bound methods, which only call_method may call, with its checks on the arguments.
_METHOD_ATTRIBUTES = frozenset(a for a in ALLOWED_ATTRIBUTES if type(inspect.getattr_static(torch.Tensor, a, None)).__name__
                               in ("method_descriptor", "function", "builtin_function_or_method"))


def _nodes_in(value: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg(value, lambda n: found.append(n) or n)
    return found


def _reads_method(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target is builtins.getattr and len(node.args) > 1
            and node.args[1] in _METHOD_ATTRIBUTES)


def _attr(mod: torch.nn.Module, target: str) -> Any:
    obj: Any = mod
    for part in target.split("."):
        if part.startswith("__"):
            return None
        obj = getattr(obj, part, None)
    return obj


def _name(obj: Any) -> str:
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return f"{module}.{qual}" if module and qual else repr(obj)[:60]
