"""Training capture: the backward AOTAutograd compiles lazily, and the mutations of a step.

    >>> backend = graphdbg.capture(aot_autograd(fw_compiler=fw, bw_compiler=bw), mode="accuracy")
    >>> loss = torch.compile(model, backend=backend)(x).sum()
    >>> loss.backward()   # bw raises: dumps/rank0/g0-backward-compile_error-<hash>/ (+ forward/)

AOTAutograd compiles the backward graph only when ``loss.backward()`` first runs, outside the
backend call ``CapturingBackend`` wraps. While a captured backend compiles, the
``bw_compiler`` handed to ``aot_module_simplified`` (Inductor's own, or a custom
``aot_autograd`` one) is wrapped here, so its compile error, its compiled code's run-time
error and (in accuracy mode) its wrong gradients leave a *backward dump*: a normal dump of the
backward graph with the values it received (saved tensors, tangents, symints), and a
``forward/`` dump of the forward graph with the inputs of its last call. The user's exception
is re-raised unchanged.

``compare_mutations`` covers the other half of training: graphs with no outputs whose work is
in-place (``Adam(foreach=True).step()``), compared input by input against eager on copies.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import shutil
import sys
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from graphdbg.backends.calls import drop_own_frame
from graphdbg.capture.confirm import Draws, confirm, draw_as_eager
from graphdbg.capture.rng import rng_state, same_draws
from graphdbg.capture.stderr import say
from graphdbg.graph.snapshot import GraphSnapshot
from graphdbg.judge.accuracy import Tolerance, compare_value
from graphdbg.judge.mutations import (
    GradientMismatch,
    InputMismatch,
    attrs_before_call,
    compare_mutations,
    load_attrs,
    mutated_inputs,
    mutation_mismatches,
    written_state,
)
from graphdbg.rebuild.inputs import clone_values
from graphdbg.store.write import write_dump

if TYPE_CHECKING:
    from graphdbg.capture.hook import CapturingBackend

FORWARD_FOLDER = "forward"
_current = threading.local()
_installed: dict[str, Any] = {}


# Backward capture ---------------------------------------------------------------------
class BackwardWatch:
    """Set up by ``CapturingBackend`` around one backend call: wraps the AOT bw_compiler it
    hands out, and remembers the forward's inputs of the last call for a backward dump."""

    def __init__(self, owner: CapturingBackend | None, snap: GraphSnapshot | None):
        self.owner, self.snap = owner, snap
        self.last_inputs: list[Any] | None = None
        self.compiling = False
        self.bw_count = 0
        self.dumped: set[tuple[str, str]] = set()  # (kind, graph hash): AOT retries a failed compile each backward
        self.bw_reference: str | None = None

    @property
    def active(self) -> bool:
        return self.owner is not None and self.snap is not None

    def __enter__(self) -> BackwardWatch:
        if self.active:
            _install()
            stack = getattr(_current, "stack", None) or []
            _current.stack = [*stack, self]
            self.compiling = True
            # accuracy mode: a training step's dropout draws eager's numbers, so what flows from it is compared
            self._draws = draw_as_eager(self.snap, self.owner.mode == "accuracy")
            self._draws.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            self.compiling = False
            _current.stack = _current.stack[:-1]
            self._draws.__exit__(*exc)

    def remember(self, values: list[Any]) -> None:
        """Keep the forward's inputs of this call (references, not copies) when a backward may
        follow: the backward's dump writes its forward beside it. ``CapturingBackend`` calls
        this from its own wrapper, once a backward was compiled (one wrapper per call, not two)."""
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in values):
            self.last_inputs = values

    # the bw_compiler wrapper ------------------------------------------------------------
    def wrap_bw_compiler(self, bw_compiler: Any) -> Any:
        watch = self
        self.bw_count += 1
        self.bw_reference = _function_reference(bw_compiler)

        def compile_backward(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
            __tracebackhide__ = True  # noqa: F841
            owner = watch.owner
            accuracy = owner.mode == "accuracy"
            bsnap = owner._guarded(lambda: _backward_snapshot(watch.snap, gm, accuracy), "snapshot the backward graph")
            try:
                compiled = bw_compiler(gm, example_inputs)
            except Exception as e:
                # AOT tries a non-lazy compile inside the forward's compile and retries lazily
                # at backward time: dump the retry, which has the real values.
                args = _backward_args_in_flight()
                if bsnap is not None and (args is not None or not watch.compiling):
                    watch.dump(bsnap, args if args is not None else list(example_inputs), "compile_error", e,
                               inputs_state="backward_at_compile" if args is not None else "backward_fake")
                drop_own_frame(e)
                raise
            except BaseException as e:
                drop_own_frame(e)
                raise
            if bsnap is None:
                return compiled
            return watch.wrap_compiled_backward(compiled, bsnap)

        if type(bw_compiler).__name__ == "SerializableAOTDispatchCompiler":
            wrapped = copy.copy(bw_compiler)
            wrapped.compiler_fn = compile_backward  # keeps Inductor's OutputCode contract
            return wrapped
        return compile_backward

    def wrap_compiled_backward(self, compiled: Callable[..., Any], bsnap: GraphSnapshot) -> Callable[..., Any]:
        boxed = bool(getattr(compiled, "_boxed_call", False))
        owner = self.owner
        accuracy = owner.mode == "accuracy" and bsnap.eager is not None
        checker = owner.checks.counter(f"g{bsnap.seq}")  # the calls compared with eager (capture/accuracy_checks.py)

        def run(*args: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            values = list(args[0]) if boxed and len(args) == 1 and isinstance(args[0], list) else list(args)
            before = owner._guarded(lambda: clone_values(values), "copy the backward's inputs") \
                if accuracy and "accuracy" not in bsnap.dumped and checker.due() else None
            rng = rng_state() if before is not None else None  # eager's backward replays the same draws
            try:
                grads = compiled(*args)
            except Exception as e:
                if "runtime_error" not in bsnap.dumped:
                    bsnap.dumped.add("runtime_error")
                    self.dump(bsnap, values, "runtime_error", e, inputs_state="backward_after_failed_call")
                drop_own_frame(e)
                raise
            except BaseException as e:
                drop_own_frame(e)
                raise
            if before is not None:
                bad = owner._guarded(lambda: _gradient_mismatches(bsnap, before, grads, owner.tol, rng),
                                     "run the eager backward")
                if bad:
                    bsnap.dumped.add("accuracy")
                    self.dump(bsnap, before, "accuracy", None, inputs_state="backward_before_call", mismatches=bad,
                              checks=checker.record())
            return grads

        if boxed:
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def dump(self, bsnap: GraphSnapshot, inputs: list[Any], kind: str, exc: BaseException | None, *,
             checks: dict[str, Any] | None = None, **extra: Any) -> None:
        owner = self.owner
        if (kind, bsnap.graph_hash) in self.dumped:
            return
        self.dumped.add((kind, bsnap.graph_hash))
        path = owner._guarded(lambda: self._write(bsnap, inputs, kind, exc, checks=checks, **extra), "write a backward dump")
        if path is not None:
            owner.dumps.append(path)
            what = type(exc).__name__ if exc is not None else "gradients differ"
            say(f"graphdbg: backward {kind} in backend {owner.backend_ref!r} ({what}); dump written to {path}")

    def _write(self, bsnap: GraphSnapshot, inputs: list[Any], kind: str, exc: BaseException | None, *,
               checks: dict[str, Any] | None = None, **extra: Any) -> Path:
        owner = self.owner
        roles = [_input_role(n, inputs[i] if i < len(inputs) else None) for i, n in enumerate(bsnap.placeholders)]
        backend = self.bw_reference or owner.backend_ref
        overrides = {
            "stage": "backward",
            "failed": "backward",
            "grad_enabled": False,
            "forward": FORWARD_FOLDER if self.last_inputs is not None else None,
            "backward": {"roles": roles, "compiler": self.bw_reference, "forward_backend": owner.backend_ref},
            **({"accuracy_checks": checks} if checks else {}),
        }
        if backend.startswith("__main__:"):  # a bw_compiler of the user's script: replay loads it from there
            module, _, qualname = backend.partition(":")
            script = getattr(sys.modules.get("__main__"), "__file__", None)
            overrides["backend_source"] = {"module": module, "qualname": qualname, "name": qualname,
                                           **({"script": str(Path(script).resolve())} if script else {})}
        elif backend == owner.backend_ref:
            overrides["backend_source"] = owner.backend_source
        common = dict(backend=backend, mode=owner.mode, budget_bytes=owner.budget_bytes)
        path = write_dump(owner.dump_dir, snap=bsnap, inputs=inputs, kind=kind, exc=exc,
                          manifest_overrides=overrides, **common, **extra)
        if self.last_inputs is not None:
            # the forward as its own normal dump, inside the backward one (hidden while written)
            scratch = path.parent / f".forward-{uuid.uuid4().hex[:8]}"
            try:
                # same failure: replayed with --backward, the forward reproduces it
                fw = write_dump(scratch, snap=self.snap, inputs=self.last_inputs, kind=kind, exc=exc,
                                backend=owner.backend_ref, mode=owner.mode, budget_bytes=owner.budget_bytes,
                                inputs_state="last_forward_call", mismatches=extra.get("mismatches"),
                                manifest_overrides={**owner.source_overrides(), "stage": "forward", "failed": "backward", "backward_dump": "..",
                                                    "grad_enabled": True})
                fw.rename(path / FORWARD_FOLDER)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return path


def watch_backward(owner: CapturingBackend, snap: GraphSnapshot | None) -> BackwardWatch:
    """The watch ``CapturingBackend`` enters around its backend call (inert without a snapshot)."""
    return BackwardWatch(owner, snap)


def _backward_snapshot(fw_snap: GraphSnapshot | None, gm: fx.GraphModule, keep_eager: bool) -> GraphSnapshot:
    seq = fw_snap.seq if fw_snap is not None else 0
    for node in gm.graph.nodes:  # AOT's graphs keep SymInts in "val"; the dump writer reads "example_value"
        if node.op == "placeholder" and "example_value" not in node.meta and isinstance(node.meta.get("val"), torch.SymInt):
            node.meta["example_value"] = node.meta["val"]
    bsnap = GraphSnapshot.take(seq, gm, keep_eager=keep_eager)
    bsnap.seq = f"{seq}-backward"  # type: ignore[assignment]  # the dump id: g3-backward-compile_error-<hash>
    if fw_snap is not None:  # the settings the backward was compiled under are the forward's
        bsnap.config, bsnap.origin, bsnap.ddp = fw_snap.config, fw_snap.origin, fw_snap.ddp
    bsnap.autocast = {}  # AOT's backward graph casts explicitly: it runs outside any autocast
    return bsnap


def _gradient_mismatches(bsnap: GraphSnapshot, before: list[Any], grads: Any, tol: Tolerance,
                         rng: dict[str, Any] | None = None) -> list[GradientMismatch]:
    """Gradients off eager's on the same saved tensors, from the same random state; differences
    that random ops or rounding explain are set aside (``capture.confirm``)."""
    after_compiled = rng_state() if rng is not None else None
    with torch.no_grad(), same_draws(rng):
        expected = bsnap.eager(*clone_values(before))
        draws = Draws(rng, after_compiled, rng_state() if rng is not None else None)
    exp = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    act = list(grads) if isinstance(grads, (list, tuple)) else [grads]
    names = _output_names(bsnap.eager)
    if len(exp) != len(act):
        return [GradientMismatch(0, "structure", detail=f"{len(exp)} gradients vs {len(act)}", name="")]
    bad = []
    for i, (e, a) in enumerate(zip(exp, act)):
        if e is None or a is None:
            continue
        m = compare_value(i, e, a, tol=tol)
        if m is not None:
            bad.append(GradientMismatch(**m.to_dict(), name=names[i] if i < len(names) else str(i)))
    return confirm(bsnap.eager, bad, exp, act, before, draws=draws, tol=tol, positional=True,
                   label=f"backward graph g{bsnap.seq}")


def _output_names(gm: fx.GraphModule) -> list[str]:
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out is None:
        return []
    values = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    return [v.name if isinstance(v, fx.Node) else repr(v) for v in values]


def _input_role(node: fx.Node, value: Any) -> str:
    if node.name.startswith("tangents"):
        return "tangent"
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return "symint"
    return "saved"


def _backward_args_in_flight() -> list[Any] | None:
    """The real arguments of the backward AOTAutograd is compiling for, from its frame.

    The lazy compile runs inside ``CompiledFunction._backward_impl(ctx, all_args)``: the
    saved tensors, symints and tangents are there, though the compiler only gets fakes.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_backward_impl":
            args = frame.f_locals.get("all_args")
            if isinstance(args, list):
                return list(args)
        frame = frame.f_back
    return None


def _function_reference(fn: Any) -> str | None:
    """``module:qualname`` of the user's bw_compiler under AOT's wrappers, when importable."""
    for _ in range(4):
        fn = getattr(fn, "compiler_fn", fn)
        if fn is None or not getattr(fn, "_is_wrapped_bw_compiler", False):
            break
        cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if callable(c.cell_contents)]
        fn = cells[0] if cells else None
    fn = getattr(fn, "compiler_fn", fn)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        return None
    return f"{module}:{qualname}"


def _install() -> None:
    """Route ``aot_module_simplified`` through ``_watched`` (a pass-through outside a capture)."""
    if _installed:
        return
    import torch._dynamo.backends.common as common  # torch._dynamo costs about 2 s: imported only when needed
    import torch._functorch.aot_autograd as aot  # aot_autograd brings torch._dynamo (about 2 s): imported only when needed

    original = aot.aot_module_simplified
    _installed["original"] = original

    @functools.wraps(original)
    def watched(mod: Any, args: Any, fw_compiler: Any, bw_compiler: Any = None, *rest: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
        stack = getattr(_current, "stack", None)
        try:
            if not stack or bw_compiler is None:
                return original(mod, args, fw_compiler, bw_compiler, *rest, **kwargs)
            bw = stack[-1].wrap_bw_compiler(bw_compiler)
            # A cached backward is never compiled again, so nothing could check it.
            cfg = torch._functorch.config
            no_cache = cfg.patch(enable_autograd_cache=False) if hasattr(cfg, "enable_autograd_cache") else contextlib.nullcontext()
            with no_cache:
                return original(mod, args, fw_compiler, bw, *rest, **kwargs)
        except BaseException as e:
            drop_own_frame(e)  # the user's traceback, as without graphdbg: aot_module_simplified's frame, not ours
            raise

    for module in (common, aot):
        if getattr(module, "aot_module_simplified", None) is original:
            module.aot_module_simplified = watched


__all__ = ["BackwardWatch", "GradientMismatch", "InputMismatch", "compare_mutations", "mutated_inputs",
           "mutation_mismatches", "watch_backward", "written_state", "attrs_before_call", "load_attrs"]
