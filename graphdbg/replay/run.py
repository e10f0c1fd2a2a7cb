"""run_case: a Case goes in, an Outcome comes out.

    >>> outcome = run_case(case, "inductor", passes="mypkg.passes:fuse_rmsnorm")
    >>> outcome.status
    'mismatch'

The graph is compiled the way the user's program compiled it: ``torch.compile`` re-traces
the GraphModule with Dynamo and hands the result to the backend (passes first), so backends
that need Dynamo's metadata (Thunder's splitter) see what they expect. ``direct=True`` skips
Dynamo and calls ``backend(gm, inputs)`` on the dumped graph itself.

The reference is the same graph run eagerly, in float64 where the graph allows it. Outputs
are judged against it (``graphdbg.accuracy``). With ``isolate=True`` the replay runs in a
child process, so a segfault, an abort or a hang becomes an Outcome instead of the end of
the replayer.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
import traceback as tb
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from graphdbg.accuracy import judge_outputs
from graphdbg.errors import GraphdbgError
from graphdbg.graph_hash import target_name
from graphdbg.replay.backends import resolve_backend
from graphdbg.rebuild.inputs import clone_values, to_float64
from graphdbg.replay.outcome import Outcome
from graphdbg.signature import signature

if TYPE_CHECKING:
    from graphdbg.case import Case


def run_case(
    case: Case,
    backend: str | Callable[..., Any] = "eager",
    passes: str | Sequence[Any] | None = None,
    *,
    isolate: bool = False,
    timeout: float | None = None,
    accuracy: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    direct: bool = False,
    pass_stage: str = "pre",
    backward: bool = False,
) -> Outcome:
    """Replay ``case`` under ``backend`` after ``passes``; never raises for a failure of the
    graph or backend (that is the Outcome), only for a replay that can't start (GraphdbgError)."""
    if isolate:
        from graphdbg.replay.isolation import run_isolated

        return run_isolated(case, backend, passes, timeout=timeout, accuracy=accuracy, rtol=rtol, atol=atol,
                            direct=direct, pass_stage=pass_stage, **({"backward": True} if backward else {}))
    # training (replay/backward.py): forward + backward, and the graphs that write in place
    from graphdbg.replay.backward import as_graph_backend, is_backward_dump, judge_mutations, restore_attrs, run_training_case, written_attrs_before

    if backward and not is_backward_dump(case.dump):  # a backward dump's graph replays alone
        return run_training_case(case, backend, passes, accuracy=accuracy, rtol=rtol, atol=atol, direct=direct,
                                 pass_stage=pass_stage)
    from graphdbg.replay.passes import (
        PassFailed,
        apply_passes,
        find_pass_failure,
        inductor_post_grad_patch,
        resolve_passes,
    )

    name, be = resolve_backend(backend)
    specs = resolve_passes(passes, default_stage=pass_stage)
    pre = [p for p in specs if p.stage == "pre"]
    post = [p for p in specs if p.stage != "pre"]
    if post and name != "inductor":
        raise GraphdbgError(f"post_grad passes run inside Inductor; backend {name!r} is not inductor")
    backend_fn = as_graph_backend(_backend_callable(be), name, case.dump)  # an AOT bw_compiler replaying its backward dump

    outcome = Outcome(status="pass", backend=name, device=str(case.device), stand_ins=[s.describe() for s in case.stand_ins])
    reports: list[Any] = []
    state: dict[str, Any] = {"compiled": False, "compile_s": 0.0, "gm": case.gm, "node": None}
    started = time.perf_counter()
    grad = bool(case.dump.manifest.get("grad_enabled", False)) if case.dump is not None else False

    def staged(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        gm, done = apply_passes(gm, pre)
        reports.extend(done)
        state["gm"] = gm
        t0 = time.perf_counter()
        compiled = backend_fn(gm, example_inputs, **kwargs)
        state["compile_s"] += time.perf_counter() - t0
        state["compiled"] = True

        def run(*args: Any) -> Any:
            # Dynamo trims its callers' frames from tracebacks; find the node while they are here.
            try:
                return compiled(*args)
            except Exception as e:
                state["node"] = failing_node(e, gm)
                raise

        if getattr(compiled, "_boxed_call", False):
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    reference = None
    attrs_before = written_attrs_before(case.gm) if accuracy else None
    if accuracy:
        reference = _reference(case, grad)
        restore_attrs(case.gm, attrs_before)
        if isinstance(reference, Outcome):  # the graph fails even eagerly
            reference.backend, reference.device, reference.stand_ins = name, outcome.device, outcome.stand_ins
            return reference

    gm = copy.deepcopy(case.gm)
    inputs = clone_values(case.inputs)
    patch = inductor_post_grad_patch(post, reports) if post else {}
    try:
        with torch.set_grad_enabled(grad), _inductor_patch(patch):
            t0 = time.perf_counter()
            if direct:
                compiled = staged(gm, inputs)
                state["compiled"] = True
                result = compiled(*inputs)
            else:
                torch._dynamo.reset()
                compiled = torch.compile(gm, backend=staged, dynamic=False)
                result = compiled(*inputs)
            outcome.run_s = time.perf_counter() - t0 - state["compile_s"]
    except PassFailed as e:
        reports.extend(r for r in e.reports if r not in reports)
        _crash(outcome, e.__cause__ or e, f"pass:{e.report.name}", None)
    except GraphdbgError:
        raise
    except Exception as e:
        failed_pass = find_pass_failure(e)  # a post_grad pass, raised from inside Inductor
        if failed_pass is not None:
            reports.extend(r for r in failed_pass.reports if r not in reports)
            _crash(outcome, failed_pass.__cause__ or failed_pass, f"pass:{failed_pass.report.name}", None)
            outcome.passes = [r.to_dict() for r in reports]
            outcome.compile_s = state["compile_s"]
            outcome.total_s = time.perf_counter() - started
            return outcome
        inner = _unwrap(e)
        node = state["node"]
        if node is None and state["compiled"]:
            node = _locate_with_interpreter(state["gm"], case.inputs, inner, grad)
        _crash(outcome, inner, "run" if state["compiled"] else "compile", state["gm"], node)
    else:
        if reference is not None:
            _judge(outcome, reference, result, rtol, atol)
            judge_mutations(outcome, case, attrs_before, gm, inputs, grad, rtol, atol)
    finally:
        if not direct:
            torch._dynamo.reset()
    outcome.passes = [r.to_dict() for r in reports]
    outcome.compile_s = state["compile_s"]
    outcome.total_s = time.perf_counter() - started
    return outcome


def replay_dump(dump: Any, backend: str | Callable[..., Any] = "eager", passes: Any = None, *,
                device: Any = None, isolate: bool = True, timeout: float | None = None, **options: Any) -> Outcome:
    """Replay a Dump; with ``isolate`` its inputs are loaded only in the child process."""
    resolve_backend(backend)  # an unknown backend is an error here, not a crash in the child
    if isolate:
        from graphdbg.replay.isolation import run_isolated

        return run_isolated(dump, backend, passes, timeout=timeout, device=device, **options)
    return run_case(dump.case(device), backend, passes, **options)


def compare_backends(dump: Any, backends: Sequence[str], *, device: Any = None, isolate: bool = True,
                     timeout: float | None = None, **options: Any):
    """One replay per backend; a pandas DataFrame with one row each (and the Outcomes in ``.attrs``)."""
    import pandas as pd

    outcomes = [replay_dump(dump, b, device=device, isolate=isolate, timeout=timeout, **options) for b in backends]
    rows = [{"backend": o.backend, "status": o.status, "signature": o.signature, "stage": o.stage,
             "seconds": o.total_s, "max_abs_error": o.max_abs_error, "max_rel_error": o.max_rel_error,
             "reproduces": o.reproduces(dump)} for o in outcomes]
    df = pd.DataFrame(rows)
    df.attrs["outcomes"] = outcomes
    return df


def _backend_callable(be: str | Callable[..., Any]) -> Callable[..., Any]:
    if isinstance(be, str):
        from torch._dynamo import lookup_backend

        return lookup_backend(be)
    return be


@contextlib.contextmanager
def _inductor_patch(patch: dict[str, Any]):
    if not patch:
        yield
        return
    import torch._inductor.config as inductor_config

    with inductor_config.patch(patch):
        yield


def _reference(case: Case, grad: bool) -> Any:
    """(eager outputs, float64 outputs or None), or a crash Outcome if the graph fails eagerly."""
    try:
        with torch.set_grad_enabled(grad):
            ref = case.gm(*clone_values(case.inputs))
    except Exception as e:
        out = Outcome(status="pass", backend="eager")
        _crash(out, e, "reference", case.gm)
        return out
    ref64 = None
    if any(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != torch.float64 for v in case.inputs):
        try:
            with torch.no_grad():
                ref64 = copy.deepcopy(case.gm)(*to_float64(clone_values(case.inputs)))
        except Exception:
            ref64 = None  # some ops have no float64 kernel; the graph's own dtypes are the reference then
    return ref, ref64


def _judge(outcome: Outcome, reference: Any, result: Any, rtol: float | None, atol: float | None) -> None:
    ref, ref64 = reference
    bad = judge_outputs(ref, result, ref64=ref64, rtol=rtol, atol=atol)
    outcome.reference = "float64" if ref64 is not None else "eager"
    if not bad:
        return
    outcome.status = "mismatch"
    outcome.mismatches = [m.to_dict() for m in bad]
    errs = [m.max_abs_error for m in bad if m.max_abs_error is not None]
    rels = [m.max_rel_error for m in bad if m.max_rel_error is not None]
    outcome.max_abs_error = max(errs) if errs else None
    outcome.max_rel_error = max(rels) if rels else None
    outcome.message = "; ".join(m.describe() for m in bad)
    outcome.signature = "mismatch: " + ", ".join(f"output {m.index} {m.reason}" for m in bad)


def _unwrap(e: BaseException) -> BaseException:
    """The backend's own exception, not Dynamo's or Inductor's wrapper around it."""
    from graphdbg.signature import unwrap_backend_exception

    return unwrap_backend_exception(e)


def _crash(outcome: Outcome, e: BaseException, stage: str, gm: fx.GraphModule | None, node: fx.Node | None = None) -> None:
    if node is None and gm is not None:
        node = failing_node(e, gm)
    msg = str(e)
    outcome.status = "crash"
    outcome.stage = stage
    outcome.error_type = type(e).__name__
    outcome.message = msg
    outcome.traceback = "".join(tb.format_exception(type(e), e, e.__traceback__))[-8000:]
    if node is not None:
        outcome.node, outcome.node_target = node.name, target_name(node)
    outcome.signature = signature(type(e).__name__, msg, outcome.node_target)


def _locate_with_interpreter(gm: fx.GraphModule, inputs: list[Any], exc: BaseException, grad: bool) -> fx.Node | None:
    """Run the graph the backend received under fx.Interpreter; if it fails the same way, the
    node it was executing is the failing node. (fx strips tracebacks through generated code,
    so the frames alone can't say.)"""
    try:
        with torch.set_grad_enabled(grad):
            fx.Interpreter(gm).run(*clone_values(inputs))
    except Exception as e:
        if type(e) is type(exc) and signature(type(e).__name__, str(e)).split("\n")[0] == signature(type(exc).__name__, str(exc)):
            return failing_node(e, gm)
    return None


_WHILE_EXECUTING = re.compile(r"While executing %(\w+)")


def failing_node(e: BaseException, gm: fx.GraphModule) -> fx.Node | None:
    """The node whose code raised, from the traceback through fx's generated forward, or the
    'While executing %name' note fx.Interpreter adds."""
    nodes = {n.name: n for n in gm.graph.nodes}
    text = str(e) + "".join(getattr(e, "__notes__", []) or [])
    m = _WHILE_EXECUTING.search(text)
    if m and m.group(1) in nodes:
        return nodes[m.group(1)]
    code_lines = gm.code.splitlines()
    for frame in reversed(tb.extract_tb(e.__traceback__)):
        if frame.filename.startswith("<eval_with_key>") and frame.lineno and 0 < frame.lineno <= len(code_lines):
            line = code_lines[frame.lineno - 1].strip()
            name = line.split("=", 1)[0].strip().split(":")[0].strip() if "=" in line else ""
            if name in nodes:
                return nodes[name]
    return None
