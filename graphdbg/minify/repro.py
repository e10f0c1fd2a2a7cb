"""write_repro: a repro.py that needs torch (and the backend) and nothing of graphdbg.

    >>> write_repro(result.case, "mypkg.backends:mine", "bug/repro.py", outcome=result.outcome)
    $ python bug/repro.py        # exit 1 while the bug is there, 0 once it is fixed, 2 for another failure

The graph is embedded as Python source (fx's generated ``forward``, with an import line for
every global it uses). Inputs go to ``repro_inputs.pt`` next to it through ``torch.save`` of
plain tensors and scalars, loaded back with ``weights_only=True``: torch alone reads it (no
safetensors dependency for whoever receives the bug report), and weights-only loading
unpickles nothing but tensors and containers.
"""

from __future__ import annotations

import io
import math
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from graphdbg.backends.carry import carry_backend, import_rule_source, say_once
from graphdbg.backends.compiler_config import python_lines, replay_settings
from graphdbg.backends.resolve import backend_label, backend_spec
from graphdbg.case import Case
from graphdbg.errors import GraphdbgError
from graphdbg.graph.kernels import custom_ops
from graphdbg.judge.accuracy import SCALE_FLOOR, TOLERANCES
from graphdbg.judge.op_names import op_name, op_parts
from graphdbg.judge.signature import unwrapped_error
from graphdbg.outcome import Outcome
from graphdbg.rebuild.inputs import NullEvent, NullStream
from graphdbg.rebuild.kernel_source import kernels_as_captured, kernels_module, recorded_kernels
from graphdbg.replay.as_captured import python_lines as as_captured_lines
from graphdbg.replay.graph_meta import meta_source, recorded_meta
from graphdbg.replay.mutation import mutated_inputs
from graphdbg.replay.training_replay import differentiable_inputs, fails_in_backward, is_backward_dump, recorded_tangents
from graphdbg.store.safe_files import write_file
from graphdbg.store.specs import SymSpec, TensorSpec

INPUTS_FILE = "repro_inputs.pt"


def _global_line(name: str, obj: Any) -> str:
    """Python that binds ``name`` to ``obj`` in the repro, or GraphdbgError."""
    if isinstance(obj, types.ModuleType):
        return f"import {obj.__name__}" if name == obj.__name__ else f"import {obj.__name__} as {name}"
    if op_parts(obj) is not None:  # an OpOverload or an OpOverloadPacket
        return f"{name} = {op_name(obj, overload=True, python=True)}"
    if isinstance(obj, (torch.dtype, torch.device)):
        return f"{name} = {obj!r}".replace("device(", "torch.device(")
    if obj is type(None):
        return f"{name} = type(None)"
    if isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
        return f"{name} = float({str(obj)!r})"
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qual and "<" not in qual:
        return f"{name} = _resolve({module!r}, {qual!r})"
    raise GraphdbgError(f"the repro can't name {name} = {obj!r}")


def graph_source(gm: fx.GraphModule) -> tuple[str, str]:
    """(prelude binding the globals, the ``forward`` source) for a GraphModule. A higher-order
    op (``torch.ops.higher_order.cond``, ``autograd_function_apply``) is called through an alias
    that ``torch.fx.wrap`` makes a node when the repro traces the graph, instead of running it."""
    code = gm.graph.python_code(root_module="self")
    lines = []
    for name, obj in sorted(code.globals.items()):
        if name == "torch":
            continue
        lines.append(_global_line(name, obj))
    src = code.src
    for hop in sorted(set(re.findall(r"torch\.ops\.higher_order\.(\w+)\(", src))):
        src = src.replace(f"torch.ops.higher_order.{hop}(", f"_hop_{hop}(")
        lines += [f"_hop_{hop} = torch.ops.higher_order.{hop}", f"torch.fx.wrap({'_hop_' + hop!r})"]
    return "\n".join(lines), src


def nested_sources(gm: fx.GraphModule) -> tuple[list[str], str, dict[str, list[tuple[str, str]]]]:
    """(prelude lines, class definitions, {class: [(attribute, class)]}) for ``gm`` as ``Repro``
    and every GraphModule under it that its graph reads (a higher-order op's branches and bodies),
    each traced on its own in the repro before its parent."""
    prelude: list[str] = []
    classes: list[str] = []
    children: dict[str, list[tuple[str, str]]] = {}

    def visit(mod: fx.GraphModule, cls: str) -> None:
        lines, forward = graph_source(mod)
        prelude.extend(line for line in lines.splitlines() if line not in prelude)
        children[cls] = []
        for node in mod.graph.nodes:
            sub = _get_attr(mod, node.target) if node.op == "get_attr" else None
            if isinstance(sub, fx.GraphModule) and "." not in node.target:
                child = f"{cls}_{node.target}"
                children[cls].append((node.target, child))
                visit(sub, child)
        classes.append(f"class {cls}(torch.nn.Module):\n{_indent(forward.strip(chr(10)))}")

    visit(gm, "Repro")
    return prelude, "\n\n".join(classes), children


def _graph_tensors(gm: fx.GraphModule, prefix: str = "") -> dict[str, torch.Tensor]:
    """The tensors ``gm``'s graph and the graphs under it read, by dotted path from the top."""
    found: dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                found[prefix + node.target] = value.detach().cpu()
            elif isinstance(value, fx.GraphModule):
                found.update(_graph_tensors(value, f"{prefix}{node.target}."))
    return found


def _storable(value: Any) -> Any:
    """What repro_inputs.pt holds for an input: tensors on the CPU, streams and events as a note
    to make a new one (they can't be saved, and a fresh one on the replay device is what
    graphdbg's own replay uses too)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (torch.Stream, NullStream)):
        return {"recreate": "stream"}
    event_types = tuple(t for t in (getattr(torch, "Event", None), getattr(torch._C, "_CudaEventBase", None), NullEvent) if t)
    if isinstance(value, event_types):
        return {"recreate": "event"}
    return value


def write_repro(case: Case, backend: Any, path: str | Path, *, outcome: Outcome | None = None, direct: bool = True,
                passes: Any = None, trust_kernels: bool = False) -> Path:
    """Write ``path`` (a standalone repro.py) and its inputs file beside it; returns ``path``.

    ``outcome`` is the failure to recognise (default: run once now). A crash is recognised by
    exception type plus message with numbers and addresses masked; a mismatch by comparing
    against eager (float64 where it can) with graphdbg's per-dtype tolerances.

    Nothing the dump names enters the folder unless the user trusted it (docs/trust.md): the
    graph's Triton kernels' recorded source only with ``trust_kernels``, a custom op's module only
    when this process has the op (``--ops``, the backend: the user's own imports), never a name
    from the manifest, and the backend's files never from inside the dump.
    """
    if passes:
        raise GraphdbgError("repro.py runs the backend alone; minify without --passes, or bisect the passes")
    path = Path(path)
    if outcome is None:
        outcome = case.run(backend, direct=direct)
    with kernels_as_captured(case.gm) as called:  # a Triton kernel's call printed as captured, by kernel_idx
        prelude_lines, classes, children = nested_sources(case.gm)
    kernels = own_kernels(case, called, path.parent, trust_kernels)
    prelude = "\n".join([*kernels.lines, *(ln for ln in prelude_lines if not ln.startswith(kernels.replaces))])
    attrs = _graph_tensors(case.gm)
    inputs = [_storable(v) for v in case.inputs]
    for v in inputs:
        if not isinstance(v, (torch.Tensor, int, float, bool, type(None), dict)):
            raise GraphdbgError(f"repro.py can't store an input of type {type(v).__name__}")
    backward = fails_in_backward(case.dump)
    grad = [i for i, v in enumerate(differentiable_inputs(case.inputs)) if isinstance(v, torch.Tensor) and v.requires_grad] if backward else []
    tangents = recorded_tangents(case) if backward else None
    saved = io.BytesIO()  # written by the gate's writer: a link planted at repro_inputs.pt is replaced, not followed
    torch.save({"inputs": inputs, "attrs": attrs, "device": str(case.device),
                **({"tangents": [t.detach().cpu() for t in tangents]} if tangents else {})}, saved)
    write_file(path.parent / INPUTS_FILE, saved.getbuffer())

    source = case.dump.manifest.backend_source if case.dump is not None else None
    recorded = source.path if source is not None else None
    carried = carry_backend(backend_spec(backend, strict=False), path.parent, recorded, dump=_dump_path(case))
    backend_ref, paths = carried.spec, [*carried.paths, *(p for p in kernels.paths if p not in carried.paths)]
    shown = backend_label(backend_ref)  # a recipe, as people read it, in a comment beside it
    backend_line = repr(str(backend_ref)) + (f"  # {' '.join(shown.split())}" if shown != backend_ref else "")

    # the failure as graphdbg's signature names it: Inductor's and Dynamo's wrappers unwrapped
    error_type, message = unwrapped_error(outcome.error_type or "", outcome.message or "")
    expect = {"status": outcome.status, "error_type": error_type or None,
              "message": message.strip().splitlines()[0] if message.strip() else ""}
    tol = {str(k).replace("torch.", ""): v for k, v in TOLERANCES.items()}
    settings = replay_settings(case.dump.manifest_data if case.dump is not None else None)
    config = "\n".join(["# Compiler settings of the captured run (non-default values; graphdbg show lists them)",
                        "import torch._inductor.config", "import torch._dynamo.config", "import torch._functorch.config",
                        *python_lines(settings)]) if settings else ""
    captured_lines = as_captured_lines(case.dump.manifest_data if case.dump is not None else None)
    config = "\n".join([config, *captured_lines]).strip("\n")
    # Data enters the script only through repr (a message with quotes or `C:\\xtemp` in it stays a
    # string), and the script must compile before it is written: a repro that is a SyntaxError
    # would exit 1 forever, which reads as "the bug is still there".
    text = _TEMPLATE.format(config=config, prelude=prelude, classes=classes, children=repr(children), backend=backend_line,
                            direct=repr(bool(direct)), expect=repr(expect), tol=repr(tol), floor=repr(SCALE_FLOOR), inputs=repr(INPUTS_FILE),
                            nodes=int(len(case.gm.graph.nodes)), captured=repr(str(case.device)),
                            summary=repr(outcome.summary()), node_names=repr([(n.op, n.name) for n in case.gm.graph.nodes]),
                            paths=repr(paths), copied=repr(carried.scripts), modules=repr(carried.modules), rule=import_rule_source(), dynamic=repr(_dynamic_dims(case.gm)),
                            meta=meta_source(), recorded=repr(recorded_meta(case.gm, case.dump, name_only=True)),
                            mutated=repr(sorted(mutated_inputs(case.gm))),
                            backward=repr(backward), grad=repr(grad), boxed=repr(_boxed_caller(case.dump)),
                            wide=repr(not (called or custom_ops(case.gm))))
    try:
        compile(text, str(path), "exec")
    except SyntaxError as e:
        raise GraphdbgError(f"{path}: the generated repro does not compile ({e.msg} at line {e.lineno}); "
                            "please report this") from None

    written = write_file(path, text)
    say_once([*carried.notes, *kernels.notes])  # minify saves after every step: each line once
    return written


@dataclass
class OwnKernels:
    """What a repro needs of the graph's own kernels: prelude lines, the prelude lines of the
    graph they replace (``startswith``), sys.path folders relative to the repro, notes."""
    lines: list[str] = field(default_factory=list)
    replaces: tuple[str, ...] = ()
    paths: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


KERNELS_FILE = "repro_kernels.py"


def own_kernels(case: Case, called: list[int], folder: Path, trust_kernels: bool = False) -> OwnKernels:
    """The repro's own kernels, so that it runs without the user's package: with
    ``trust_kernels``, each user Triton kernel the graph calls, defined from the source its dump
    recorded in ``repro_kernels.py`` beside the repro (``rebuild/kernel_source.py``'s text), and
    its calls launching it; each custom op the graph calls that this process has (the user's
    ``--ops`` or backend registered it), its defining module brought along as a backend's is
    (``backends/carry.py``: from the user's own folder only, never from the dump) and imported
    first. The manifest's ``custom_ops[].module`` names nothing here: it is the dump's word."""
    out = OwnKernels()
    manifest = case.dump.manifest_data if case.dump is not None else None
    recorded = recorded_kernels(manifest, called) if called else []
    if recorded and not trust_kernels:
        out.notes.append("repro.py: the graph's Triton kernels were not written from the source the dump recorded "
                         "(code from the dump's author): minify --trust-kernels writes them to repro_kernels.py")
    text, why = kernels_module(recorded) if recorded and trust_kernels else ("", {})
    for idx, reason in why.items():
        out.notes.append(f"repro.py: Triton kernel kernel_idx={idx} can't be defined there ({reason}): it needs the user's package")
    try:
        compile(text, KERNELS_FILE, "exec")
    except SyntaxError as e:  # a recorded source that is no Python: the repro can't define the kernels
        out.notes.append(f"repro.py: the graph's Triton kernels' recorded source does not compile ({e.msg}): they need the user's package")
        text = ""
    if text:
        write_file(folder / KERNELS_FILE, text)
        out.lines += [_KERNELS_PRELUDE]
        out.replaces = ("_hop_triton_kernel_wrapper_mutation =", "_hop_triton_kernel_wrapper_functional =")
        out.notes.append(f"wrote the graph's Triton kernels, from the source the dump recorded, to {folder / KERNELS_FILE}")
    modules = {o["name"]: o.get("module") for o in custom_ops(case.gm)}  # the ops it calls, as this process registered them
    for op, module in sorted((op, m) for op, m in modules.items() if m and m not in ("__main__", "__mp_main__")):
        try:
            carried = carry_backend(f"{module}:{op.split('::')[-1].split('.')[0]}", folder, dump=_dump_path(case),
                                    user_folder_only=True)
        except GraphdbgError as e:
            out.notes.append(f"repro.py: the module of {op} was not brought along ({e})")
            continue
        # the folder's copy last, after where the module was (a fix there shows): a repro run isolated (-I) has no script folder
        out.paths = [*(p for p in out.paths if p != "."), *(p for p in carried.paths if p not in out.paths),
                     *(["."] if carried.files or "." in out.paths else [])]
        out.notes += [n.replace("the backend's", f"{op}'s") for n in carried.notes]
        line = f"importlib.import_module({carried.spec.partition(':')[0]!r})  # defines torch.ops.{op.replace('::', '.')}"
        if line not in out.lines:
            out.lines.insert(0, line)
    return out


_KERNELS_PRELUDE = '''
# The graph's user Triton kernels, defined in repro_kernels.py beside this file from the source
# the dump recorded (edit it there to try a fix); each call launches one as Dynamo's wrapper did.
import importlib.util
_kspec = importlib.util.spec_from_file_location("repro_kernels", Path(__file__).parent / "repro_kernels.py")
repro_kernels = sys.modules["repro_kernels"] = importlib.util.module_from_spec(_kspec)
_kspec.loader.exec_module(repro_kernels)


def _hop_triton_kernel_wrapper_mutation(*, kernel_idx, constant_args_idx, grid, tma_descriptor_metadata, kwargs):
    repro_kernels.launch(kernel_idx, constant_args_idx, grid, kwargs)


def _hop_triton_kernel_wrapper_functional(*, kernel_idx, constant_args_idx, grid, tma_descriptor_metadata, kwargs,
                                          tensors_to_clone):
    kwargs = {k: (v.clone() if k in tensors_to_clone else v) for k, v in kwargs.items()}
    repro_kernels.launch(kernel_idx, constant_args_idx, grid, kwargs)
    return {k: kwargs[k] for k in tensors_to_clone}
'''


def _dump_path(case: Case) -> Path | None:
    """The folder (or file) of the dump ``case`` came from: nothing in it is copied into a repro."""
    return Path(case.dump.path) if case.dump is not None and getattr(case.dump, "path", None) else None


def _boxed_caller(dump: Any) -> bool:
    """Whether the graph's compiled code was called by AOTAutograd or a splitting backend (a
    backward graph, a nested piece), which call boxed code with one list; Dynamo calls the code
    it gets for a graph of its own positionally, whatever the code says."""
    if dump is None:
        return True  # a Case of no dump: as before, boxed code gets its list
    return is_backward_dump(dump) or dump.manifest.piece


def _dynamic_dims(gm: Any) -> list[Any]:
    """Per placeholder: the dims its captured annotation has symbolic, "sym" for a SymInt, else []."""
    out: list[Any] = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        spec = n.meta.get("graphdbg_symbolic_spec", n.meta.get("graphdbg_spec"))
        if isinstance(spec, SymSpec):
            out.append("sym")
        elif isinstance(spec, TensorSpec):
            out.append([i for i, d in enumerate(spec.shape) if isinstance(d, str)])
        else:
            out.append([])
    return out


def _get_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _indent(src: str) -> str:
    return "\n".join(("    " + ln) if ln.strip() else "" for ln in src.splitlines())


_TEMPLATE = '''#!/usr/bin/env python
"""Standalone repro written by graphdbg minify: torch and the backend, nothing else.

The failure it looks for is FAILURE below. Graph: {nodes} nodes. Inputs: INPUTS_FILE below
(torch.save, loaded with weights_only=True).
Exit codes: 1 while the bug is there, 0 once it is fixed, 2 when it fails some other way.
Run with another backend: python repro.py --backend eager
The backend runs in a child process, so a segfault or abort is an answer too (--in-process: not).
"""
import argparse
import functools
import hashlib
import importlib
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

EXPECT = {expect}


def arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default=None, help="another backend than BACKEND below")
    parser.add_argument("--device", default=None)
    parser.add_argument("--in-process", action="store_true", help="don't run the backend in a child process")
    return parser.parse_args()


def in_a_child():
    """This file again, --in-process, in a child: a backend that dies by a signal still gets an answer."""
    code = subprocess.call([sys.executable, __file__, "--in-process", *sys.argv[1:]])
    if code >= 0:
        return code
    name = signal.Signals(-code).name
    same = EXPECT["status"] == "crash" and EXPECT["error_type"] == name
    print(("REPRODUCED: " if same else "FAILED DIFFERENTLY: ") + f"Signal {{name}}")  # the captured signature's words
    print(f"the backend's process was killed by {{name}}")
    return 1 if same else 2


if __name__ == "__main__" and not arguments().in_process:
    sys.exit(in_a_child())  # before torch is imported: only the child needs it

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.fx  # noqa: E402

_TORCH = torch  # torch itself, while a graph is traced (``_Traced``)

# Where the backend's modules were, relative to this file's folder. MODULES: the backend's modules
# copied beside this file; yours is imported wherever it is importable (from BACKEND_PATHS, else
# from sys.path), the copy only where it is not, so that a fix shows here (own_modules_first, below).
# COPIED: a script's definitions copied here (file: [the script, relative to this folder; its sha256 then]).
BACKEND_PATHS = {paths}
MODULES = {modules}
COPIED = {copied}


{rule}

for _line in own_modules_first(Path(__file__).parent, BACKEND_PATHS, Path(__file__).parent, MODULES):
    print(f"note: {{_line}}", file=sys.stderr)
for _name, (_origin, _sha) in COPIED.items():
    _script = Path(__file__).parent / _origin
    if _script.is_file() and hashlib.sha256(_script.read_bytes()).hexdigest() != _sha:
        print(f"note: {{_origin}} changed since {{_name}} was copied from it; this repro runs the copy "
              "(graphdbg minify again to take the change)", file=sys.stderr)


def _resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


{config}

{prelude}

FAILURE = {summary}
INPUTS_FILE = {inputs}
BACKEND = {backend}
DYNAMIC = {dynamic}  # per input: the dims captured symbolic ("sym": a SymInt), traced dynamic as captured
DIRECT = {direct}  # True: backend(GraphModule, inputs), as graphdbg minify ran it; False: torch.compile
TOLERANCES = {tol}  # (rtol, atol); atol for magnitude 1, scaled for smaller values down to SCALE_FLOOR
SCALE_FLOOR = {floor}
NODE_NAMES = {node_names}
BACKWARD = {backward}  # True: the failure was in the backward; run forward, then backward (inputs GRAD require grad)
GRAD = {grad}
WIDE = {wide}  # False: the graph calls its own kernels (Triton, custom ops), which have no float64 code and would read
# float64 buffers as their own dtype (on a GPU, an illegal memory access): no float64 reference then
BOXED_CALLER = {boxed}  # True: AOTAutograd (or a splitting backend) called this graph's compiled code; False: Dynamo, positionally
TANGENTS = None  # the captured backward's tangents (from INPUTS_FILE), when it stored them
# The node meta the backend's graph gets, as Dynamo gives it and graphdbg's replay does (dynamo_meta,
# below): fake example_value/val, tensor_meta, source_fn_stack; RECORDED_META: each node's
# stack_trace and nn_module_stack as the dump recorded them; MUTATED: the inputs the graph writes.
RECORDED_META = {recorded}
MUTATED = {mutated}


CHILDREN = {children}  # the graphs a graph's higher-order ops read, by class: (attribute, class)


{classes}



def _from_recipe(recipe):
    """aot_autograd(...) or functools.partial(...) again, from the parts recorded at capture."""
    def part(p):
        if "value" in p:
            return p["value"]
        if "recipe" in p:
            return _from_recipe(p["recipe"])
        if "callable" not in p:
            raise LookupError(f"the backend's part {{p.get('unrecorded')}} was not recorded; run with --backend")
        return _resolve(*p["callable"].split(":", 1))

    if recipe["kind"] == "aot_autograd":
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(**{{k: part(v) for k, v in recipe["kwargs"].items()}})
    return functools.partial(part(recipe["func"]), *[part(a) for a in recipe.get("args", [])],
                             **{{k: part(v) for k, v in recipe.get("keywords", {{}}).items()}})


def load_backend(ref):
    if ref.startswith("recipe:{{"):  # aot_autograd(...) / functools.partial, as recorded at capture
        return _from_recipe(json.loads(ref[len("recipe:"):]))
    if ":" in ref:
        obj = _resolve(*ref.split(":", 1))
        return obj() if isinstance(obj, type) else obj
    if ref == "thunder":  # Lightning Thunder's ThunderCompiler, by its short name
        from thunder.dynamo import ThunderCompiler

        return ThunderCompiler()
    from torch._dynamo import lookup_backend

    return lookup_backend(ref)


def masked(text):
    text = (text.strip().splitlines() or [""])[0]
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    return re.sub(r"\\d+", "?", text)


def build(device):
    global TANGENTS
    data = torch.load(Path(__file__).with_name(INPUTS_FILE), weights_only=True)
    TANGENTS = data.get("tangents")
    inputs = [_rebuild(v, device) for v in data["inputs"]]
    return _named(_traced("Repro", "", data["attrs"], device)), inputs


def _traced(cls, prefix, attrs, device):
    """An instance of ``cls`` traced to a GraphModule, with its tensors, after the graphs it reads."""
    mod = globals()[cls]()
    kids = CHILDREN.get(cls, [])
    for attr, child in kids:
        mod.add_module(attr, _traced(child, prefix + attr + ".", attrs, device))
    for name, value in attrs.items():
        rest = name[len(prefix):]
        if not name.startswith(prefix) or rest.split(".")[0] in {{a for a, _ in kids}}:
            continue  # a tensor of another graph
        owner = mod
        *path, last = rest.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_buffer(last, value.to(device))
    tracer, real = torch.fx.Tracer(), torch
    globals()["torch"] = _Traced(real)  # the graphs' code calls torch.<fn>: through _Traced while traced
    try:
        graph = tracer.trace(mod)
    finally:
        globals()["torch"] = real
    for node in graph.nodes:  # a wrapped higher-order op is the op itself from here on
        node.meta.pop("is_wrapped", None)
    return torch.fx.GraphModule(mod, graph, cls)


class _Traced:
    """``torch`` (or a part of it) while a graph is traced: a call given a traced value becomes the
    graph's node. fx alone cannot pass a traced size to torch's C functions: ``torch.ones(s0, s0)``
    raises a TypeError before fx sees it."""

    _PLAIN = (type, _TORCH.dtype, _TORCH.device, int, float, str, bool, type(None))

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        value = getattr(self._obj, name)
        return value if isinstance(value, self._PLAIN) else _Traced(value)

    def __call__(self, *args, **kwargs):
        leaves = _TORCH.utils._pytree.tree_leaves((args, kwargs))
        proxy = next((a for a in leaves if isinstance(a, _TORCH.fx.Proxy)), None)
        if proxy is None:
            return self._obj(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", self._obj, args, kwargs)


def _named(gm):
    """The captured graph's node names back (tracing names a node by its op): a backend's message may name a node."""
    nodes = list(gm.graph.nodes)
    if [n.op for n in nodes] != [op for op, _ in NODE_NAMES]:
        return gm
    for node in nodes:
        node._rename(f"_repro_{{node.name}}")
    for node, (_, name) in zip(nodes, NODE_NAMES):
        node._rename(name)
    gm.recompile()
    return gm


class _NoOpStream:
    """Stands in for a CUDA stream or event on a machine without CUDA: waits do nothing."""

    def wait_stream(self, other):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event

    def record(self, stream=None):
        return None

    def wait(self, stream=None):
        return None

    def synchronize(self):
        return None


def _rebuild(value, device):
    if isinstance(value, dict) and "recreate" in value:  # a stream or event: made anew here
        device = torch.device(device)
        if device.type != "cuda":
            return _NoOpStream()
        return torch.cuda.Stream(device=device) if value["recreate"] == "stream" else torch.cuda.Event()
    return value.to(device) if isinstance(value, torch.Tensor) else value


def as_called(compiled):
    """Compiled code called the way its caller calls it: one list for a boxed function
    (``_boxed_call``, as AOTAutograd calls a forward or backward compiler's code), else positional."""
    if getattr(compiled, "_boxed_call", False):
        return lambda *args: compiled(list(args))
    return compiled


{meta}


def with_meta(gm, inputs):
    """``gm`` with the node meta Dynamo gives a backend (``dynamo_meta``, above: graphdbg's replay gives the same)."""
    return dynamo_meta(gm, inputs, RECORDED_META, writes=lambda: MUTATED)


def run_backend(gm, inputs, backend):
    return compiled(gm, inputs, backend)(*inputs)


def compiled(gm, inputs, backend):
    """The graph compiled by ``backend``, to be called on ``inputs`` (traced dynamic as captured)."""
    fn = load_backend(backend)
    # a registered backend (inductor) is called as Dynamo calls it; a compiler of AOTAutograd's
    # (boxed code) the way AOTAutograd calls it
    registered = isinstance(backend, str) and backend in torch._dynamo.list_backends(exclude_tags=())
    call = as_called if BOXED_CALLER and not registered else (lambda c: c)
    if DIRECT:
        return lambda *args: call(fn(*_handed(gm, [x.clone() if isinstance(x, torch.Tensor) else x for x in args])))(*args)
    torch._dynamo.reset()
    dynamic = any(DYNAMIC)
    if dynamic:  # exactly the captured symbolic dims dynamic: a failure that needs a symbolic size keeps it
        for x, dims in zip(inputs, DYNAMIC):
            if isinstance(x, torch.Tensor) and isinstance(dims, list):
                for d in range(x.dim()):
                    if d not in dims:
                        torch._dynamo.mark_static(x, d)
    # through torch.compile: Dynamo's own meta (example_value), with val and tensor_meta added as replay adds them
    return torch.compile(gm, backend=lambda g, ex: call(fn(with_meta(g, ex), ex)), dynamic=dynamic)


def _handed(gm, inputs):
    """(graph, inputs) as handed to the backend called directly: the graph with Dynamo's node meta."""
    return with_meta(gm, inputs), inputs


def with_grad(inputs):
    """Fresh copies of the inputs; those in GRAD are leaves that require grad."""
    out = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            x = x.detach().clone().requires_grad_(i in GRAD)
        out.append(x)
    return out


def forward_backward(fn, inputs, tangents=None):
    """Outputs and input gradients of ``fn``: the failure was captured in the backward."""
    with torch.enable_grad():
        out = fn(*inputs)
        outs = [o for o in leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if tangents is None:
            tangents = recorded_tangents(outs)
        grads = torch.autograd.grad(outs, [inputs[i] for i in GRAD], [t.to(o.device, o.dtype) for t, o in zip(tangents, outs)],
                                    allow_unused=True)
    detached = [o.detach() if isinstance(o, torch.Tensor) else o for o in leaves(out)]
    return detached + list(grads), tangents


def recorded_tangents(outs):
    """The tangents the captured backward received, where they fit; else seeded randn."""
    given = TANGENTS
    if given is not None and len(given) == len(outs) and all(t.shape == o.shape for t, o in zip(given, outs)):
        return [t.to(o.device, o.dtype) for t, o in zip(given, outs)]
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device, o.dtype) for o in outs]


def run_training(gm, inputs, backend):
    """Eager, float64 and ``backend``: forward, then backward; outputs and gradients."""
    ref, tangents = forward_backward(gm, with_grad(inputs))
    try:
        if not WIDE:
            raise TypeError("no float64 reference: the graph's own kernels have no float64 code")
        wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        ref64, _ = forward_backward(gm, with_grad(wide), [t.double() for t in tangents])
    except Exception:
        ref64 = None
    xs = with_grad(inputs)
    got, _ = forward_backward(compiled(gm, xs, backend), xs, tangents)
    return ref, ref64, got


def leaves(out):
    return [o for o in (out if isinstance(out, (tuple, list)) else [out])]


def written(out, inputs):
    """The outputs, then the tensor inputs as the call left them: a graph that writes its
    inputs in place (an optimizer step) is judged by what it wrote."""
    return leaves(out) + [x for x in inputs if isinstance(x, torch.Tensor)]


def copies(inputs, dtype=None):
    """Copies of the tensor inputs (floating ones as ``dtype``), so a call may write them."""
    return [(x.to(dtype, copy=True) if dtype is not None and x.is_floating_point() else x.clone())
            if isinstance(x, torch.Tensor) else x for x in inputs]


def mismatched(ref, ref64, got, outputs=None):
    """The first value of ``got`` off ``ref``; those from index ``outputs`` on are inputs after the call."""
    for i, (r, g) in enumerate(zip(leaves(ref), leaves(got))):
        what = f"output {{i}}" if outputs is None or i < outputs else f"input {{i - outputs}} after the call"
        if not isinstance(r, torch.Tensor):
            if r != g:
                return f"{{what}}: {{g!r}} != {{r!r}}"
            continue
        if not isinstance(g, torch.Tensor) or g.shape != r.shape or g.dtype != r.dtype:
            return f"{{what}}: shape/dtype differ"
        rtol, atol = TOLERANCES.get(str(r.dtype).replace("torch.", ""), (0.0, 0.0))
        if r.is_floating_point() and r.numel():  # the dtype's atol is for magnitude 1 (judge.accuracy.Tolerance.for_value)
            atol *= min(1.0, max(SCALE_FLOOR, r.detach().abs().nan_to_num(0.0, 0.0, 0.0).max().item()))
        if torch.isnan(r).ne(torch.isnan(g)).any():
            return f"{{what}}: NaNs differ"
        if torch.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
            continue
        if ref64 is not None:
            r64 = leaves(ref64)[i].to(torch.float64)
            own = (r.to(torch.float64) - r64).abs().max()
            if (g.to(torch.float64) - r64).abs().max() <= 2 * own + atol:
                continue  # as close to float64 as eager itself
        return f"{{what}}: max abs error {{(g.double() - r.double()).abs().max().item():.3g}}"
    return None


def main():
    args = arguments()
    backend = args.backend or BACKEND
    device = args.device or ("cuda" if torch.cuda.is_available() and "cuda" in {captured} else "cpu")
    gm, inputs = build(device)
    outputs = None
    with torch.set_grad_enabled(BACKWARD):
        if not BACKWARD:
            eager = copies(inputs)
            ref = gm(*eager)
            outputs, ref = len(leaves(ref)), written(ref, eager)
            try:
                if not WIDE:
                    raise TypeError("no float64 reference: the graph's own kernels have no float64 code")
                wide = copies(inputs, torch.float64)
                ref64 = written(gm(*wide), wide)
            except Exception:
                ref64 = None
        try:
            if BACKWARD:
                ref, ref64, got = run_training(gm, inputs, backend)
            else:
                got = written(run_backend(gm, inputs, backend), inputs)
        except Exception as e:
            inner = e
            while type(inner).__name__ in ("BackendCompilerFailed", "InductorError") and getattr(inner, "inner_exception", None):
                inner = inner.inner_exception  # the backend's own error, as the captured signature names it
            same = EXPECT["status"] == "crash" and type(inner).__name__ == EXPECT["error_type"] and masked(str(inner)) == masked(EXPECT["message"])
            print(("REPRODUCED: " if same else "FAILED DIFFERENTLY: ") + f"{{type(inner).__name__}}: {{str(inner).strip().splitlines()[0] if str(inner).strip() else ''}}")
            return 1 if same else 2
    bad = mismatched(ref, ref64, got, outputs)
    if bad:
        print(("REPRODUCED: " if EXPECT["status"] == "mismatch" else "FAILED DIFFERENTLY: ") + bad)
        return 1 if EXPECT["status"] == "mismatch" else 2
    print("FIXED: the backend compiled and ran, and its outputs agree with eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
