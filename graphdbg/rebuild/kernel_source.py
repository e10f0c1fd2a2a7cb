"""User Triton kernels defined again from the source a dump recorded (``--trust-kernels``), and
what ran for each of a graph's own kernels.

A printed graph calls a user Triton kernel by ``kernel_idx``, an index into Dynamo's side table
of the process that captured it; a replay elsewhere has no such table, so the call becomes a
stand-in that does nothing. Capture records the kernel's source, its constants and what its
source refers to (``graph/kernels.py``); with the user's trust, ``install_kernels`` defines the
kernel again from that text (``@triton.jit`` over the recorded source) and the graph's node
launches it, as the user's program did (``kernel[grid](**tensors, **constants)``), so eager runs
it and Dynamo captures it again under a backend.

That is code from the dump. It runs only when the user says ``--trust-kernels`` and only in a
sandboxed replay child (``execution/child.py``: ``$GRAPHDBG_SANDBOX_DIR`` is set there, and only
there): never in the graphdbg process, never in another.

    >>> why = install_kernels(case.gm, dump.manifest_data)      # in the replay child, before stand-ins
    >>> kernels_ran(case.gm, dump.manifest)
    [{'kernel': 'rms_norm_kernel', 'kind': 'triton_kernel', 'calls': 1, 'ran': 'from the dump', 'why': None}]
"""

from __future__ import annotations

import ast
import contextlib
import keyword
import linecache
import os
import re
import sys
import textwrap
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.graph.kernels import TRITON_WRAPPERS, custom_op_of, qualified_name

if TYPE_CHECKING:
    from graphdbg.store.schema import Manifest

# set in a sandboxed replay child only (execution/sandbox.py's FOLDER_ENV: tests/test_kernels.py checks they are one name)
SANDBOX_DIR_ENV = "GRAPHDBG_SANDBOX_DIR"
REAL, FROM_DUMP, STAND_IN = "real", "from the dump", "stand-in"
# modules a kernel's source may name as globals: Triton's own (importing any other module a dump names is not a kernel's business)
_KERNEL_MODULES = re.compile(r"(triton|math)(\..*)?")
_DEF = re.compile(r"^def\s+\w+\s*\(", re.MULTILINE)


def _wrapper_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for mod in gm.modules() if isinstance(mod, fx.GraphModule) for n in mod.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "") in TRITON_WRAPPERS
            and isinstance(n.kwargs.get("kernel_idx"), int)]


def install_kernels(gm: fx.GraphModule, manifest: Mapping[str, Any]) -> dict[int, str]:
    """Make each Triton kernel call of ``gm`` whose kernel the dump recorded with its source a
    launch of that kernel, defined from the source (``kernels_module``). Only in a sandboxed
    replay child (a GraphdbgError elsewhere). Returns, by ``kernel_idx``, why a kernel stays a
    stand-in (each such node's ``meta["graphdbg_kernel_why"]`` says it too)."""
    if not os.environ.get(SANDBOX_DIR_ENV):
        raise GraphdbgError("--trust-kernels runs a dump's kernel source only in the sandboxed replay child "
                            "(graphdbg replay/compare/bisect ops without --no-isolate)")
    nodes = _wrapper_nodes(gm)
    called = {n.kwargs["kernel_idx"] for n in nodes}
    entries = [k for k in manifest.get("triton_kernels") or [] if k.get("kernel_idx") in called]
    text, why = kernels_module(entries)
    namespace: dict[str, Any] = {}
    if text:
        try:
            import triton  # noqa: F401  # the replay machine's Triton: only a dump with kernels to define needs it
        except ImportError:
            why.update({k["kernel_idx"]: "Triton is not importable here" for k in entries if k["kernel_idx"] not in why})
        else:
            namespace = _exec_module(text, why, entries)
    defined = namespace.get("KERNELS", {})
    for node in nodes:
        idx, const_idx = node.kwargs["kernel_idx"], node.kwargs.get("constant_args_idx")
        reason = why.get(idx) or (None if idx in defined else "the dump did not record it")
        if reason is None and const_idx not in namespace.get("CONSTANTS", {}):
            reason = "the dump did not record this call's constant arguments"
        if reason is None and node.kwargs.get("tma_descriptor_metadata"):
            reason = "it takes TMA descriptors, which graphdbg does not rebuild"
        if reason is not None:
            node.meta["graphdbg_kernel_why"] = reason
            continue
        node.target = _launch(namespace["launch"], "tensors_to_clone" in node.kwargs, defined[idx][0])
        node.meta["graphdbg_kernel"] = FROM_DUMP
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            mod.recompile()
    return why


def _exec_module(text: str, why: dict[int, str], entries: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``text`` run as a module (``--trust-kernels``, in the sandboxed child: code from the dump).
    Triton reads a kernel's source back with ``inspect.getsource``: the text is put in
    ``linecache`` under a file name no file has."""
    filename = "graphdbg-dump-kernels.py"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    # a module in sys.modules: Dynamo, tracing through the launcher, imports its globals' module by name
    module = types.ModuleType("graphdbg_dump_kernels")
    try:
        exec(compile(text, filename, "exec"), module.__dict__)
    except Exception as e:
        shown = f"its source does not define a kernel here ({type(e).__name__}: {str(e).strip()[:200]})"
        why.update({k["kernel_idx"]: shown for k in entries if k["kernel_idx"] not in why})
        return {}
    sys.modules[module.__name__] = module
    return module.__dict__


class KernelUnavailable(Exception):
    """Why a recorded kernel can't be defined (it stays a stand-in)."""


def kernels_module(entries: list[Mapping[str, Any]]) -> tuple[str, dict[int, str]]:
    """The text of a Python module that defines the kernels ``entries`` (a manifest's
    ``triton_kernels`` items) from their recorded source, with what their source refers to,
    and ``launch(kernel_idx, constant_args_idx, grid, kwargs)`` that launches one as the
    wrapper node did. The same text runs in the replay child (``--trust-kernels``) and is
    written beside a minified repro (``repro_kernels.py``). Also, by ``kernel_idx``, why a
    kernel is left out. "" when none can be defined."""
    why: dict[int, str] = {}
    parts: list[str] = []
    constants: dict[int, Any] = {}
    for entry in entries:
        try:
            parts.append(_kernel_text(entry))
        except KernelUnavailable as e:
            why[entry["kernel_idx"]] = str(e)
            continue
        for idx, call in (entry.get("constant_args_by_call") or {}).items():
            if str(idx).isdigit():
                constants[int(idx)] = dict(call)
    if not parts:
        return "", why
    return "\n".join([_MODULE_HEAD, *parts, f"CONSTANTS = {constants!r}", _LAUNCH]), why


_MODULE_HEAD = '''"""User Triton kernels of a graph, defined from the source a graphdbg dump recorded."""
import triton
import triton.language as tl

KERNELS = {}  # kernel_idx: (the kernel, None or its autotune configs: [(config kwargs, index of its grid)])
'''

_LAUNCH = '''

def launch(kernel_idx, constant_args_idx, grid, kwargs):
    """Launch a kernel as Dynamo's wrapper called it: its tensors, the call's recorded constants, its grid
    (an autotuned kernel's: the grid Dynamo recorded for the config that runs)."""
    kernel, configs = KERNELS[kernel_idx]
    nested = isinstance(grid, (list, tuple)) and grid and isinstance(grid[0], (list, tuple))
    grids = [tuple(g) for g in grid] if nested else [grid]

    def pick(meta):
        for config, at in configs:
            if [meta.get(k) for k in config] == list(config.values()):
                return grids[min(at, len(grids) - 1)]
        return grids[0]

    if configs and len(configs) > 1:  # tuned again here: each config launches on its own grid
        kernel[pick](**kwargs, **CONSTANTS[constant_args_idx])
    else:  # plain, or the one config the captured run chose
        kernel[grids[min(configs[0][1], len(grids) - 1)] if configs else grids[0]](**kwargs, **CONSTANTS[constant_args_idx])
'''


def _kernel_text(entry: Mapping[str, Any]) -> str:
    if not entry.get("source"):
        raise KernelUnavailable("the dump did not record its source")
    lines = []
    for g in entry.get("globals") or []:
        name = str(g["name"])
        if not name.isidentifier() or keyword.iskeyword(name):
            raise KernelUnavailable(f"its source refers to a global {name!r} that is no Python name")
        if g.get("module"):
            if not _KERNEL_MODULES.fullmatch(str(g["module"])) or not all(p.isidentifier() for p in str(g["module"]).split(".")):
                raise KernelUnavailable(f"its source refers to the module {g['module']} ({name}), which graphdbg does not "
                                        "import for a dump's kernel (Triton's and math only)")
            lines.append(f"import {g['module']} as {name}")
        elif g.get("source"):
            lines.append(_jit(str(g["source"]), name))
        elif "constexpr" in g:
            lines.append(f"{name} = tl.constexpr({g['constexpr']!r})")
        elif "value" in g:
            lines.append(f"{name} = {g['value']!r}")
    name = str(entry.get("name") or f"kernel_{entry['kernel_idx']}")
    lines.append(_jit(str(entry["source"]), name))
    fn = _DEF.search(lines[-1])
    defined = lines[-1][fn.start() + 4:].split("(", 1)[0].strip() if fn else name
    configs, chosen = entry.get("autotune_configs") or [], entry.get("chosen_config")
    tuned = [chosen] if chosen else configs  # the config the captured run chose, alone; else all, tuned again
    if tuned:
        made = ", ".join(f"triton.Config({dict(c.get('kwargs') or {})!r}, num_warps={c.get('num_warps') or 4!r}, "
                         f"num_stages={c.get('num_stages') or 3!r})" for c in tuned)
        picks = [(dict(c.get("kwargs") or {}), configs.index(c) if c in configs else 0) for c in tuned]
        lines.append(f"KERNELS[{int(entry['kernel_idx'])}] = (triton.autotune(configs=[{made}], key=[])({defined}), {picks!r})")
    else:
        lines.append(f"KERNELS[{int(entry['kernel_idx'])}] = ({defined}, None)")
    return "\n".join(lines) + "\n"


def _jit(source: str, name: str) -> str:
    """``@triton.jit`` over the one function ``source`` defines, and nothing else of it: the text
    must parse to exactly one ``def`` (with or without decorators: Triton's ``.src`` starts at the
    ``def``, ``inspect.getsource`` at the decorators) and what is kept is that node's lines, from
    its ``def`` to its last statement: no decorator the capture saw (the kernel's is
    ``@triton.jit``), no statement before or after it. Its defaults and annotations, which run when
    the ``def`` does, may only be constants and (dotted) names (``BLOCK: tl.constexpr = 128``)."""
    text = textwrap.dedent(source.replace("\r\n", "\n").replace("\r", "\n"))  # lines as the parser counts them
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as e:
        raise KernelUnavailable(f"the recorded source of {name} is no Python ({type(e).__name__})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise KernelUnavailable(f"the recorded source of {name} is not one function definition and nothing else")
    fn = tree.body[0]
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, *filter(None, (fn.args.vararg, fn.args.kwarg))]
    evaluated = [*fn.args.defaults, *fn.args.kw_defaults, *(a.annotation for a in args), fn.returns]
    if any(e is not None and not _plain_expression(e) for e in evaluated):
        raise KernelUnavailable(f"the recorded source of {name} has a default or annotation that is not a constant or a name")
    kept = "\n".join(text.split("\n")[fn.lineno - 1:fn.end_lineno]).rstrip()
    fn.decorator_list = []
    try:  # what is kept is that function, to the last node
        same = [ast.dump(n) for n in ast.parse(kept).body] == [ast.dump(fn)]
    except (SyntaxError, ValueError):
        same = False
    if not same:
        raise KernelUnavailable(f"the recorded source of {name} is not one function definition and nothing else")
    return "\n@triton.jit\n" + kept + "\n"


def _plain_expression(node: ast.expr) -> bool:
    """A constant, a name or a dotted name (``tl.constexpr``), or a signed number: nothing that calls."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Constant, ast.Name))


def _launch(launch: Callable[..., Any], functional: bool, kernel: Any) -> Callable[..., Any]:
    """A graph target that launches the kernel as the wrapper node's call did (``launch``)."""
    if functional:
        def target(*, kernel_idx: int, constant_args_idx: int, kwargs: dict, grid: Any, tensors_to_clone: Any = (),
                   **rest: Any) -> dict:
            args = {k: (v.clone() if k in tensors_to_clone else v) for k, v in kwargs.items()}
            launch(kernel_idx, constant_args_idx, grid, args)
            return {k: args[k] for k in tensors_to_clone}
    else:
        def target(*, kernel_idx: int, constant_args_idx: int, kwargs: dict, grid: Any, **rest: Any) -> None:
            launch(kernel_idx, constant_args_idx, grid, kwargs)

    name = getattr(getattr(kernel, "fn", kernel), "__name__", "kernel")
    target.__name__ = target.__qualname__ = "dump_kernel_" + re.sub(r"\W+", "_", str(name))
    target.graphdbg_writes = lambda node: list((node.kwargs.get("kwargs") or {}).values())  # type: ignore[attr-defined]
    return target


@contextlib.contextmanager
def kernels_as_captured(gm: fx.GraphModule) -> Iterator[list[int]]:
    """Within: ``gm``'s Triton kernel calls (stand-ins, launches from the dump's source) call
    Dynamo's wrapper again, as captured, so that a graph written out (a minified dump, a repro)
    prints them as the printed graph did, ``kernel_idx`` and all; yields the ``kernel_idx``
    values it calls. The targets are put back after."""
    import torch._higher_order_ops.triton_kernel_wrap as wrap  # here: slow to import, and only a graph with kernels needs it

    changed: list[tuple[fx.GraphModule, fx.Node, Any]] = []
    for mod in (m for m in gm.modules() if isinstance(m, fx.GraphModule)):
        for node in mod.graph.nodes:
            idx = node.kwargs.get("kernel_idx") if node.op == "call_function" else None
            ours = node.meta.get("graphdbg_kernel") == FROM_DUMP or getattr(node.target, "graphdbg_kind", None) == "triton_kernel"
            if isinstance(idx, int) and isinstance(node.kwargs.get("kwargs"), dict) and ours:
                changed.append((mod, node, node.target))
                functional = "tensors_to_clone" in node.kwargs
                node.target = wrap.triton_kernel_wrapper_functional if functional else wrap.triton_kernel_wrapper_mutation
    try:
        for mod in {id(m): m for m, _, _ in changed}.values():
            mod.recompile()
        yield sorted({n.kwargs["kernel_idx"] for n in _wrapper_nodes(gm)})
    finally:
        for _, node, target in changed:
            node.target = target
        for mod in {id(m): m for m, _, _ in changed}.values():
            mod.recompile()


def recorded_kernels(manifest: Mapping[str, Any] | None, called: Iterable[int]) -> list[dict[str, Any]]:
    """What ``manifest`` recorded of the Triton kernels ``called`` (by ``kernel_idx``)."""
    wanted = set(called)
    return [dict(k) for k in (manifest or {}).get("triton_kernels") or [] if k.get("kernel_idx") in wanted]


def kernels_ran(gm: fx.GraphModule, manifest: Manifest | None) -> list[dict[str, Any]]:
    """Per custom op and Triton kernel ``gm`` calls: whether it ran ``real`` (its library is
    here), ``from the dump`` (its recorded source, ``--trust-kernels``) or as a ``stand-in``
    (with why); with its number of calls. A swapped call (a reference) is none of these."""
    kernels = manifest.triton_kernels if manifest is not None else []
    names = {k.kernel_idx: k.name for k in kernels}
    sources = {k.kernel_idx for k in kernels if k.source}
    rows: dict[str, dict[str, Any]] = {}
    for node in (n for mod in gm.modules() if isinstance(mod, fx.GraphModule) for n in mod.graph.nodes):
        if node.op != "call_function":
            continue
        row = _kernel_row(node, names, sources)
        if row is None:
            continue
        seen = rows.setdefault(row["kernel"], {**row, "calls": 0})
        seen["calls"] += 1
    return [rows[k] for k in sorted(rows)]


def _kernel_row(node: fx.Node, names: dict[int, Any], sources: set[int]) -> dict[str, Any] | None:
    target, kind = node.target, getattr(node.target, "graphdbg_kind", None)
    idx = node.kwargs.get("kernel_idx")
    if isinstance(idx, int) and isinstance(node.kwargs.get("kwargs"), dict):
        name = names.get(idx) or f"kernel_idx={idx}"
        if node.meta.get("graphdbg_kernel") == FROM_DUMP:
            return {"kernel": name, "kind": "triton_kernel", "ran": FROM_DUMP, "why": None}
        if kind == "triton_kernel":
            why = node.meta.get("graphdbg_kernel_why") or (
                "the dump has its source: --trust-kernels runs it (in the sandboxed replay child)" if idx in sources
                else "the dump did not record its source")
            return {"kernel": name, "kind": "triton_kernel", "ran": STAND_IN, "why": why}
        if kind is None and not callable(getattr(target, "graphdbg_writes", None)):  # the HOP itself: a live capture's graph
            return {"kernel": name, "kind": "triton_kernel", "ran": REAL, "why": None}
        return None
    op = custom_op_of(node)
    if op is not None:
        return {"kernel": qualified_name(op), "kind": "custom_op", "ran": REAL, "why": None}
    qual = getattr(target, "graphdbg_op", None)
    if isinstance(qual, str) and kind == "custom_op":
        ns, _, rest = qual.removeprefix("torch.ops.").partition(".")
        return {"kernel": f"{ns}::{rest.removesuffix('.default')}", "kind": "custom_op", "ran": STAND_IN,
                "why": "not on this machine: --ops MODULE (the module that defines it) runs it for real"}
    return None


__all__ = ["FROM_DUMP", "KernelUnavailable", "REAL", "SANDBOX_DIR_ENV", "STAND_IN", "install_kernels", "kernels_as_captured",
           "kernels_module", "kernels_ran", "recorded_kernels"]
