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
from their repr) is a named stand-in.

    >>> dump = load_torch_repro("graphdbg/fixtures/torch_minifier/after_aot/repro.py")
    >>> dump.backend, [d["stored"] is not None for d in dump.manifest["inputs"]]
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

from graphdbg.formats import register
from graphdbg.errors import GraphdbgError, GraphSourceError
from graphdbg.formats.file_dump import FileDump, manifest_for
from graphdbg.rebuild.inputs import StandIn
from graphdbg.graph_parser import AttrConstruction, PrintedGraph, _dotted, parse_module_class, resolve_target
from graphdbg.specs import TensorSpec, dtype_name, eval_dim

__all__ = ["ReproDump", "detect_format", "load_torch_repro", "read_storage_bytes"]

FORMAT = "torch_minifier"
# load_args._version this reader understands (torch writes 0; a bump means an FC-breaking change).
LOAD_ARGS_VERSION = 0
# The nn classes torch's minifier prints as constructors (NNModuleToString.safe_reprs).
SAFE_MODULES = frozenset({
    "Linear", "Conv1d", "Conv2d", "Conv3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "Dropout",
    "Softmax", "ReLU", "GELU", "Identity", "MaxPool2d", "Embedding", "Tanh", "ConvTranspose1d", "GLU", "LSTM",
    "Flatten", "AdaptiveAvgPool2d",
})
_MAX_DETECT_BYTES = 64 << 20


def detect_format(path: str | Path) -> str | None:
    """``"torch_minifier"`` if ``path`` is a minifier script (a ``.py`` file with ``class Repro``
    and ``def load_args``), else None. Reads the text only; parses nothing."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py" or path.stat().st_size > _MAX_DETECT_BYTES:
        return None
    try:
        text = path.read_text(errors="replace")
    except OSError:
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
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise GraphdbgError(f"{path}: cannot read ({type(e).__name__})") from None
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
            stride = [int(d) for d in pos[2]] if len(pos) > 2 else _contiguous(shape)
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
            return z.read(entries[0])  # zipfile stops at the declared size and checks the CRC
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
    candidates = [Path(save_dir)] if isinstance(save_dir, str) and save_dir else []
    candidates += [here / "checkpoints", here]
    if isinstance(save_dir, str) and save_dir:
        candidates.append(here / Path(save_dir).name)
    for c in candidates:
        if (c / "storages").is_dir():
            return c
    return None


# --- the Dump --------------------------------------------------------------------------


class ReproDump(FileDump):
    """A minifier script as a Dump: ``case()`` rebuilds its module and inputs."""

    def __init__(self, repro: ReproFile):
        self.repro = repro
        self.store = find_store(repro)
        inputs = [self._describe(a) for a in repro.args]
        placeholders = [n for n in repro.printed.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(repro.args):
            raise GraphSourceError(f"Repro.forward takes {len(placeholders)} inputs, load_args gives {len(repro.args)}",
                                   file=str(repro.path), line=repro.args[-1].lineno if repro.args else 1)
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
                                    "variant": repro.variant, "store": str(self.store) if self.store else None,
                                    **{k: v for k, v in opts.items() if isinstance(v, (str, bool, int, type(None)))}}})
        super().__init__(repro.path, manifest, repro.printed)

    def _describe(self, a: ArgCall) -> dict[str, Any]:
        if a.kind == "tensor":
            st = self.repro.storages[a.storage]
            found = self.store is not None and st.hash is not None and (self.store / "storages" / st.hash).is_file()
            return {"name": a.name, "kind": "tensor", "dtype": dtype_name(a.dtype), "shape": a.shape, "stride": a.stride,
                    "device": st.device, "requires_grad": a.requires_grad, "storage_offset": a.storage_offset,
                    "stored": st.hash if found else None, "storage": a.storage,
                    **({} if found else {"reason": "not saved" if st.hash is None else "storage not found"})}
        if a.kind == "symint":
            return {"name": a.name, "kind": "symint", "expr": a.expr or str(a.value), "hint": a.value}
        if a.kind == "generator":
            return {"name": a.name, "kind": "opaque", "type": "torch.Generator", "device": a.value[0]}
        if a.kind == "const":
            return {"name": a.name, "kind": "none"}
        return {"name": a.name, "kind": "opaque", "type": str(a.value or a.kind)}

    def case(self, device: str | torch.device | None = None, *, seed: int = 0):
        """The Repro module and its inputs on ``device``; stand-ins for what the file lacks."""
        from graphdbg.case import Case, retarget_devices

        dev = self.resolve_device(device)
        stand_ins: list[StandIn] = []
        storages = self._storages(dev, seed, stand_ins)
        inputs: list[Any] = []
        for a, d in zip(self.repro.args, self.manifest["inputs"]):
            inputs.append(self._input(a, d, storages, dev, stand_ins))
        self._apply_fixups(inputs, stand_ins)
        attrs = {c.name: self._attr(c, dev, seed, stand_ins) for c in self.repro.printed.inits}
        gm = self.repro.printed.to_module(attrs, missing_attr=self._missing_attr)
        moved = retarget_devices(gm, self.captured_device, dev)
        if dev != self.captured_device:
            what = f"captured on {self.captured_device}, replayed on {dev}"
            if moved:
                what += f"; device literals moved in {', '.join(moved[:5])}" + (" ..." if len(moved) > 5 else "")
            stand_ins.append(StandIn("graph", "device", what))
        return Case(gm=gm, inputs=inputs, device=dev, stand_ins=stand_ins, dump=self)

    def _missing_attr(self, name: str, spec: Any) -> Any:
        raise GraphSourceError(f"Repro.forward uses self.{name}, which __init__ does not build", file=str(self.path))

    def _storages(self, dev: torch.device, seed: int, stand_ins: list[StandIn]) -> dict[str, torch.Tensor]:
        """Each storage as a uint8 tensor on ``dev``; tensors are views of these, so inputs that
        shared a storage in the user's run share it here too."""
        out: dict[str, torch.Tensor] = {}
        users: dict[str, list[str]] = {}
        for a in self.repro.args:
            if a.kind == "tensor":
                users.setdefault(a.storage, []).append(a.name)
        for var, st in self.repro.storages.items():
            raw = None
            if self.store is not None and st.hash is not None and (self.store / "storages" / st.hash).is_file():
                raw = read_storage_bytes(self.store / "storages" / st.hash, st.nbytes)
                if len(raw) != st.nbytes:
                    raise GraphdbgError(f"{self.store / 'storages' / st.hash}: {len(raw)} bytes, load_args says {st.nbytes}")
                data = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            else:
                data = _random_bytes(st, seed, var)
                why = "not saved by the minifier" if st.hash is None else f"storage {st.hash} not found"
                for name in users.get(var, []):
                    stand_ins.append(StandIn(name, "regenerated", f"random {dtype_name(st.dtype_hint)} data ({why})"))
            out[var] = data.to(dev)
        return out

    def _input(self, a: ArgCall, d: dict[str, Any], storages: dict[str, torch.Tensor], dev: torch.device,
               stand_ins: list[StandIn]) -> Any:
        if a.kind == "tensor":
            base = storages[a.storage]
            itemsize = a.dtype.itemsize
            extent = a.storage_offset + 1 + sum((s - 1) * st for s, st in zip(a.shape, a.stride)) if all(a.shape) else 0
            if extent * itemsize > base.numel():
                raise GraphSourceError(f"input {a.name}: {a.shape} with stride {a.stride} needs {extent * itemsize} bytes, "
                                       f"its storage has {base.numel()}", file=str(self.path), line=a.lineno)
            t = torch.empty(0, dtype=a.dtype, device=dev)
            t.set_(base.untyped_storage(), a.storage_offset, a.shape, a.stride)
            if a.requires_grad and (a.dtype.is_floating_point or a.dtype.is_complex):
                t.requires_grad_(True)
            return t
        if a.kind == "symint":
            return a.value
        if a.kind == "generator":
            stand_ins.append(StandIn(a.name, "generator", f"a fresh torch.Generator on {dev}"))
            return torch.Generator(device=dev)
        if a.kind != "const":
            stand_ins.append(StandIn(a.name, a.kind, f"{a.value or a.kind} could not be saved by the minifier; passed as None"))
        return None

    def _apply_fixups(self, inputs: list[Any], stand_ins: list[StandIn]) -> None:
        # What the minifier's own load_args does for repeat_interleave: random repeats must
        # still add up to the output size the graph was traced with.
        regenerated = {s.name for s in stand_ins if s.kind == "regenerated"}
        for ri, oi in self.repro.fixups:
            if ri < len(inputs) and oi < len(inputs) and self.repro.args[ri].name in regenerated:
                rep, size = inputs[ri], inputs[oi]
                if isinstance(rep, torch.Tensor) and rep.dtype == torch.int64 and isinstance(size, int) and rep.numel():
                    rep.fill_(size // rep.numel())
                    rep.view(-1)[: size % rep.numel()] += 1

    def _attr(self, c: AttrConstruction, dev: torch.device, seed: int, stand_ins: list[StandIn]) -> Any:
        where = f"{self.path}:{c.lineno}"
        if c.kind == "module":
            if c.func not in SAFE_MODULES:
                raise GraphSourceError(f"refusing module constructor {c.func} for self.{c.name} (not one torch's minifier prints)",
                                       file=str(self.path), line=c.lineno)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + c.lineno)
                try:
                    mod = getattr(torch.nn, c.func)(*c.args, **c.kwargs)
                except Exception as e:
                    raise GraphSourceError(f"cannot build {c.func} for self.{c.name}: {e}", file=str(self.path), line=c.lineno) from None
            if any(True for _ in mod.parameters()) or any(True for _ in mod.buffers()):
                stand_ins.append(StandIn(c.name, "regenerated", f"{c.func} with fresh weights (the minifier does not save module weights)"))
            return mod.to(dev)
        value = _factory(c, seed, where)
        exact = c.func in ("tensor", "torch.tensor", "torch.zeros", "torch.ones", "torch.full")
        if not exact:
            stand_ins.append(StandIn(c.name, "regenerated", f"{c.func}{list(value.shape)} as the script writes it "
                                                           f"(the minifier does not save {c.kind}s over 4 elements)"))
        value = value.to(dev)
        if c.kind == "parameter":
            return torch.nn.Parameter(value, requires_grad=value.is_floating_point())
        return value


def load_torch_repro(path: str | Path) -> ReproDump:
    """Read a minifier script as a Dump without running any of it.

        >>> dump = load_torch_repro("minifier_launcher.py")
        >>> dump.inputs_table()[["name", "dtype", "shape", "stored"]]
    """
    return ReproDump(read_repro(path))


# --- small readers ------------------------------------------------------------------------


def _factory(c: AttrConstruction, seed: int, where: str) -> torch.Tensor:
    """The tensor one of the minifier's buffer expressions describes, made by graphdbg:
    literal data for ``tensor([...])``, seeded random data for ``torch.randn``/``randint``."""
    kw = dict(c.kwargs)
    dtype = kw.pop("dtype", None)
    kw.pop("device", None)  # the replay device decides
    kw.pop("requires_grad", None)
    if c.func in ("tensor", "torch.tensor"):
        if len(c.args) != 1:
            raise GraphdbgError(f"{where}: tensor() takes one literal")
        return torch.tensor(c.args[0], dtype=dtype)
    gen = torch.Generator().manual_seed(seed + _crc(c.name))
    size = kw.pop("size", None)
    if c.func in ("torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty"):
        shape = size if size is not None else (c.args[0] if len(c.args) == 1 and isinstance(c.args[0], (list, tuple)) else c.args)
        shape = [int(s) for s in shape]
        dtype = dtype or torch.float32
        if c.func == "torch.randn":
            return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        if c.func == "torch.rand":
            return torch.rand(shape, generator=gen, dtype=torch.float32).to(dtype)
        if c.func == "torch.ones":
            return torch.ones(shape, dtype=dtype)
        return torch.zeros(shape, dtype=dtype)  # empty: any value is right, zeros are reproducible
    if c.func == "torch.randint":
        # the minifier writes torch.randint(1, size=[...]) (all zeros) or randint(low, high, size)
        bounds = [int(b) for b in c.args]
        low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        return torch.randint(low, max(high, low + 1), [int(s) for s in size or []], generator=gen).to(dtype or torch.int64)
    if c.func == "torch.full" and len(c.args) == 2:
        return torch.full([int(s) for s in c.args[0]], c.args[1], dtype=dtype)
    raise GraphdbgError(f"{where}: unsupported constructor {c.func} for self.{c.name}")


def _random_bytes(st: StorageCall, seed: int, var: str) -> torch.Tensor:
    """Random data of the storage's dtype hint, as bytes; what torch's own reader does, seeded."""
    dtype = st.dtype_hint
    n = st.nbytes // dtype.itemsize
    gen = torch.Generator().manual_seed(seed + _crc(var))
    if dtype == torch.bool:
        vals = torch.rand(n, generator=gen) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        vals = torch.randn(n, generator=gen).to(dtype)
    else:
        # small non-negative integers: valid indices and counts for any dimension of size >= 2
        vals = torch.randint(0, 2, (n,), generator=gen).to(dtype)
    raw = vals.view(torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
    if raw.numel() < st.nbytes:
        raw = torch.cat([raw, torch.zeros(st.nbytes - raw.numel(), dtype=torch.uint8)])
    return raw


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
    return _dotted(expr, None)


def _is_main_guard(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name) and stmt.test.left.id == "__name__")


def _comment_name(lines: list[str], stmt: ast.stmt) -> str | None:
    # InputWriter ends each reader call with `# <placeholder name>`.
    line = lines[(stmt.end_lineno or stmt.lineno) - 1] if (stmt.end_lineno or stmt.lineno) <= len(lines) else ""
    m = re.search(r"#\s*([A-Za-z_][\w.\[\]]*)", line.split(")", 1)[-1] if ")" in line else "")
    return m.group(1) if m else None


def _contiguous(shape: list[int]) -> list[int]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return list(reversed(stride))


def _crc(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _failer(path: Path):
    def fail(message: str, where: ast.AST | int) -> GraphSourceError:
        line = where if isinstance(where, int) else getattr(where, "lineno", 1)
        return GraphSourceError(message, file=str(path), line=line or 1)

    return fail


register('torch_minifier', lambda p: p.is_file() and detect_format(p) is not None, load_torch_repro, priority=10)
