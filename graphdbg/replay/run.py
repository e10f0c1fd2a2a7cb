"""run_case: a Case goes in, an Outcome comes out.

    >>> outcome = run_case(case, "inductor", passes="mypkg.passes:fuse_rmsnorm")
    >>> outcome.status
    'mismatch'

The graph is compiled the way the user's program compiled it: ``torch.compile`` re-traces
the GraphModule with Dynamo and hands the result to the backend (passes first), so backends
that need Dynamo's metadata (Thunder's splitter) see what they expect. ``direct=True`` skips
Dynamo and calls ``backend(gm, inputs)`` on the dumped graph itself; it is what ``eager``
(without passes) always does, having no compiler to feed.

The reference is the same graph run eagerly; outputs are judged against it
(``graphdbg.judge.accuracy``). An output outside tolerance is judged again against a float64 run of
the graph (``graphdbg.replay.float64``), made only then and only for those outputs; a mismatch
that remains and depends on stand-ins is marked untrusted (``replay.stand_in_flow``). Inputs
the graph doesn't write (``replay.mutation``) are shared by the runs rather than copied for
each. With ``isolate=True`` the replay runs in a child process, so a segfault, an abort or a
hang becomes an Outcome instead of the end of the replayer. How a replay runs is one
``ReplayOptions`` (``replay.options``): ``run_case``'s keywords build it, ``replay_case`` takes it.
"""

from __future__ import annotations

import copy
import re
import time
import traceback as tb
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from graphdbg.backends.calls import as_dynamo_calls_it, call_inputs
from graphdbg.backends.compiler_config import Settings, replay_settings
from graphdbg.backends.generated_code import watch_generated_code
from graphdbg.errors import GraphdbgError
from graphdbg.graph.allow_list import check_graph_module
from graphdbg.graph.hashing import target_name
from graphdbg.judge.accuracy import (
    BY_DTYPE,
    Tolerance,
    compare_outputs,
    compared_note,
    mismatches_beyond_float64,
    mismatches_beyond_ulps,
    needs_float64,
)
from graphdbg.judge.failing_node import code_file, failing_node, node_on_line
from graphdbg.judge.randomness import random_outputs, rng_state, same_draws, same_generators, set_rng_state
from graphdbg.judge.signature import exception_text, signature
from graphdbg.outcome import Outcome
from graphdbg.rebuild.inputs import clone_value
from graphdbg.rebuild.kernel_source import kernels_ran
from graphdbg.replay.backend_setup import backend_and_passes, compiler_settings
from graphdbg.replay.crash import failed_pass, set_crash, set_pass_crash, unwrap
from graphdbg.replay.divergence import replay_divergence, runs_graph
from graphdbg.replay.float64 import ReferenceUnavailable, float64_reference
from graphdbg.replay.graph_meta import reads_meta, with_dynamo_meta
from graphdbg.replay.mutation import mutated_inputs
from graphdbg.replay.options import ReplayOptions, replay_options
from graphdbg.replay.passes import apply_passes
from graphdbg.replay.retrace import compile_as_captured, whole_graph
from graphdbg.replay.stand_in_flow import stand_ins_behind_outputs
from graphdbg.replay.training_replay import (
    add_mismatches,
    as_graph_backend,
    fails_in_backward,
    is_backward_dump,
    mutation_mismatches_of,
    restore_attrs,
    run_training_case,
    written_attrs_before,
)
from graphdbg.replay.uninitialised import set_aside_uninitialised

if TYPE_CHECKING:
    from graphdbg.case import Case


@dataclass
class Resolved:
    """The resolve step's answer: what a replay of one Case runs and how."""

    name: str  # the backend as people read it
    backend: Callable[..., Any]  # the callable torch.compile (or a direct call) hands the graph to
    pre: list[Any]  # passes run on the graph before the backend
    post: list[Any]  # post_grad passes, run inside Inductor
    grad: bool  # grad mode the graph was captured under
    mutated: set[int]  # indices of the inputs the graph writes
    settings: Settings  # the captured compiler settings to apply (and those skipped, with why)
    dump: Any = None  # the Dump the graph came from: the modules it recorded (``graph_meta``)


def run_case(case: Case, backend: str | Callable[..., Any] = "eager", passes: str | Sequence[Any] | None = None, *,
             options: ReplayOptions | None = None, **settings: Any) -> Outcome:
    """Replay ``case`` under ``backend`` after ``passes``; never raises for a failure of the
    graph or backend (that is the Outcome), only for a replay that can't start (GraphdbgError).

    ``settings`` are fields of ``ReplayOptions`` (``isolate``, ``timeout``, ``accuracy``,
    ``rtol``, ``atol``, ``direct``, ``pass_stage``, ``backward``), over ``options`` when given."""
    opts = replay_options(options, **settings)
    return replay_case(case, backend, opts.but(passes=passes) if passes is not None else opts)


def replay_case(case: Case, backend: str | Callable[..., Any], opts: ReplayOptions) -> Outcome:
    """``run_case`` with its options made. The steps, each a function of this module:
    ``resolve``, ``reference`` (eager, when judging accuracy), ``build_inputs``, ``Compiler``
    (the backend as torch.compile calls it, passes first), ``execute``, then ``judge`` the
    result or ``record_crash`` the failure."""
    backward = fails_in_backward(case.dump) if opts.backward is None else opts.backward
    # Eager has no compiler for Dynamo's graph to feed: the dumped graph runs as it is (as
    # ``--direct``), and a replay under eager doesn't import Dynamo (seconds of CPU).
    direct = bool(opts.direct) or (backend == "eager" and not opts.passes)
    if opts.isolate:  # where it runs: the executor the caller chose (opts.executor), else the default for isolate
        from graphdbg.execution.executor import Job, executor_for  # upward, declared in pyproject's layers contract

        return executor_for(opts).submit(Job("replay", case, backend, opts.but(direct=direct, backward=backward)))
    if backward and not is_backward_dump(case.dump):  # a backward dump's graph replays alone
        return run_training_case(case, backend, opts.but(direct=direct))
    tol = opts.tolerance
    started = time.perf_counter()
    resolved = resolve(case, backend, opts.passes, pass_stage=opts.pass_stage)
    outcome = Outcome(status="pass", backend=resolved.name, device=str(case.device),
                      stand_ins=[s.describe() for s in case.stand_ins],
                      kernels=kernels_ran(case.gm, case.dump.manifest if case.dump is not None else None))
    outcome.stand_ins += resolved.settings.shown()  # recorded settings the allow-list skipped, and why
    start = rng_state()  # the reference, the compiled run and the float64 run draw from one random state
    ref, attrs_before = (reference(case, resolved) if opts.accuracy else (None, None))
    after_eager = rng_state()
    set_rng_state(start)
    if isinstance(ref, Outcome):  # the graph fails even eagerly
        ref.backend, ref.device, ref.stand_ins, ref.kernels = resolved.name, outcome.device, outcome.stand_ins, outcome.kernels
        return ref
    with watch_generated_code(resolved.name == "inductor" or None) as code:  # compared with the capture's (judge.environment)
        gm, inputs, compiler, result, error, direct = execute_whole(case, resolved, outcome, direct, start)
    outcome.generated_code = code.to_dict()
    try:
        if error is not None:
            record_crash(outcome, error, compiler, case, gm)
        elif ref is not None:
            # what the backend wrote is judged first; then its inputs are done with and only outputs are
            bad_writes = mutation_mismatches_of(case, attrs_before, gm, inputs, resolved.grad, tol)
            del inputs
            judge(outcome, case, ref, result, tol, draws=(start, rng_state(), after_eager))
            add_mismatches(outcome, bad_writes)
            if outcome.status == "mismatch" and compiler.runs_graph and not resolved.post:  # where it starts, when cheap
                found = replay_divergence(case, resolved.backend, resolved.pre, resolved.grad, tol)
                outcome.diverges_at = found.to_dict() if found is not None else None
    finally:
        if not direct:
            torch._dynamo.reset()
    outcome.passes = [r.to_dict() for r in compiler.reports]
    outcome.compile_s = compiler.compile_s
    outcome.total_s = time.perf_counter() - started
    return outcome


def resolve(case: Case, backend: str | Callable[..., Any] = "eager", passes: str | Sequence[Any] | None = None, *,
            pass_stage: str = "pre") -> Resolved:
    """Step 1: check the graph against the allow-list, name the backend and the passes, read the
    captured grad mode and compiler settings. Raises GraphdbgError for a replay that can't start."""
    check_graph_module(case.gm, case.inputs)  # the loader's allow-list, again on what is about to run
    name, be, pre, post = backend_and_passes(backend, passes, pass_stage)
    manifest = case.dump.manifest_data if case.dump is not None else None
    # The compiler settings of the captured run (graphdbg.backends.compiler_config), unless --no-config.
    settings = replay_settings(manifest)
    return Resolved(
        name=name,
        backend=as_graph_backend(be, name, case.dump),  # an AOT bw_compiler replaying its backward dump
        pre=pre, post=post,
        grad=case.dump is not None and case.dump.manifest.grad_enabled,
        mutated=mutated_inputs(case.gm),
        settings=settings,
        dump=case.dump,
    )


def reference(case: Case, resolved: Resolved) -> tuple[Any, dict[str, torch.Tensor] | None]:
    """Step 2: (the eager outputs, the attributes the graph writes as they were before), with the
    attributes put back after the eager run; the outputs are a crash Outcome if the graph fails
    even eagerly."""
    attrs_before = written_attrs_before(case.gm)
    ref = _reference(case, resolved.grad, resolved.mutated)
    restore_attrs(case.gm, attrs_before)
    return ref, attrs_before


def build_inputs(case: Case, resolved: Resolved) -> tuple[fx.GraphModule, list[Any]]:
    """Step 3: the module and inputs of the run under the backend: a copy of the module (a
    backend may change it), inputs copied where ``fresh_inputs`` says."""
    return copy.deepcopy(case.gm), fresh_inputs(case.inputs, resolved.mutated)


class Compiler:
    """Step 4: the backend as torch.compile calls it, after the ``pre`` passes; it times the
    compile, and remembers what it needs to name the failing node when the compiled code fails.

        >>> compiler = Compiler(resolve(case, "inductor"))
        >>> compiled = compiler(gm, inputs)       # what torch.compile(gm, backend=compiler) calls
        >>> compiler.compiled, compiler.compile_s
    """

    def __init__(self, resolved: Resolved):
        self.resolved = resolved
        self.reports: list[Any] = []  # one PassReport per pass run
        self.compiled = False  # whether the graph compiling now got through the backend
        self.compile_s = 0.0
        self.gm: fx.GraphModule | None = None  # the graph the backend last received
        self.node: fx.Node | None = None  # the node the compiled code failed in, if its frames say
        self.failed: tuple[fx.GraphModule, list[Any]] | None = None  # (graph, inputs) of the failing call
        self.traceback: tuple[BaseException, str] | None = None  # the failure, formatted before Dynamo cut it
        self.runs_graph = False  # whether the backend handed back a GraphModule's code (its nodes' values can be seen)

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        self.compiled = False  # after a graph break, the next graph compiling: a failure now is its compile's
        if reads_meta(self.resolved.name, self.resolved.pre):  # Dynamo's meta (fake example values, ...), called directly too
            gm = with_dynamo_meta(gm, example_inputs, self.resolved.dump)
        gm, done = apply_passes(gm, self.resolved.pre)
        self.reports.extend(done)
        self.gm = gm
        t0 = time.perf_counter()
        # what Dynamo calls for a GraphModule's lazy forward, which it can't see behind ``run`` below
        raw = self.resolved.backend(gm, example_inputs, **kwargs)
        self.runs_graph = runs_graph(raw) is not None
        compiled = as_dynamo_calls_it(raw)
        self.compile_s += time.perf_counter() - t0
        self.compiled = True
        return self._watched(compiled, gm)

    def _watched(self, compiled: Callable[..., Any], gm: fx.GraphModule) -> Callable[..., Any]:
        boxed = bool(getattr(compiled, "_boxed_call", False))

        def run(*args: Any) -> Any:
            # Dynamo trims its callers' frames from tracebacks; find the node while they are here.
            # With a graph break this is one of several graphs, each with inputs of its own: keep
            # them (references) for the interpreter, in case the frames don't say.
            held = call_inputs(args, boxed)
            try:
                return compiled(*args)
            except Exception as e:
                self.node = failing_node(e, gm)
                self.failed = (gm, held)
                # the traceback as it stands here still has the generated code's line; Dynamo's
                # frames above cut it (fx re-raises with_traceback(None)) on the way out
                below = e.__traceback__.tb_next if e.__traceback__ is not None else None  # from the backend's code down
                self.traceback = (e, "".join(tb.format_exception(type(e), e, below)))
                raise

        if boxed:
            run._boxed_call = True  # type: ignore[attr-defined]
        return run


def execute(gm: fx.GraphModule, inputs: list[Any], compiler: Compiler, resolved: Resolved, outcome: Outcome, *,
            direct: bool = False) -> Any:
    """Step 5: compile ``gm`` with ``compiler`` and run it on ``inputs`` under the captured grad
    mode and compiler settings: through torch.compile (Dynamo re-traces it as captured), or
    with ``direct`` by calling the compiler on ``gm`` itself. Returns the outputs; raises what
    the compile or the run raised. Sets ``outcome.run_s``, and names recorded settings this
    torch lacks among ``outcome.stand_ins``. The caller resets Dynamo afterwards."""
    settings = resolved.settings
    with torch.set_grad_enabled(resolved.grad), compiler_settings(settings, resolved.post, compiler.reports, outcome):
        t0 = time.perf_counter()
        if direct:
            compiled = compiler(gm, inputs)
            result = compiled(*inputs)
        else:
            torch._dynamo.reset()
            result = compile_as_captured(gm, inputs, compiler, settings)(*inputs)
        outcome.run_s = time.perf_counter() - t0 - compiler.compile_s
    return result


def execute_whole(case: Case, resolved: Resolved, outcome: Outcome, direct: bool,
                  start: Any) -> tuple[fx.GraphModule, list[Any], Compiler, Any, Exception | None, bool]:
    """Steps 3 to 5: (graph, inputs, compiler, result, the exception it raised, direct). When
    Dynamo's re-trace broke the graph (``replay/retrace.py``), the backend saw only parts of
    it: it runs again on fresh inputs, called on the whole graph directly, and the Outcome says so."""

    def attempt(direct: bool) -> tuple[fx.GraphModule, list[Any], Compiler, Any, Exception | None]:
        set_rng_state(start)
        gm, inputs = build_inputs(case, resolved)
        compiler = Compiler(resolved)
        try:
            return gm, inputs, compiler, execute(gm, inputs, compiler, resolved, outcome, direct=direct), None
        except GraphdbgError:
            if not direct:
                torch._dynamo.reset()
            raise
        except Exception as e:
            return gm, inputs, compiler, None, e

    (gm, inputs, compiler, result, error), direct = whole_graph(attempt, direct, outcome.stand_ins)
    return gm, inputs, compiler, result, error, direct


def record_crash(outcome: Outcome, e: BaseException, compiler: Compiler, case: Case, gm: fx.GraphModule) -> None:
    """Step 6 on a failure: ``outcome`` becomes the crash ``e`` is: of a pass (``pass:<name>``),
    of the compile or of the run, with the failing node in the dump's names where it can be found."""
    failed = failed_pass(e)
    if failed is not None:
        compiler.reports.extend(r for r in failed.reports if r not in compiler.reports)
        set_pass_crash(outcome, failed)
        return
    inner = unwrap(e)
    node = compiler.node
    failed_gm, failed_inputs = compiler.failed or (compiler.gm or case.gm, case.inputs)
    if node is None and compiler.compiled:
        node = _locate_with_interpreter(failed_gm, failed_inputs, inner, compiler.resolved.grad, mutated_inputs(failed_gm))
    if node is None:
        node = failing_node(inner, failed_gm)
    if node is not None:
        node = dump_node(node, gm)  # in the dump's names, not those of Dynamo's re-trace
    _crash(outcome, inner, "run" if compiler.compiled else "compile", failed_gm, node)
    raised, text = compiler.traceback or (None, "")
    if raised is inner and text:
        outcome.traceback = text[-8000:]


SMALL_INPUT_BYTES = 16 << 20


def fresh_inputs(values: list[Any], mutated: set[int]) -> list[Any]:
    """The inputs of one run: a copy of each input the graph writes, and of each small one (a
    backend that wrongly writes an input then spoils no later run); big inputs the graph only
    reads (weights, KV and Mamba caches) are shared by every run instead of copied per run."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and (i in mutated or v.numel() * v.element_size() <= SMALL_INPUT_BYTES):
            out.append(clone_value(v))
        else:
            out.append(v)
    return out


def _reference(case: Case, grad: bool, mutated: set[int]) -> Any:
    """The eager outputs, detached, or a crash Outcome if the graph fails eagerly.

    The float64 reference is made later, only for outputs that disagree with these."""
    try:
        with torch.set_grad_enabled(grad):
            ref = case.gm(*fresh_inputs(case.inputs, mutated))
    except Exception as e:
        out = Outcome(status="pass", backend="eager")
        _crash(out, e, "reference", case.gm)
        return out
    return torch.utils._pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, ref)


def judge(outcome: Outcome, case: Case, ref: Any, result: Any, tol: Tolerance = BY_DTYPE,
          draws: tuple[Any, Any, Any] | None = None) -> None:
    """``draws``: the random states (at the start, after the compiled run, after eager's): outputs
    of random ops are set aside when the backend drew other numbers than eager (judge.randomness)."""
    ref, result = set_aside_uninitialised(outcome, case.gm, ref, result)  # no verdict on memory nobody wrote
    bad = compare_outputs(ref, result, tol=tol)
    if bad and draws is not None and not same_generators(draws[1], draws[2]):
        drawn = random_outputs(case.gm)
        bad = [m for m in bad if m.index not in drawn]
        if drawn:
            outcome.stand_ins.append(f"outputs {sorted(drawn)} depend on random ops the backend draws otherwise: not compared")
    outcome.reference = "eager"
    suspects = needs_float64(bad, ref)
    if suspects:
        with same_draws(draws[0] if draws is not None else None):
            ref64, outcome.reference, outcome.reference_error = _float64_outputs(case, suspects)
        if ref64 is not None:
            bad = mismatches_beyond_float64(bad, ref, result, ref64, tol=tol)
            del ref64
        elif tol.by_dtype:  # no float64: eager judges, within the dtype's resolution (judge.accuracy)
            bad = mismatches_beyond_ulps(bad, ref, result, tol=tol)
            outcome.reference = "eager, within an ulp bound of each output's dtype"
    outcome.compared = compared_note(ref)
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
    _label_stand_ins(outcome, case)


def _float64_outputs(case: Case, indices: list[int]) -> tuple[dict[int, Any] | None, str, str | None]:
    """(float64 values of output leaves ``indices``, what the reference was, why none if none).

    Run on the case's device; on the CPU when the device runs out of memory doing it."""

    devices = [None] if case.device.type == "cpu" else [None, torch.device("cpu")]
    for device in devices:
        try:
            ref = float64_reference(case.gm, case.inputs, outputs=indices, device=device)
        except ReferenceUnavailable as e:
            return None, "eager", f"no float64 reference: {e}"
        except torch.OutOfMemoryError:
            if case.device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        except Exception as e:  # never a traceback for the reference: the verdict says eager judged
            return None, "eager", f"no float64 reference: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        what = "float64" + (f" on {device}" if device is not None else "")
        if ref.own_dtype_nodes:
            shown = ", ".join(ref.own_dtype_nodes[:4]) + (" ..." if len(ref.own_dtype_nodes) > 4 else "")
            what += f" ({len(ref.own_dtype_nodes)} nodes in their own dtype: {shown})"
        return ref.values, what, None
    return None, "eager", f"no float64 reference: out of memory on {case.device} and on the cpu"


def _label_stand_ins(outcome: Outcome, case: Case) -> None:
    """Name the stand-ins behind each mismatching output; when every mismatching output depends
    on some, the verdict is untrusted (the difference may be the stand-ins', not the backend's)."""

    placeholders = [n.name for n in case.gm.graph.nodes if n.op == "placeholder"]
    zeroed = {s.name for s in case.stand_ins if s.kind == "synthesized" and ": zeros (" in s.detail}
    labels = {i: f"input {name} (zeros, too big to fill)" for i, name in enumerate(placeholders) if name in zeroed}
    try:
        flow = stand_ins_behind_outputs(case.gm, labels)
    except Exception:  # the data flow could not be followed: say nothing rather than guess
        return
    behind: list[str] = []
    for m in outcome.mismatches:
        names = sorted(flow[m["index"]]) if m["index"] < len(flow) else []
        m["stand_ins"] = names
        behind += [n for n in names if n not in behind]
    # one mismatching output that no stand-in reaches is a real difference: trusted
    if outcome.mismatches and all(m["stand_ins"] for m in outcome.mismatches):
        outcome.trusted = False
        shown = ", ".join(behind[:5]) + (f" and {len(behind) - 5} more" if len(behind) > 5 else "")
        outcome.untrusted_because = f"depends on stand-ins: {shown}"


def _crash(outcome: Outcome, e: BaseException, stage: str, gm: fx.GraphModule | None, node: fx.Node | None = None) -> None:
    if node is None and gm is not None:
        node = failing_node(e, gm)
    set_crash(outcome, e, stage, node)


def _locate_with_interpreter(gm: fx.GraphModule, inputs: list[Any], exc: BaseException, grad: bool,
                             mutated: set[int]) -> fx.Node | None:
    """Run the graph the backend received under fx.Interpreter; if it fails the same way, the
    node it was executing is the failing node. (fx strips tracebacks through generated code,
    so the frames alone can't say.)"""
    try:
        with torch.set_grad_enabled(grad):
            fx.Interpreter(gm).run(*fresh_inputs(inputs, mutated))
    except Exception as e:
        if type(e) is type(exc) and signature(type(e).__name__, exception_text(e)).split("\n")[0] == signature(type(exc).__name__, exception_text(exc)):
            return failing_node(e, gm)
    return None


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def dump_node(node: fx.Node, gm: fx.GraphModule) -> fx.Node:
    """``node`` of a graph Dynamo traced from ``gm``'s code, as the node of ``gm`` it came from.

    Dynamo names a re-traced graph's nodes afresh (after a graph break the second graph's first
    linear is ``linear`` again); each node's ``stack_trace`` still names the line of ``gm``'s
    code it was traced from. A node that came from no line of ``gm`` (a backend or pass added
    it), or from one that calls something else, stays as it is."""
    if node.graph is gm.graph:
        return node
    own = code_file(gm)
    trace = node.meta.get("stack_trace") if own is not None else None
    if not isinstance(trace, str):
        return node
    lines = [int(n) for f, n in _FRAME.findall(trace) if f == own]
    found = node_on_line(gm, lines[-1]) if lines else None
    if found is None or target_name(found) != target_name(node):
        return node
    return found
