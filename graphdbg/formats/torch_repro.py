"""PyTorch minifier scripts (``repro.py``, ``minifier_launcher.py``) read as dumps, never run.

torch's minifier (``TORCHDYNAMO_REPRO_AFTER=aot|dynamo``) writes a script holding
``class Repro(torch.nn.Module)`` (``__init__`` builds buffers, parameters and nn modules;
``forward`` is fx codegen), ``def load_args(reader)`` (one ``reader.storage`` /
``reader.tensor`` / ``reader.symint`` call per input), ``mod = Repro()`` and a ``run_repro``
call under ``__main__``. Its tensors, when it saved them, are in a content store
(``<save_dir>/storages/<hash>``, one ``torch.save``'d storage per file).

We read all of it from the AST. Saved storages are read without unpickling: a ``torch.save``
file is a zip archive whose ``<name>/data/<key>`` entry holds the storage's raw bytes, and a
content-store file holds exactly one storage, so those bytes are the whole value; the pickle
(``data.pkl``) that describes them is never opened. Whatever the file does not bring back
(a storage not found, weights the minifier replaced with ``torch.randn``, nn modules rebuilt
from their repr) is a named stand-in. The reader describes each input as a view of a named
storage (``storage``, ``storage_offset``, ``stride``) and hands the store to the Dump as its
``Contents``; ``Dump.case()`` does the rest, as for every other file.

    >>> dump = load_torch_repro("fixtures/torch_minifier/after_aot/repro.py")
    >>> dump.backend, [d["stored"] is not None for d in dump.manifest_data["inputs"]]
    ('inductor', [True])
    >>> case = dump.case("cpu", seed=0)
    >>> case.run("eager").status
    'pass'
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphdbg.dump import Contents, Dump
from graphdbg.errors import GraphdbgError, GraphSourceError
from graphdbg.formats import manifest_for, register
from graphdbg.graph.parser import PrintedGraph, dotted_or, parse_module_class, resolve_target
from graphdbg.rebuild.inputs import contiguous_strides
from graphdbg.store.safe_files import inflate_member, inside, read_regular
from graphdbg.store.specs import TensorSpec, dtype_name, eval_dim

__all__ = ["MinifierStore", "detect_format", "load_torch_repro", "read_storage_bytes"]

FORMAT = "torch_minifier"
# load_args._version this reader understands (torch writes 0; a bump means an FC-breaking change).
LOAD_ARGS_VERSION = 0
_MAX_DETECT_BYTES = 64 << 20


def detect_format(path: str | Path) -> str | None:
    """``"torch_minifier"`` if ``path`` is a minifier script (a ``.py`` file with ``class Repro``
    and ``def load_args``), else None. Reads the text only; parses nothing."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py" or path.stat().st_size > _MAX_DETECT_BYTES:
        return None
    try:
        text = read_regular(path, max_bytes=_MAX_DETECT_BYTES).decode("utf-8", errors="replace")
    except (OSError, GraphdbgError):
        return None
    if re.search(r"^class Repro\(", text, re.M) and re.search(r"^def load_args\(", text, re.M):
        return FORMAT
    return None


# --- what the file says -------------------------------------------------------------


@dataclass
class StorageCall:
    """``bufN = reader.storage(hash, nbytes, device=..., dtype_hint=...)``."""

    var: str
    hash: str | None
    nbytes: int
    device: str
    dtype_hint: torch.dtype
    lineno: int


@dataclass
class ArgCall:
    """One input, in ``load_args`` order: a tensor on a storage, a symint, or something else."""

    kind: str  # "tensor" | "symint" | "const" | "unsupported" | "opaque" | "generator"
    name: str
    lineno: int
    storage: str | None = None
    shape: list[int] = field(default_factory=list)
    stride: list[int] | None = None
    dtype: torch.dtype = torch.float32
    storage_offset: int = 0
    requires_grad: bool = False
    value: Any = None  # a symint's value; a generator's device
    expr: str | None = None  # a symint's symbol


@dataclass
class ReproFile:
    """Everything a minifier script says, read from its AST."""

    path: Path
    variant: str  # "after_aot" | "after_dynamo"
    printed: PrintedGraph
    storages: dict[str, StorageCall]
    args: list[ArgCall]
    symbols: dict[str, int]
    options: dict[str, Any]  # run_repro keywords: command, accuracy, save_dir, backend, tracing_mode
    torch_version: str | None
    fixups: list[tuple[int, int]]  # (repeats index, output size index) for repeat_interleave


def read_repro(path: str | Path) -> ReproFile:
    """Parse a minifier script; GraphSourceError (file and line) for anything unreadable."""
    path = Path(path)
    source = read_regular(path, max_bytes=_MAX_DETECT_BYTES, text=True)
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise GraphSourceError(f"not a readable minifier script (truncated?): {e.msg}", file=str(path), line=e.lineno or 1) from None
    fail = _failer(path)
    load_args = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "load_args"]
    if not any(isinstance(s, ast.ClassDef) and s.name == "Repro" for s in tree.body):
        raise fail("not a PyTorch minifier script: no `class Repro(torch.nn.Module)`", 1)
    if not load_args:
        raise fail("minifier script without `def load_args(reader)` (truncated?)", len(source.splitlines()) or 1)
    printed = parse_module_class(source, "Repro", filename=str(path), tree=tree)
    symbols, options, version, variant = {}, {}, None, "after_dynamo"
    for stmt in tree.body:
        # `s0 = 8`: the minifier's hints for the size symbols the tensors' shapes use.
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Constant) and type(stmt.value.value) is int):
            symbols[stmt.targets[0].id] = stmt.value.value
        # `load_args._version = 0`
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
                and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == "load_args"
                and stmt.targets[0].attr == "_version" and isinstance(stmt.value, ast.Constant)):
            if not isinstance(stmt.value.value, int) or stmt.value.value > LOAD_ARGS_VERSION:
                raise fail(f"load_args._version {stmt.value.value!r} is newer than this graphdbg reads ({LOAD_ARGS_VERSION})", stmt)
        if _is_main_guard(stmt):
            for node in ast.walk(stmt):
                if isinstance(node, ast.ImportFrom) and node.module == "torch._dynamo.repro.after_aot":
                    variant = "after_aot"
                if isinstance(node, ast.Call) and _name_of(node.func) == "run_repro":
                    options = {k.arg: _constant(k.value) for k in node.keywords if k.arg}
                    break
    if m := re.search(r"^# torch version: (\S+)", source, re.M):
        version = m.group(1)
    storages, args, fixups = _read_load_args(load_args[0], source.splitlines(), symbols, fail)
    return ReproFile(path, variant, printed, storages, args, symbols, options, version, fixups)


def _read_load_args(fn: ast.FunctionDef, lines: list[str], symbols: dict[str, int], fail) -> tuple[dict, list, list]:
    reader = fn.args.args[0].arg if fn.args.args else "reader"
    storages: dict[str, StorageCall] = {}
    args: list[ArgCall] = []
    fixups: list[tuple[int, int]] = []

    def literal(expr: ast.expr) -> Any:
        if isinstance(expr, ast.Name) and expr.id in storages:
            return expr.id  # `reader.tensor(buf0, ...)`
        try:
            return _literal(expr, symbols)
        except ValueError as e:
            raise fail(f"{e} in `{ast.unparse(expr)[:100]}`", expr) from None

    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # the minifier's best-effort notes after an unsupported input
        if isinstance(stmt, ast.If) and "hasattr" in ast.unparse(stmt.test):
            # The repeat_interleave fixup: `_repeats = reader.args[i]`, `_output_size = reader.args[j]`.
            idx = [n.slice.value for n in ast.walk(stmt) if isinstance(n, ast.Subscript)
                   and _name_of(n.value) == f"{reader}.args" and isinstance(n.slice, ast.Constant)]
            if len(idx) == 2:
                fixups.append((idx[0], idx[1]))
                continue
        call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
        method = _name_of(call.func) if isinstance(call, ast.Call) else None
        if method is None or not method.startswith(reader + "."):
            raise fail(f"unsupported statement in load_args: `{ast.unparse(stmt)[:100]}`", stmt)
        method = method[len(reader) + 1:]
        pos = [literal(a) for a in call.args]
        kw = {k.arg: literal(k.value) for k in call.keywords if k.arg}
        name = _comment_name(lines, stmt) or f"arg{len(args)}"
        if method == "storage":
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)) or len(pos) < 2:
                raise fail(f"unexpected reader.storage call: `{ast.unparse(stmt)[:100]}`", stmt)
            device = kw.get("device") or "cpu"
            storages[stmt.targets[0].id] = StorageCall(stmt.targets[0].id, pos[0], int(pos[1]), str(device),
                                                       kw.get("dtype_hint") or torch.float32, stmt.lineno)
        elif method == "tensor":
            buf = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
            if buf not in storages or len(pos) < 2:
                raise fail(f"reader.tensor on an unknown storage: `{ast.unparse(stmt)[:100]}`", stmt)
            shape = [int(d) for d in pos[1]]
            stride = [int(d) for d in pos[2]] if len(pos) > 2 else contiguous_strides(shape)
            args.append(ArgCall("tensor", name, stmt.lineno, buf, shape, stride, kw.get("dtype") or torch.float32,
                                int(kw.get("storage_offset") or 0), bool(kw.get("requires_grad", False))))
        elif method == "symint":
            args.append(ArgCall("symint", name, stmt.lineno, value=pos[0] if pos else None, expr=kw.get("expr")))
        elif method in ("const", "unsupported", "opaque"):
            args.append(ArgCall(method, pos[0] if pos and isinstance(pos[0], str) and method != "opaque" else name, stmt.lineno,
                                value=pos[0] if pos else None))
        elif method == "generator":
            args.append(ArgCall("generator", name, stmt.lineno, value=(pos + [None, None])[:2]))
        else:
            raise fail(f"unknown reader method {method!r} (a newer torch's minifier?)", stmt)
    return storages, args, fixups


# --- the saved tensors -----------------------------------------------------------------


def read_storage_bytes(path: str | Path, nbytes: int | None = None) -> bytes:
    """The raw bytes of the one storage a content-store file holds, without unpickling.

    ``torch.save`` writes a zip archive: ``<root>/data.pkl`` (a pickle naming the storages)
    and ``<root>/data/<key>`` (each storage's bytes). The content store saves exactly one
    storage per file, so the single ``data/<key>`` entry is its value. Only that entry is
    read; the pickle is never opened, so nothing in the file can run.

        >>> read_storage_bytes("checkpoints/storages/8f1c...")[:4]
        b'\\x8f\\xc2\\xf5='
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            entries = [n for n in names if re.fullmatch(r"[^/]+/data/[^/]+", n)]
            if len(entries) != 1:
                raise GraphdbgError(f"{path}: expected one storage in the archive, found {len(entries)}")
            order = [n for n in names if re.fullmatch(r"[^/]+/byteorder", n)]
            if order and (z.getinfo(order[0]).file_size > 16 or z.read(order[0]).strip() not in (b"little", b"")):
                raise GraphdbgError(f"{path}: big-endian storage; this reader only reads little-endian")
            declared = z.getinfo(entries[0]).file_size
            if nbytes is not None and declared != nbytes:
                # checked before decompressing: a zip bomb never gets to inflate
                raise GraphdbgError(f"{path}: the storage holds {declared} bytes, load_args says {nbytes}")
        # bounded by the declared size and an absolute cap: a member that inflates past what it
        # declares stops there (store.safe_files.inflate_member)
        return inflate_member(path, entries[0], declared=declared)
    except zipfile.BadZipFile:
        raise GraphdbgError(f"{path}: not a torch.save zip archive (truncated?)") from None
    except OSError as e:
        raise GraphdbgError(f"{path}: cannot read ({type(e).__name__})") from None


def find_store(repro: ReproFile) -> Path | None:
    """The content-store folder with this script's storages, or None.

    The script names it (``save_dir=``), but that is an absolute path on the machine that ran
    the minifier; a copied repro keeps its store next to it (``checkpoints/``, as torch lays
    out ``minifier_launcher.py``), so those places are looked at too.
    """
    here = repro.path.parent
    save_dir = repro.options.get("save_dir")
    # Only beside the script: the script's own absolute save_dir may name any folder on this machine.
    candidates = [here / "checkpoints", here]
    if isinstance(save_dir, str) and save_dir and Path(save_dir).name not in ("", ".", ".."):
        candidates.append(here / Path(save_dir).name)
    for c in candidates:
        if not c.is_symlink() and (c / "storages").is_dir() and not (c / "storages").is_symlink():
            return c
    return None


def _stored(store: Path, name: str) -> Path | None:
    """The storage file ``name`` inside ``store/storages``: a regular file reached through no link."""
    try:
        return inside(store, f"storages/{name}") if "/" not in name and "\\" not in name else None
    except GraphdbgError:
        return None


# --- the Dump --------------------------------------------------------------------------


class MinifierStore(Contents):
    """A minifier script's ``class Repro`` and its content store: ``read`` gives back each
    saved storage's raw bytes (as uint8) by its hash."""

    def __init__(self, repro: ReproFile, store: Path | None):
        super().__init__(repro.path, printed=repro.printed)
        self.store = store
        # what load_args says each storage holds: a zip entry declaring more is refused unread
        self.nbytes = {st.hash: st.nbytes for st in repro.storages.values() if st.hash}

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for key in keys:
            if self.store is None:
                raise GraphdbgError(f"{self.graph_file}: storage {key} asked for, but no content store was found")
            raw = read_storage_bytes(inside(self.store, f"storages/{key}"), self.nbytes.get(key))
            out[key] = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        return out


def load_torch_repro(path: str | Path) -> Dump:
    """Read a minifier script as a Dump without running any of it.

        >>> dump = load_torch_repro("minifier_launcher.py")
        >>> dump.inputs_table()[["name", "dtype", "shape", "stored"]]
    """
    repro = read_repro(path)
    store = find_store(repro)
    placeholders = [n for n in repro.printed.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(repro.args):
        raise GraphSourceError(f"Repro.forward takes {len(placeholders)} inputs, load_args gives {len(repro.args)}",
                               file=str(repro.path), line=repro.args[-1].lineno if repro.args else 1)
    inputs = [_describe(repro, store, a) for a in repro.args]
    for ri, oi in repro.fixups:
        if ri < len(inputs):
            inputs[ri]["sums_to"] = oi
    for node, arg, desc in zip(placeholders, repro.args, inputs):
        desc["node"] = node.name
        if arg.kind == "tensor":  # forward has no annotations; load_args has the specs
            node.meta["graphdbg_spec"] = TensorSpec.from_dict(desc)
    opts = repro.options
    accuracy = opts.get("accuracy")
    kind = "accuracy" if accuracy not in (None, False, "") else "captured"
    backend = opts.get("backend") if repro.variant == "after_dynamo" else "inductor"
    message = (f"PyTorch minifier script ({repro.variant}, command {opts.get('command', 'run')!r}); "
               "it records the graph and its inputs, not the error")
    attrs = {c.name: {"kind": c.kind, "func": c.func, "device": c.device, "line": c.lineno} for c in repro.printed.inits}
    manifest = manifest_for(repro.path, repro.printed, fmt=FORMAT, inputs=inputs, attrs=attrs,
                            backend=str(backend or "eager"), kind=kind, message=message,
                            extra={"env": {"torch": repro.torch_version}, "minifier": {
                                "variant": repro.variant, "store": str(store) if store else None,
                                **{k: v for k, v in opts.items() if isinstance(v, (str, bool, int, type(None)))}}})
    return Dump(repro.path, manifest, MinifierStore(repro, store))


def _describe(repro: ReproFile, store: Path | None, a: ArgCall) -> dict[str, Any]:
    """One input's descriptor: a tensor is a view of a named storage (saved or not)."""
    if a.kind == "tensor":
        st = repro.storages[a.storage]
        found = store is not None and st.hash is not None and _stored(store, st.hash) is not None
        reason = {} if found else {"reason": "not saved by the minifier" if st.hash is None else f"storage {st.hash} not found"}
        return {"name": a.name, "kind": "tensor", "dtype": dtype_name(a.dtype), "shape": a.shape, "stride": a.stride,
                "device": st.device, "requires_grad": a.requires_grad, "storage_offset": a.storage_offset,
                "stored": st.hash if found else None, "storage": a.storage, "storage_nbytes": st.nbytes,
                "storage_dtype": dtype_name(st.dtype_hint), "line": a.lineno, **reason}
    if a.kind == "symint":
        return {"name": a.name, "kind": "symint", "expr": a.expr or str(a.value), "hint": a.value}
    if a.kind == "generator":
        return {"name": a.name, "kind": "opaque", "type": "torch.Generator", "device": a.value[0]}
    if a.kind == "const":
        return {"name": a.name, "kind": "none"}
    return {"name": a.name, "kind": "opaque", "type": f"{a.value or a.kind} (the minifier could not save it)"}


# --- small readers ------------------------------------------------------------------------


def _literal(expr: ast.expr, symbols: dict[str, int]) -> Any:
    """Arguments of reader calls: constants, tuples (with size symbols), dtypes, devices."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, (ast.Tuple, ast.List)):
        items = [_literal(e, symbols) for e in expr.elts]
        return tuple(items) if isinstance(expr, ast.Tuple) else items
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
        return -expr.operand.value
    if isinstance(expr, (ast.Name, ast.BinOp)):
        try:
            return eval_dim(ast.unparse(expr), symbols)  # `s0`, `2*s0`: sizes from the hint lines
        except GraphdbgError as e:
            raise ValueError(str(e)) from None
    if isinstance(expr, ast.Attribute):
        name = _name_of(expr)
        if name and name.startswith("torch."):
            value = resolve_target(name)
            if isinstance(value, torch.dtype):
                return value
    if isinstance(expr, ast.Call) and _name_of(expr.func) in ("device", "torch.device"):
        args = [_literal(a, symbols) for a in expr.args]
        kwargs = {k.arg: _literal(k.value, symbols) for k in expr.keywords if k.arg}
        try:
            return str(torch.device(*args, **kwargs))
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"bad device ({e})") from None
    raise ValueError("not a constant")


def _constant(expr: ast.expr) -> Any:
    try:
        return ast.literal_eval(expr)
    except ValueError:
        return ast.unparse(expr)


def _name_of(expr: ast.expr) -> str | None:
    return dotted_or(expr, None)


def _is_main_guard(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name) and stmt.test.left.id == "__name__")


def _comment_name(lines: list[str], stmt: ast.stmt) -> str | None:
    # InputWriter ends each reader call with `# <placeholder name>`.
    line = lines[(stmt.end_lineno or stmt.lineno) - 1] if (stmt.end_lineno or stmt.lineno) <= len(lines) else ""
    m = re.search(r"#\s*([A-Za-z_][\w.\[\]]*)", line.split(")", 1)[-1] if ")" in line else "")
    return m.group(1) if m else None


def _failer(path: Path):
    def fail(message: str, where: ast.AST | int) -> GraphSourceError:
        line = where if isinstance(where, int) else getattr(where, "lineno", 1)
        return GraphSourceError(message, file=str(path), line=line or 1)

    return fail


register('torch_minifier', lambda p: p.is_file() and detect_format(p) is not None, load_torch_repro, priority=10)
