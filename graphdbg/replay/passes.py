"""Custom FX passes run on a replayed graph, one report per pass, the way SGLang and vLLM run theirs.

A pass is anything a serving stack plugs into ``torch.compile``: a function over an ``fx.Graph``
or a ``GraphModule``, a ``CustomGraphPass`` (Inductor's interface, which vLLM's and SGLang's
``InductorPass`` build on), or a ``PatternMatcherPass``. A pass runs at one of two stages:
``pre`` on the Dynamo graph before the backend sees it, or ``post_grad`` inside Inductor on its
aten-level graph, where ``config.post_grad_custom_post_pass`` calls it.

    >>> passes = resolve_passes("mypkg.passes:fuse_rmsnorm,mypkg.passes:FuseAllReduce@post_grad")
    >>> gm, reports = apply_passes(case.gm, passes)          # runs the "pre" ones now
    >>> post_reports = []
    >>> with torch._inductor.config.patch(inductor_post_grad_patch(passes, post_reports)):
    ...     compiled = compile_fx(gm, case.inputs)            # runs the "post_grad" ones in Inductor
    >>> [(r.name, r.ops_delta) for r in reports + post_reports]

The graph a ``pre`` pass gets carries the node meta Dynamo gives (``example_value`` and ``val``
fake tensors, ``tensor_meta``, ``stack_trace``, ``source_fn_stack``, ``nn_module_stack``) on every
path, replay, compare, bisect and minify alike: each caller hands it over through
``replay.graph_meta.with_dynamo_meta`` first.

A pass that raises comes back as :class:`PassFailed`, which carries the reports made so far and
keeps the pass's own exception as ``__cause__``, so a failure's signature is the pass's, not ours.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import math
import re
import sys
import time
import typing
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
import torch.fx as fx

from graphdbg.errors import GraphdbgError
from graphdbg.graph.hashing import op_histogram

# "post_grad_pre" runs before Inductor's own post-grad patterns (which, e.g., fold a residual
# add into addmm and so hide an add+RMSNorm pattern), "post_grad" after them.
STAGES = ("pre", "post_grad_pre", "post_grad")
INDUCTOR_STAGES = {"post_grad_pre": "post_grad_custom_pre_pass", "post_grad": "post_grad_custom_post_pass"}


@dataclass
class PassSpec:
    """One pass to run: the name the user gave, the callable it resolved to, and its stage."""

    name: str
    fn: Any
    stage: str


@dataclass
class PassReport:
    """What one run of one pass did to the graph.

    ``ops_delta`` maps an op (named as in a dump's op histogram) to how many more (or fewer)
    times the graph calls it afterwards; unchanged ops are left out.

        >>> report.name, report.ops_delta
        ('passes:gelu_to_relu', {'torch._C._nn.gelu': -1, 'torch.relu': 1})
    """

    name: str
    stage: str
    nodes_before: int
    nodes_after: int
    ops_delta: dict[str, int] = field(default_factory=dict)
    result: Any = None
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PassReport:
        # Keys may be added by a newer graphdbg; a reader ignores the ones it doesn't know.
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class PassFailed(Exception):
    """A pass raised (or left a graph that fails ``lint``).

    ``report`` is the failing pass's report, with ``error`` set; ``reports`` is every report of
    the pipeline up to and including it; ``__cause__`` is the pass's own exception.
    """

    def __init__(self, report: PassReport, original: BaseException, reports: list[PassReport] | None = None):
        super().__init__(f"pass {report.name} ({report.stage}) failed: {report.error}")
        self.report = report
        self.original = original
        self.reports = list(reports) if reports is not None else [report]
        # Set here as well as by `raise ... from`, so that a PassFailed built and raised
        # elsewhere (e.g. by a runner re-raising) still points at the pass's exception.
        self.__cause__ = original

    def __reduce__(self):
        # Picklable, so that a replay in a child process can hand it back to the parent.
        return (type(self), (self.report, self.original, self.reports))


def find_pass_failure(exc: BaseException | None) -> PassFailed | None:
    """The :class:`PassFailed` inside ``exc``, however Inductor or Dynamo wrapped it.

    Inductor re-raises a post-grad pass's exception as ``InductorError`` ``from None`` (keeping it
    only as ``inner_exception`` and ``__context__``), and Dynamo wraps that again in
    ``BackendCompilerFailed``; a ``__cause__`` walk alone would miss it.

        >>> try:
        ...     compiled = torch.compile(gm, backend="inductor"); compiled(*inputs)
        ... except Exception as e:
        ...     failed = find_pass_failure(e)    # failed.report, failed.__cause__
    """
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, PassFailed):
            return e
        stack.extend([e.__context__, e.__cause__, getattr(e, "inner_exception", None)])
    return None


# --------------------------------------------------------------------------- resolving


def resolve_passes(spec: str | Sequence[str | Callable[..., Any]] | None, default_stage: str = "pre") -> list[PassSpec]:
    """Turn what a user wrote (on a command line or in Python) into :class:`PassSpec` objects.

    An item is ``module:attr`` (``attr`` may be dotted, like ``Class.method`` or
    ``instance.apply``), optionally followed by ``@pre`` or ``@post_grad``; items in a string
    are separated by commas. A class found this way is instantiated with no arguments (how a
    ``CustomGraphPass`` subclass is named), a ``PatternMatcherPass`` is run through its
    ``apply``. From Python an item may also be the callable itself, or a ready ``PassSpec``.

        >>> [(p.name, p.stage) for p in resolve_passes("pkg.passes:fuse,pkg.passes:Fold@post_grad")]
        [('pkg.passes:fuse', 'pre'), ('pkg.passes:Fold', 'post_grad')]

    Raises :class:`GraphdbgError` with one line naming the item that could not be resolved.
    """
    _check_stage(default_stage, f"default stage {default_stage!r}")
    if spec is None:
        return []
    items: list[Any] = [spec] if isinstance(spec, str) else list(spec)
    out: list[PassSpec] = []
    for item in items:
        if isinstance(item, PassSpec):
            _check_stage(item.stage, f"pass {item.name!r}")
            out.append(item)
        elif isinstance(item, str):
            out.extend(_resolve_string(part.strip(), default_stage) for part in item.split(",") if part.strip())
        else:
            fn = _as_pass(_instantiate(item, repr(item)))
            if not callable(fn):
                raise GraphdbgError(f"pass {item!r}: not callable (a {type(item).__name__})")
            out.append(PassSpec(name=_qualname(item), fn=fn, stage=default_stage))
    return out


def _check_stage(stage: str, what: str) -> None:
    if stage not in STAGES:
        raise GraphdbgError(f"{what}: unknown stage {stage!r}; use one of {', '.join(STAGES)}")


def _resolve_string(item: str, default_stage: str) -> PassSpec:
    name, stage = item, default_stage
    if "@" in item:
        name, stage = (s.strip() for s in item.rsplit("@", 1))
        _check_stage(stage, f"pass {item!r}")
    if ":" in name:
        module_name, attr = name.split(":", 1)
    elif "." in name:
        # "pkg.mod.fn" without a colon: the last dot is the only reading that needs no guessing.
        module_name, attr = name.rsplit(".", 1)
    else:
        raise GraphdbgError(f"pass {item!r}: expected module:attr, e.g. mypkg.passes:fuse_rmsnorm")
    if not module_name or not attr:
        raise GraphdbgError(f"pass {item!r}: expected module:attr, e.g. mypkg.passes:fuse_rmsnorm")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # an import error inside the user's module is also "can't import"
        raise GraphdbgError(f"pass {item!r}: cannot import module {module_name!r}: {_one_line(e)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise GraphdbgError(f"pass {item!r}: {getattr(obj, '__name__', module_name)!s} has no attribute {part!r}") from None
    fn = _as_pass(_instantiate(obj, repr(item)))
    if not callable(fn):
        raise GraphdbgError(f"pass {item!r}: not callable (a {type(obj).__name__})")
    return PassSpec(name=name, fn=fn, stage=stage)


def _instantiate(obj: Any, item: str) -> Any:
    """A class names its instance: ``CustomGraphPass`` subclasses are written that way."""
    if not inspect.isclass(obj):
        return obj
    try:
        return obj()
    except Exception as e:
        raise GraphdbgError(f"pass {item}: cannot instantiate {obj.__qualname__} with no arguments: {_one_line(e)}") from None


def _as_pass(obj: Any) -> Any:
    """The callable to run for ``obj``."""
    # Inductor's PatternMatcherPass has no __call__; its `apply` is how Inductor itself runs it,
    # and it returns the match count, which then lands in the report's `result`.
    if any(c.__name__ == "PatternMatcherPass" for c in type(obj).__mro__) and hasattr(obj, "apply"):
        return obj.apply
    return obj


def _qualname(obj: Any) -> str:
    for o in (obj, type(obj)):
        name = getattr(o, "__qualname__", None) or getattr(o, "__name__", None)
        if isinstance(name, str):
            return name
    return repr(obj)


# --------------------------------------------------------------------------- running


def apply_pass(gm: fx.GraphModule, p: PassSpec) -> tuple[fx.GraphModule, PassReport]:
    """Run one pass on ``gm`` (in place where the pass works in place) and report what it did.

        >>> gm, report = apply_pass(case.gm, resolve_passes("passes:gelu_to_relu")[0])
        >>> report.nodes_before, report.nodes_after, report.ops_delta
        (50, 50, {'torch._C._nn.gelu': -1, 'torch.relu': 1})

    The pass gets ``gm.graph`` if it is a ``CustomGraphPass`` or its first parameter is named
    ``graph`` or annotated ``fx.Graph``, and ``gm`` otherwise. A ``GraphModule`` (or an
    ``fx.passes`` ``PassResult``) it returns replaces ``gm``. Afterwards the graph is linted and
    recompiled, so a pass that corrupts the graph fails here rather than somewhere downstream.
    Raises :class:`PassFailed` if the pass or the lint raises.
    """
    return _run(gm, p, replaceable=True)


def apply_passes(gm: fx.GraphModule, passes: Sequence[PassSpec]) -> tuple[fx.GraphModule, list[PassReport]]:
    """Run the ``pre`` passes in order; ``post_grad`` ones are left for :func:`inductor_post_grad_patch`.

    Raises :class:`PassFailed` at the first failing pass, with ``.reports`` holding the reports
    of the passes before it and its own.
    """
    reports: list[PassReport] = []
    for p in passes:
        if p.stage != "pre":
            continue
        try:
            gm, report = apply_pass(gm, p)
        except PassFailed as failed:
            failed.reports = [*reports, failed.report]
            raise
        reports.append(report)
    return gm, reports


def _run(gm: fx.GraphModule, p: PassSpec, *, replaceable: bool, is_inference: bool | None = None) -> tuple[fx.GraphModule, PassReport]:
    graph = gm.graph
    before = op_histogram(graph)
    nodes_before = len(graph.nodes)
    result: Any = None
    start = time.perf_counter()
    seconds = 0.0
    try:
        arg = graph if _takes_graph(p.fn) else gm
        if is_inference is None:
            # Outside Inductor there is no "is this an inference graph" flag; grad mode is what
            # the caller has set up for the replay, so it is the honest stand-in.
            is_inference = not torch.is_grad_enabled()
        ret = p.fn(arg, is_inference=is_inference) if _is_inference_aware(p.fn) else p.fn(arg)
        seconds = time.perf_counter() - start
        new_gm = _returned_module(ret)
        if new_gm is not None and new_gm is not gm:
            if not replaceable:
                raise GraphdbgError(
                    f"pass {p.name} returned a new GraphModule; Inductor keeps its own, so a post_grad pass must edit the graph in place"
                )
            gm = new_gm
        result = _json_scalar(ret.modified if _is_pass_result(ret) else None if new_gm is not None else ret)
        gm.graph.lint()
        if replaceable:
            # Inside Inductor the graph is lowered from its nodes, so only replays need the code.
            gm.recompile()
    except Exception as e:
        # Counted on whatever the pass left behind: a half-applied rewrite is often the clue.
        report = _report(p, nodes_before, before, gm.graph, None, seconds or time.perf_counter() - start, _one_line(e))
        raise PassFailed(report, e) from e
    return gm, _report(p, nodes_before, before, gm.graph, result, seconds, None)


def _report(p: PassSpec, nodes_before: int, before: dict[str, int], graph: fx.Graph, result: Any, seconds: float, error: str | None) -> PassReport:
    delta = Counter(op_histogram(graph))
    delta.subtract(before)
    return PassReport(
        name=p.name,
        stage=p.stage,
        nodes_before=nodes_before,
        nodes_after=len(graph.nodes),
        ops_delta={op: n for op, n in sorted(delta.items()) if n},
        result=result,
        seconds=seconds,
        error=error,
    )


def _takes_graph(fn: Any) -> bool:
    """Whether ``fn`` wants an ``fx.Graph`` (rather than a ``GraphModule``)."""
    # Looked up in sys.modules rather than imported: importing torch._inductor costs a second,
    # and an object can't be an instance of a class whose module was never imported.
    cgp = sys.modules.get("torch._inductor.custom_graph_pass")
    if cgp is not None:
        if isinstance(fn, getattr(cgp, "CustomGraphModulePass", ())):
            return False
        if isinstance(fn, cgp.CustomGraphPass):
            return True
    try:
        params = [q for q in inspect.signature(fn).parameters.values() if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD, q.VAR_POSITIONAL)]
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return False
    if not params:
        return False
    first = params[0]
    if first.name == "graph":
        return True
    ann = first.annotation
    if isinstance(ann, str):
        # `from __future__ import annotations` leaves strings; resolve them where we can.
        try:
            target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
            ann = typing.get_type_hints(target).get(first.name, ann)
        except Exception:
            pass
    if isinstance(ann, str):
        return re.fullmatch(r"(torch\.)?(fx\.)?(graph\.)?Graph", ann.strip("'\" ")) is not None
    return inspect.isclass(ann) and issubclass(ann, fx.Graph)


def _is_inference_aware(fn: Any) -> bool:
    cgp = sys.modules.get("torch._inductor.custom_graph_pass")
    aware = getattr(cgp, "CustomInferenceAwareGraphPass", None) if cgp is not None else None
    return aware is not None and isinstance(fn, aware)


def _is_pass_result(ret: Any) -> bool:
    # torch.fx.passes.infra's PassManager passes return PassResult(graph_module, modified).
    return type(ret).__name__ == "PassResult" and hasattr(ret, "graph_module")


def _returned_module(ret: Any) -> fx.GraphModule | None:
    if isinstance(ret, fx.GraphModule):
        return ret
    if _is_pass_result(ret) and isinstance(ret.graph_module, fx.GraphModule):
        return ret.graph_module
    return None


def _json_scalar(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


# --------------------------------------------------------------------------- inside Inductor


def inductor_post_grad_patch(passes: Sequence[PassSpec], reports: list[PassReport], *, cache: bool = False) -> dict[str, Any]:
    """The ``torch._inductor.config.patch(...)`` settings that run the ``post_grad`` passes in Inductor.

        >>> reports = []
        >>> with torch._inductor.config.patch(inductor_post_grad_patch(passes, reports)):
        ...     compiled = compile_fx(gm, inputs)
        >>> reports[0].ops_delta
        {'torch.ops.aten.relu.default': -1, 'torch.ops.aten.sigmoid.default': 1}

    The passes go into ``post_grad_custom_post_pass``: after Inductor's own pattern passes, on
    the aten graph it lowers. Each is wrapped in a ``CustomGraphPass`` that appends a
    :class:`PassReport` to ``reports`` every time it runs, and raises :class:`PassFailed` if the
    pass raises; Inductor and Dynamo wrap that again, so find it with :func:`find_pass_failure`.
    With grad enabled and inputs that need grad, Inductor compiles a forward and a backward
    graph and each pass runs (and is reported) once for each.

    By default the patch also turns off the FX graph cache (and with it AOTAutograd's cache):
    on a cache hit Inductor doesn't run post-grad passes at all, so a replay would silently
    neither apply nor report them. With ``cache=True`` the cache stays on; each wrapper's
    ``uuid()`` hashes the pass's name, stage and source file (or the pass's own ``uuid()``), so
    a cached artifact is only reused for the same pass code, and a pass whose code can't be
    found opts out of caching.

    Returns ``{}`` if no pass is at the ``post_grad`` stage.
    """
    post = [p for p in passes if p.stage in INDUCTOR_STAGES]
    if not post:
        return {}
    ReportingPass, Chain = _inductor_pass_classes()

    settings: dict[str, Any] = {}
    for stage, key in INDUCTOR_STAGES.items():
        wrapped = [ReportingPass(p, reports) for p in post if p.stage == stage]
        if wrapped:
            settings[key] = Chain(wrapped)
    if not cache:
        settings["fx_graph_cache"] = False
        settings["fx_graph_remote_cache"] = False
    return settings


def _inductor_pass_classes() -> tuple[type, type]:
    """``ReportingPass`` (one pass, reported each time it runs) and ``Chain`` (a stage's passes
    as one) over Inductor's ``CustomGraphPass``."""
    from torch._inductor import custom_graph_pass as cgp  # torch._inductor costs seconds: only when passes run in it

    # Inference-aware, so Inductor hands over is_inference; forwarded to passes that want it.
    base = getattr(cgp, "CustomInferenceAwareGraphPass", cgp.CustomGraphPass)

    class ReportingPass(base):  # type: ignore[misc, valid-type]
        def __init__(self, spec: PassSpec, reports: list[PassReport]):
            self.spec = spec
            self.reports = reports
            self._uuid = _pass_uuid(spec, cgp)

        def __call__(self, graph: fx.Graph, is_inference: bool | None = None) -> None:
            gm = graph.owning_module
            if gm is None:  # Inductor always hands over a GraphModule's graph; be safe anyway
                gm = fx.GraphModule(torch.nn.Module(), graph)
            try:
                _, report = _run(gm, self.spec, replaceable=False, is_inference=bool(is_inference))
            except PassFailed as failed:
                self.reports.append(failed.report)
                failed.reports = [failed.report]
                raise
            self.reports.append(report)

        def uuid(self) -> Any:
            return self._uuid

        def __repr__(self) -> str:
            return f"graphdbg post_grad pass {self.spec.name}"

    class Chain(base):  # type: ignore[misc, valid-type]
        """The stage's passes as one pass: torch 2.11 takes a single pass per hook, not a list."""

        def __init__(self, members: list[Any]):
            self.members = members

        def __call__(self, graph: fx.Graph, is_inference: bool | None = None) -> None:
            for member in self.members:
                member(graph, is_inference)

        def uuid(self) -> Any:
            uuids = [m.uuid() for m in self.members]
            return None if any(u is None for u in uuids) else hashlib.sha256(repr(uuids).encode()).hexdigest()

        def __repr__(self) -> str:
            return f"graphdbg passes {[m.spec.name for m in self.members]}"

    return ReportingPass, Chain


def _pass_uuid(p: PassSpec, cgp: Any) -> str | None:
    h = hashlib.sha256(f"graphdbg.passes\0{p.name}\0{p.stage}".encode())
    fn = p.fn
    # CustomPassBase is torch 2.13's common base; torch 2.11 has only CustomGraphPass
    if isinstance(fn, getattr(cgp, "CustomPassBase", cgp.CustomGraphPass)):
        own = fn.uuid()
        if own is None:  # the pass itself says "don't cache me"
            return None
        h.update(repr(own).encode())
        return h.hexdigest()
    target = getattr(fn, "__func__", fn)  # bound methods: the function's file
    if not (inspect.isfunction(target) or inspect.isclass(target)):
        target = type(fn)
    try:
        path = inspect.getsourcefile(target)
        with open(path, "rb") as f:  # type: ignore[arg-type]
            h.update(f.read())
    except (TypeError, OSError):
        return None  # no source to key on: let Inductor bypass its cache rather than guess
    return h.hexdigest()
