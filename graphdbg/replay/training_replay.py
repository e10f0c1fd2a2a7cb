"""Training replay: forward, then backward with recorded or synthesised tangents; gradients and
in-place writes judged against eager.

    >>> outcome = run_training_case(graphdbg.load("dumps/rank0/g0-backward-accuracy-1a2b/forward").case(), "inductor")
    >>> outcome.status, outcome.stage, outcome.signature
    ('mismatch', 'backward', 'mismatch: gradient 1 value')

A backward dump (``manifest["stage"] == "backward"``) holds the backward graph itself; it is
replayed alone, like any graph (``run_case``). Its ``forward/`` dump replays here: the
forward compiled by the backend, ``torch.autograd.grad`` through it, so the backend compiles
the backward the way ``loss.backward()`` made it. Tangents come from the backward dump when
they fit the forward's outputs (``tangents: recorded``), else from a seeded ``randn``.

``written_attrs_before``/``restore_attrs``/``judge_mutations`` are what ``run_case`` calls to
judge graphs that work in place (an optimizer step has no outputs, only writes).
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.backends.calls import positional
from graphdbg.backends.compiler_config import replay_settings
from graphdbg.errors import GraphdbgError
from graphdbg.graph.autocast import autocast_kept, without_regions
from graphdbg.judge.accuracy import BY_DTYPE, OutputMismatch, Tolerance, judge_outputs
from graphdbg.judge.mutations import GradientMismatch, compare_mutations, written_state
from graphdbg.outcome import Outcome
from graphdbg.rebuild.inputs import clone_values, to_float64
from graphdbg.replay.backend_setup import backend_and_passes, compiler_settings
from graphdbg.replay.crash import failed_pass, set_crash, set_pass_crash, unwrap
from graphdbg.replay.graph_meta import reads_meta, with_dynamo_meta
from graphdbg.replay.options import ReplayOptions
from graphdbg.replay.passes import apply_passes
from graphdbg.replay.retrace import compile_as_captured, whole_graph
from graphdbg.store.manifest import read_manifest
from graphdbg.store.safe_files import backward_dump_folder, inside
from graphdbg.store.schema import manifest_model
from graphdbg.store.tensor_file import read_tensors

if TYPE_CHECKING:
    from graphdbg.case import Case

TANGENT_SEED = 0


# In-place writes, for run_case ------------------------------------------------------------
def written_attrs_before(gm: fx.GraphModule) -> dict[str, torch.Tensor] | None:
    """Copies of the attributes ``gm`` writes in place (None when it writes none)."""
    names = written_state(gm)[1]
    if not names:
        return None
    return {n: _attr(gm, n).detach().clone() for n in names if isinstance(_attr(gm, n), torch.Tensor)}


def restore_attrs(gm: fx.GraphModule, values: dict[str, torch.Tensor] | None) -> None:
    """Put ``values`` back into ``gm``'s attributes (undo the eager reference's writes)."""
    with torch.no_grad():
        for name, value in (values or {}).items():
            _attr(gm, name).copy_(value)


def judge_mutations(outcome: Outcome, case: Case, attrs_before: dict[str, torch.Tensor] | None, compiled_gm: fx.GraphModule,
                    inputs: list[Any], grad: bool, tol: Tolerance = BY_DTYPE) -> None:
    """Compare what the compiled run wrote (``inputs``, ``compiled_gm``'s attributes) with
    what an eager run writes on copies; a difference makes ``outcome`` a mismatch."""
    add_mismatches(outcome, mutation_mismatches_of(case, attrs_before, compiled_gm, inputs, grad, tol))


def mutation_mismatches_of(case: Case, attrs_before: dict[str, torch.Tensor] | None, compiled_gm: fx.GraphModule,
                           inputs: list[Any], grad: bool, tol: Tolerance = BY_DTYPE) -> list[OutputMismatch]:
    """The written inputs and attributes where the compiled run and an eager run on copies differ."""
    written, attrs = written_state(case.gm)
    if not written and not attrs:
        return []
    eager = copy.deepcopy(case.gm)
    restore_attrs(eager, attrs_before)
    eager_inputs = clone_values(case.inputs)
    with torch.set_grad_enabled(grad), autocast_kept():
        eager(*eager_inputs)
    names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    bad: list[OutputMismatch] = list(compare_mutations(names, eager_inputs, inputs, tol=tol, only=written))
    for i, m in enumerate(compare_mutations(attrs, [_attr(eager, a) for a in attrs], [_attr(compiled_gm, a) for a in attrs],
                                            tol=tol)):
        m.what, m.index = "attr", len(names) + m.index
        bad.append(m)
    return bad


def _attr(gm: fx.GraphModule, name: str) -> Any:
    obj: Any = gm
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def add_mismatches(outcome: Outcome, bad: list[OutputMismatch]) -> None:
    if not bad:
        return
    if outcome.status == "pass":
        outcome.status, outcome.mismatches, outcome.message, outcome.signature = "mismatch", [], "", "mismatch: "
    elif outcome.status != "mismatch":
        return
    outcome.mismatches = [*(outcome.mismatches or []), *(m.to_dict() for m in bad)]
    errs = [e for e in [outcome.max_abs_error, *(m.max_abs_error for m in bad)] if e is not None]
    rels = [e for e in [outcome.max_rel_error, *(m.max_rel_error for m in bad)] if e is not None]
    outcome.max_abs_error = max(errs) if errs else None
    outcome.max_rel_error = max(rels) if rels else None
    outcome.message = "; ".join(x for x in [outcome.message, *(m.describe() for m in bad)] if x)
    head = outcome.signature.removeprefix("mismatch: ")
    more = ", ".join(f"{getattr(m, 'what', 'output')} {m.index} {m.reason}" for m in bad)
    outcome.signature = "mismatch: " + ", ".join(x for x in [head, more] if x)


# Forward + backward -----------------------------------------------------------------------
def is_backward_dump(dump: Any) -> bool:
    return dump is not None and dump.manifest.is_backward


def fails_in_backward(dump: Any) -> bool:
    """A forward whose failure was in its backward (the ``forward`` folder of a backward dump, or
    its minified copy): it replays forward then backward unless told otherwise."""
    return dump is not None and dump.manifest.fails_in_backward


def as_graph_backend(backend_fn: Callable[..., Any], name: str, dump: Any) -> Callable[..., Any]:
    """``backend_fn`` as torch.compile calls a backend; on a backward dump, whose graph
    AOTAutograd hands a bw_compiler and whose code it calls boxed (one list) where the code
    says so (``_boxed_call``), the code is called that way (``backends.calls.positional``)."""
    if not is_backward_dump(dump) or name in torch._dynamo.list_backends(exclude_tags=()):
        return backend_fn  # a registered backend (inductor, aot_eager) compiles the graph as Dynamo hands it

    def compile_backward(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        return positional(backend_fn(gm, example_inputs, **kwargs))

    return compile_backward


def run_training_case(case: Case, backend: str | Callable[..., Any] = "eager", opts: ReplayOptions = ReplayOptions(), *,
                      tangents: list[torch.Tensor] | None = None) -> Outcome:
    """Forward under ``backend``, then ``torch.autograd.grad`` with ``tangents`` (default: the
    recorded ones, else seeded randn); outputs, gradients and in-place writes judged against eager."""
    name, be, pre, post = backend_and_passes(backend, opts.passes, opts.pass_stage)
    outcome = Outcome(status="pass", backend=name, device=str(case.device), stand_ins=[s.describe() for s in case.stand_ins])
    started = time.perf_counter()
    base = differentiable_inputs(case.inputs)
    if not any(base[i].requires_grad for i in _tensor_indices(base)):
        if not fails_in_backward(case.dump):
            raise GraphdbgError("no input of this graph requires grad; nothing to differentiate (is it a backward dump?)")
        # a minify candidate of a backward failure that kept only integer inputs: it can't show it
        outcome.stand_ins = [*outcome.stand_ins, "backward: no input requires grad, nothing to differentiate"]
        outcome.total_s = time.perf_counter() - started
        return outcome

    attrs_before = written_attrs_before(case.gm)
    ref_gm = copy.deepcopy(case.gm)
    try:
        ref_out, ref_inputs = _forward(ref_gm, base)
    except Exception as e:
        set_crash(outcome, e, "reference")
        return outcome
    leaves = grad_leaves(ref_out)
    tangents, source = _tangents(case, leaves, tangents)
    outcome.stand_ins = [*outcome.stand_ins, f"tangents: {source}"]
    try:
        ref_grads = _grads(leaves, ref_inputs, tangents)
    except Exception as e:
        set_crash(outcome, e, "reference")
        return outcome
    ref64 = _float64_reference(case, base, tangents) if opts.accuracy else None

    reports: list[Any] = []
    state = {"stage": "compile", "compile_s": 0.0}

    def staged(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        if reads_meta(name, pre):  # Dynamo's node meta, as a forward replay gives it (replay/graph_meta.py)
            gm = with_dynamo_meta(gm, example_inputs, case.dump)
        gm, done = apply_passes(gm, pre)
        reports.extend(done)
        t0 = time.perf_counter()
        compiled = be(gm, example_inputs, **kwargs)
        state["compile_s"] += time.perf_counter() - t0
        return compiled

    # the compiler settings of the captured run, as a forward-only replay applies them
    settings = replay_settings(case.dump.manifest_data if case.dump is not None else None)
    outcome.stand_ins += settings.shown()
    try:
        with compiler_settings(settings, post, reports, outcome):
            gm, inputs, out = _compiled_forward(case, attrs_before, base, staged, bool(opts.direct), outcome, state, reports, settings)
            state["stage"] = "backward"  # AOTAutograd compiles the backward now, lazily
            grads = _grads(grad_leaves(out), inputs, tangents)
    except GraphdbgError:
        raise
    except Exception as e:
        failed = failed_pass(e)
        if failed is not None:
            set_pass_crash(outcome, failed)
        else:
            set_crash(outcome, unwrap(e), state["stage"])
    else:
        if opts.accuracy:
            _judge_training(outcome, case, ref_out, out, ref_grads, grads, ref64, opts.tolerance)
            judge_mutations(outcome, case, attrs_before, gm, inputs, True, opts.tolerance)
            if outcome.status == "mismatch":
                outcome.stage = "backward" if all(m.get("what") == "gradient" for m in outcome.mismatches) else "forward"
    finally:
        torch._dynamo.reset()
    outcome.passes = [r.to_dict() for r in reports]
    outcome.compile_s = state["compile_s"]
    outcome.total_s = time.perf_counter() - started
    return outcome


def _compiled_forward(case: Case, attrs_before: Any, base: list[Any], staged: Callable[..., Any], direct: bool,
                      outcome: Outcome, state: dict[str, Any], reports: list[Any],
                      settings: Any) -> tuple[fx.GraphModule, list[Any], Any]:
    """(graph, inputs, outputs) of the forward under the backend, through torch.compile unless
    ``direct``, re-traced as captured (symbolic sizes, ``.item()`` kept) as a forward replay is. A re-trace that broke the graph hid parts of it (and their backward) from the
    backend: then again, calling the backend on the whole graph, and the Outcome says so."""

    def attempt(direct: bool) -> tuple[fx.GraphModule, list[Any], Any]:
        torch._dynamo.reset()
        state["stage"], state["compile_s"] = "compile", 0.0
        reports.clear()
        gm = copy.deepcopy(case.gm)
        restore_attrs(gm, attrs_before)
        inputs = clone_values(base)
        fn = (lambda *a: staged(gm, list(a))(*a)) if direct else compile_as_captured(gm, inputs, staged, settings)
        out, _ = _forward(fn, inputs, clone=False)
        return gm, inputs, out

    return whole_graph(attempt, direct, outcome.stand_ins)[0]


def differentiable_inputs(values: list[Any]) -> list[Any]:
    """The inputs as captured; if none required grad, every floating one does (a printed graph)."""
    out = clone_values(values)
    if not any(isinstance(v, torch.Tensor) and v.requires_grad for v in out):
        for v in out:
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                v.requires_grad_(True)
    return out


def _tensor_indices(values: list[Any]) -> list[int]:
    return [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]


def _forward(fn: Callable[..., Any], values: list[Any], clone: bool = True) -> tuple[Any, list[Any]]:
    inputs = clone_values(values) if clone else values
    with torch.enable_grad(), autocast_kept():  # a run that fails inside a region leaves none open
        return fn(*inputs), inputs


def grad_leaves(out: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]


def _grads(leaves: list[torch.Tensor], inputs: list[Any], tangents: list[torch.Tensor]) -> list[torch.Tensor | None]:
    wrt = [i for i in _tensor_indices(inputs) if inputs[i].requires_grad]
    got = torch.autograd.grad(leaves, [inputs[i] for i in wrt], tangents, allow_unused=True)
    grads: list[torch.Tensor | None] = [None] * len(inputs)
    for i, g in zip(wrt, got):
        grads[i] = g
    return grads


def _tangents(case: Case, leaves: list[torch.Tensor], given: list[torch.Tensor] | None) -> tuple[list[torch.Tensor], str]:
    if given is not None:
        return [t.to(leaf.device, leaf.dtype) for t, leaf in zip(given, leaves)], "given"
    recorded = recorded_tangents(case)
    if recorded is not None and len(recorded) == len(leaves) and all(
            tuple(t.shape) == tuple(leaf.shape) for t, leaf in zip(recorded, leaves)):
        return [t.to(leaf.device, leaf.dtype) for t, leaf in zip(recorded, leaves)], "recorded"
    gen = torch.Generator().manual_seed(TANGENT_SEED)
    made = [torch.randn(leaf.shape, generator=gen, dtype=torch.float64).to(leaf.device, leaf.dtype) for leaf in leaves]
    return made, f"synthesised (randn, seed {TANGENT_SEED})"


def recorded_tangents(case: Case) -> list[torch.Tensor] | None:
    """The tangents the backward dump this forward belongs to received, in order."""
    dump = case.dump
    if dump is None or dump.manifest.backward_dump is None:
        return None

    parent = backward_dump_folder(dump.path, dump.manifest.backward_dump)
    try:
        manifest = manifest_model(read_manifest(parent), str(parent))
        roles = manifest.backward.roles or [] if manifest.backward is not None else []
        keys = [d.stored for d, role in zip(manifest.inputs, roles) if role == "tangent"]
        if not keys or not all(keys):
            return None
        values = read_tensors(inside(parent, manifest.inputs_file), keys, device="cpu")
        return [values[k] for k in keys]
    except Exception:
        return None


def _float64_reference(case: Case, base: list[Any], tangents: list[torch.Tensor]) -> tuple[Any, list[Any]] | None:
    if not any(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != torch.float64 for v in base):
        return None
    try:
        values = to_float64(base)
        for v, b in zip(values, base):
            if isinstance(v, torch.Tensor) and isinstance(b, torch.Tensor) and b.requires_grad:
                v.requires_grad_(True)
        if written_state(case.gm)[1]:
            return None
        gm = without_regions(case.gm).to(torch.float64)  # a region would cast back to its low precision
        out, inputs = _forward(gm, values, clone=False)
        return out, _grads(grad_leaves(out), inputs, [t.double() for t in tangents])
    except Exception:
        return None  # some ops have no float64 kernel; eager in the graph's dtypes is the reference then


def _judge_training(outcome: Outcome, case: Case, ref_out: Any, out: Any, ref_grads: list[Any], grads: list[Any],
                    ref64: Any, tol: Tolerance) -> None:
    outcome.reference = "float64" if ref64 is not None else "eager"
    bad: list[OutputMismatch] = list(judge_outputs(_detached(ref_out), _detached(out),
                                                   ref64=_detached(ref64[0]) if ref64 else None, tol=tol))
    names = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    for i, (e, a) in enumerate(zip(ref_grads, grads)):
        if e is None or a is None:
            if (e is None) != (a is None):
                bad.append(GradientMismatch(i, "type", detail=f"{type(e).__name__} vs {type(a).__name__}", name=names[i]))
            continue
        r64 = [ref64[1][i]] if ref64 is not None and ref64[1][i] is not None else None
        for m in judge_outputs([e], [a], ref64=r64, tol=tol):
            bad.append(GradientMismatch(**{**m.to_dict(), "index": i}, name=names[i]))
    add_mismatches(outcome, bad)


def _detached(value: Any) -> Any:
    return pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, value)


__all__ = ["as_graph_backend", "fails_in_backward", "is_backward_dump", "judge_mutations", "restore_attrs", "run_training_case", "written_attrs_before"]
