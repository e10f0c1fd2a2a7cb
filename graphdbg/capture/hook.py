"""Wrap a torch.compile backend so that its failures leave a dump behind.

    >>> compiled = torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps"))
    >>> compiled(x)   # if Inductor fails, dumps/rank0/<id>/ holds the graph and its inputs

The wrapper is transparent: the backend sees the same graph and inputs, the user sees the
same result or the same exception (type, message and traceback: the wrapper's frames are
taken out of it, see ``backends/calls.py``). Everything graphdbg does
on top is guarded, so a failure to dump costs one line on stderr and nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import torch
import torch.fx as fx

from graphdbg.backends.calls import as_dynamo_calls_it, call_inputs, drop_own_frame
from graphdbg.backends.compiler_config import config_diff
from graphdbg.backends.generated_code import watch_generated_code
from graphdbg.backends.recipe import backend_recipe, describe_recipe
from graphdbg.capture import ddp, nested
from graphdbg.capture.accuracy_checks import AccuracyChecks, CheckCounter
from graphdbg.capture.armed import ArmedCalls
from graphdbg.capture.confirm import Draws, confirm
from graphdbg.capture.dynamo_exceptions import is_control_flow
from graphdbg.capture.origin import compile_origin
from graphdbg.capture.rng import rng_state, same_draws
from graphdbg.capture.seen import CallCounts, seen_before
from graphdbg.capture.settings import DEFAULT_BUDGET, ENV_DUMP_DIR, ENV_REDACT, MODES
from graphdbg.capture.stderr import say
from graphdbg.capture.training import BackwardWatch, watch_backward
from graphdbg.graph.snapshot import GraphSnapshot, name_every_dtype
from graphdbg.judge.accuracy import BY_DTYPE, OutputMismatch, Tolerance, compare_outputs
from graphdbg.judge.failing_node import failing_node
from graphdbg.judge.mutations import attrs_before_call, load_attrs, mutation_mismatches
from graphdbg.judge.signature import exception_text
from graphdbg.rebuild.inputs import clone_values
from graphdbg.store.capture_environment import environment, observing_env
from graphdbg.store.manifest import update_manifest
from graphdbg.store.write import failure_record, link_children, write_dump


def capture(
    backend: str | Callable[..., Any] = "inductor",
    dump_dir: str | os.PathLike | None = None,
    *,
    mode: str = "error",
    budget_bytes: int = DEFAULT_BUDGET,
    tol: Tolerance = BY_DTYPE,
    redact: bool | None = None,
    checks: AccuracyChecks | None = None,
) -> CapturingBackend:
    """A backend for ``torch.compile`` that runs ``backend`` and dumps the graphs it fails on.

    ``mode``: ``"error"`` dumps on a compile error or a run-time error of the compiled code;
    ``"accuracy"`` also runs each graph eagerly on copies of the inputs and dumps when the
    outputs disagree, on the calls ``checks`` names (default ``AccuracyChecks.from_env()``: the
    first 4 of each graph, then 1 in 16 at random; ``capture/accuracy_checks.py``);
    ``"always"`` also dumps every graph when it is compiled.
    ``dump_dir`` defaults to ``$GRAPHDBG_DUMP_DIR``, else ``./graphdbg_dumps``. ``redact``
    (default ``$GRAPHDBG_REDACT``) writes dumps safe to share (see ``graphdbg.store.redact``).
    """
    if isinstance(backend, CapturingBackend):
        return backend
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if redact is None:
        redact = os.environ.get(ENV_REDACT, "") not in ("", "0")
    return CapturingBackend(backend, dump_dir, mode=mode, budget_bytes=budget_bytes, tol=tol, redact=redact,
                            checks=checks if checks is not None else AccuracyChecks.from_env())


def user_backend(backend: Any) -> Any:
    """The user's own backend behind torch.compile's wrappers: ``torch.compile(backend=fn)``
    hands Dynamo a ``_TorchCompileWrapper`` holding ``fn``, and ``backend="inductor"`` an
    ``_TorchCompileInductorWrapper`` (whose mode and options are Inductor settings)."""
    kind = type(backend).__name__
    if kind == "_TorchCompileInductorWrapper":
        return "inductor"
    if kind == "_TorchCompileWrapper":
        fn = getattr(backend, "compiler_fn", None)
        name = getattr(backend, "compiler_name", None)
        # a registered name stays a name; a callable is recorded as itself
        if isinstance(name, str) and fn is not None and _registered(name, fn):
            return name
        return fn if fn is not None else backend
    return backend


def _registered(name: str, fn: Any) -> bool:
    try:
        from torch._dynamo.backends.registry import _COMPILER_FNS  # torch._dynamo costs about 2 s: imported only when needed

        return _COMPILER_FNS.get(name) is fn
    except Exception:
        return False


def backend_reference(backend: Any) -> str:
    """How a backend is named in a manifest: a registered name as given (``"inductor"``), else
    ``module:qualname`` of the user's callable, so that ``replay`` can import it again. A
    ``compiler_name`` attribute is only a label (Dynamo prints it); it names nothing to load.
    Thunder's ``ThunderCompiler`` is ``"thunder"``, which replay knows."""
    backend = user_backend(backend)
    if isinstance(backend, str):
        return backend
    target = backend if hasattr(backend, "__qualname__") else type(backend)
    module, qualname = getattr(target, "__module__", None) or "?", getattr(target, "__qualname__", None) or repr(target)
    if module.startswith("thunder.dynamo") and qualname == "ThunderCompiler":
        return "thunder"
    return f"{module}:{qualname}"


def backend_source(backend: Any) -> dict[str, Any]:
    """Where the backend came from, for the manifest: module, qualname, its ``compiler_name``
    label, and for a backend defined in the script itself (``__main__``) the script's path,
    from which ``replay --trust-backend`` loads it again."""
    label = getattr(backend, "compiler_name", None)  # what Dynamo prints: torch.compile's wrapper has it
    backend = user_backend(backend)
    if isinstance(backend, str):
        return {"name": backend}
    target = backend if hasattr(backend, "__qualname__") else type(backend)
    out: dict[str, Any] = {"module": getattr(target, "__module__", None), "qualname": getattr(target, "__qualname__", None),
                           "instance": not hasattr(backend, "__qualname__")}
    name = getattr(backend, "compiler_name", None) or label or getattr(backend, "__name__", None)
    if isinstance(name, str):
        out["name"] = name
    if out["module"] == "__main__":
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None)
        if script:
            out["script"] = str(Path(script).resolve())
    elif isinstance(out["module"], str):  # the sys.path folder it was imported from: a repro puts it back on sys.path
        top = sys.modules.get(out["module"].split(".")[0])
        file = getattr(top, "__file__", None)
        if file and not out["module"].startswith(("torch.", "torch")):
            here = Path(file).resolve().parent
            out["path"] = str(here.parent if Path(file).name == "__init__.py" else here)
    return out


_FORWARDED = ("compiler_name", "get_compiler_config", "reset", "backend_ctx_ctor", "dynamic", "kwargs", "_export")


class CapturingBackend:
    """The callable ``capture`` returns, carrying the wrapped backend's Dynamo-visible attributes.

    No ``__getattr__`` forwarding: Dynamo reads backend attributes from inside its frame
    callback, where running Python code for a missing attribute crashes the interpreter.
    """

    def __init__(self, backend, dump_dir, *, mode, budget_bytes, tol, redact=False, checks=AccuracyChecks()):
        self.backend_ref = backend_reference(backend)
        self.backend_source = backend_source(backend)
        # torch.compile(mode=..., options=...) are Inductor settings the dump must carry too
        options = getattr(backend, "config", None) if type(backend).__name__ == "_TorchCompileInductorWrapper" else None
        self.config_extra = dict(options) if isinstance(options, dict) else None
        nested.install()
        ddp.install()
        name_every_dtype()  # Dynamo prints the graph it hands us (its structured log): no dtype may lack a name
        self.backend_recipe = backend_recipe(user_backend(backend))  # aot_autograd(...) / partial: its parts (backends/recipe.py)
        self._user_object = None if isinstance(backend, str) else backend
        if isinstance(backend, str):
            from torch._dynamo import lookup_backend  # torch._dynamo costs about 2 s: imported only when needed

            resolved = lookup_backend(backend)
            self.compiler_name = backend
        else:
            resolved = backend
        self.backend = resolved
        for name in _FORWARDED:
            if name not in self.__dict__ and hasattr(resolved, name):
                setattr(self, name, getattr(resolved, name))
        # Dynamo names the backend in BackendCompilerFailed by __name__; keep the user's name
        # there, and none where the backend has none (a ThunderCompiler() instance), as Dynamo would.
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", None)
        if name is not None:
            self.__name__ = name
        self.dump_dir = Path(dump_dir or os.environ.get(ENV_DUMP_DIR) or "graphdbg_dumps")
        self.mode = mode
        self.budget_bytes = budget_bytes
        self.tol = tol
        self.redact = redact
        self.checks: AccuracyChecks = checks
        self.dumps: list[Path] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        # Dynamo prints a backend without __name__ by its repr; the user should see theirs.
        # A name the user gave ("inductor") prints as itself; an object (a ThunderCompiler()) as that
        # object, even where the manifest records it by a registered name ("thunder").
        return self.backend_ref if self._user_object is None else repr(self._user_object)

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
        with self._lock:
            seq = next(self._seq)
        # this capture runs inside another captured backend, or on a piece of DDP's bucket split
        parent = nested.parent_of(gm) or ddp.piece_frame(self, gm, seq)
        snap = self._guarded(lambda: GraphSnapshot.take(seq, gm, keep_eager=self.mode == "accuracy"), "snapshot the graph")
        if snap is not None:
            snap.config = self._guarded(lambda: config_diff(self.config_extra), "record the compiler settings")
            snap.origin = compile_origin(gm)
            if parent is not None:
                call = parent.next_call()
                name, position = self._guarded(lambda: nested.piece_place(gm), "name the piece") or (None, None)
                snap.ddp = ddp.piece_record(parent, name)
                if snap.ddp is not None:  # split_module's children move as they compile: the bucket is the place
                    position = snap.ddp["bucket"]
                snap.parent = {"frame": parent, "call": call, "piece": name or f"piece_{call}", "position": position}
                snap.seq = f"{parent.snap.seq}.{call}"
        always = None
        if snap is not None and self.mode == "always":  # written before the compile: a compile that kills the process leaves it
            always = self._dump(snap, list(example_inputs), "captured", None, inputs_state="at_compile")
        if snap is None:
            try:
                return self.backend(gm, example_inputs, **kwargs)
            except BaseException as e:
                drop_own_frame(e)
                raise
        watch = watch_backward(self, snap)  # training: the lazily compiled backward (capture/training.py)
        names = frozenset(n.name for n in gm.graph.nodes)  # the dump's nodes: a backend may add its own to gm
        snap.env_read = {}  # the variables the backend reads while it compiles and first runs (store.environment)
        with nested.outer_frame(self, snap, gm, "compile"):
            try:
                with watch, watch_generated_code(self.backend_ref == "inductor" or None) as code, observing_env(snap.env_read):
                    compiled = self.backend(gm, example_inputs, **kwargs)
            except Exception as e:
                snap.generated_code = code.to_dict()  # the compile may have generated code before it failed
                # a restart or graph break is Dynamo's control flow, not a failure (capture/dynamo_exceptions.py)
                written = None if is_control_flow(e) else self._dump(snap, list(example_inputs), "compile_error", e,
                                                                       inputs_state="at_compile", node=self._node(e, gm, names))
                self._link_pieces(snap, written, list(example_inputs), "at_compile")
                drop_own_frame(e)  # the user's traceback, as without graphdbg (backends/calls.py)
                raise
            except BaseException as e:
                drop_own_frame(e)
                raise
        snap.generated_code = code.to_dict()
        if always is not None and snap.generated_code is not None:
            self._guarded(lambda: update_manifest(always, lambda m: m.update(generated_code=snap.generated_code)),
                          "record the generated code")
        self._link_pieces(snap, None, list(example_inputs), "at_compile")
        return self._wrap(as_dynamo_calls_it(compiled), snap, gm, watch, names)

    def _node(self, e: BaseException, gm: fx.GraphModule, names: frozenset[str]) -> str | None:
        """The dump's node ``e`` was raised in, when its frames or notes say (``judge.failing_node``)."""
        node = self._guarded(lambda: failing_node(e, gm), "find the failing node")
        return node.name if node is not None and node.name in names else None

    def _wrap(self, compiled: Callable[..., Any], snap: GraphSnapshot, gm: fx.GraphModule, watch: BackwardWatch,
              names: frozenset[str]) -> Callable[..., Any]:
        boxed = bool(getattr(compiled, "_boxed_call", False))
        accuracy = self.mode == "accuracy" and snap.eager is not None
        arming = ArmedCalls(self, snap)  # the first calls leave a crash dump if a signal kills them
        counts = CallCounts()  # a failure seen on some calls only: how many failed and how many did not
        checker = self.checks.counter(f"g{snap.seq}")  # the calls compared with eager (capture/accuracy_checks.py)
        unobserved = [True]  # the first call's reads of os.environ are the backend's too (a lazy compile)

        def run(*args: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
            inputs = call_inputs(args, boxed)  # our own references: a boxed callee may empty its list
            if watch.bw_count:  # training: a backward may follow, whose dump writes this forward too
                watch.remember(inputs)
            checking = accuracy and "accuracy" not in snap.dumped and checker.due()
            before = self._guarded(lambda: clone_values(inputs), "copy inputs") if checking else None
            # training: attributes the graph writes (an optimizer's parameters and states)
            attrs = self._guarded(lambda: attrs_before_call(snap.eager, snap.attrs), "copy attributes") if before is not None else None
            rng = rng_state() if before is not None else None  # eager's reference replays the same draws
            # Backends that compile their pieces on first call (Thunder's Inductor pieces) do it here.
            # The frame is pushed and popped by hand: this is every call's path (a few us matter).
            nested.enter_frame(self, snap, gm, "run")
            window: Any = contextlib.nullcontext()
            if unobserved:
                unobserved.clear()
                window = observing_env(getattr(snap, "env_read", None))
            try:
                with window:
                    if arming.left > 0:
                        with arming.call(inputs):
                            out = compiled(*args)
                    else:
                        out = compiled(*args)
            except Exception as e:
                written = None
                counts.call(inputs, True)
                if "runtime_error" not in snap.dumped:
                    snap.dumped.add("runtime_error")
                    written = self._dump(snap, inputs, "runtime_error", e, inputs_state="after_failed_call",
                                         node=self._node(e, gm, names))
                    if written is not None:
                        self._guarded(lambda: counts.attach(written), "count the graph's calls")
                self._link_pieces(snap, written, inputs, "after_failed_call")
                drop_own_frame(e)  # the user's traceback, as without graphdbg (backends/calls.py)
                raise
            except BaseException as e:
                drop_own_frame(e)
                raise
            finally:
                nested.leave_frame()
            counts.call(inputs, False)
            if snap.children:
                self._link_pieces(snap, None, inputs, "at_call")
            if before is not None:
                self._check_accuracy(snap, before, out, inputs, attrs or {}, rng, checker)
            return out

        if boxed:
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def _link_pieces(self, snap: GraphSnapshot, written: Path | None, inputs: list[Any], inputs_state: str) -> None:
        """Link the piece dumps of this call to the outer dump: the one just written, else the
        graph's "always" dump, else a new "captured" dump (the backend survived its piece's
        failure, by a fallback of its own, but the piece is still a bug worth its parent)."""
        unlinked = [c for c in snap.children if not c.get("linked")]
        if not unlinked:
            return
        target = written or getattr(snap, "captured_path", None)
        if target is None:
            target = self._dump(snap, inputs, "captured", None, inputs_state=inputs_state)
        if target is not None:
            self._guarded(lambda: link_children(target, unlinked), "link the piece dumps to their graph's dump")

    def _check_accuracy(self, snap: GraphSnapshot, before: list[Any], out: Any, inputs: list[Any],
                        attrs: dict[str, torch.Tensor], rng: dict[str, Any] | None, checker: CheckCounter) -> None:
        def check() -> list[OutputMismatch]:
            after_compiled = rng_state() if rng is not None else None
            with torch.no_grad(), same_draws(rng):
                eager_attrs = load_attrs(snap.eager, attrs)
                eager_inputs = clone_values(before)
                expected = snap.eager(*eager_inputs)
                draws = Draws(rng, after_compiled, rng_state() if rng is not None else None)
            bad = compare_outputs(expected, out, tol=self.tol)
            # training: in-place writes (an optimizer step) against eager's copies
            bad += mutation_mismatches(snap.eager, eager_inputs, inputs, tol=self.tol,
                                       expected_attrs=eager_attrs, actual_attrs=snap.attrs)
            if bad:  # random outputs the backend drew otherwise, and rounding that float64 forgives, are no mismatch
                load_attrs(snap.eager, attrs)
                bad = confirm(snap.eager, bad, expected, out, before, draws=draws, tol=self.tol,
                              label=f"graph g{snap.seq}")
            return bad

        bad = self._guarded(check, "run the eager reference")
        if bad:
            snap.dumped.add("accuracy")
            dumped = dataclasses.replace(snap, attrs={**snap.attrs, **attrs}) if attrs else snap  # values before the call
            self._dump(dumped, before, "accuracy", None, inputs_state="before_call", mismatches=bad,
                       overrides={"accuracy_checks": checker.record()})

    def source_overrides(self) -> dict[str, Any]:
        """Where the backend came from (the script's path for one defined in ``__main__``), for
        every dump this capture writes: armed crash dumps and backward dumps too."""
        return {"backend_source": self.backend_source, **({"backend_recipe": self.backend_recipe} if self.backend_recipe else {})}

    def _dump(self, snap: GraphSnapshot, inputs: list[Any], kind: str, exc: BaseException | None, *,
              node: str | None = None, overrides: dict[str, Any] | None = None, **extra: Any) -> Path | None:
        overrides = {"backend_source": self.backend_source, **(overrides or {})}
        if getattr(snap, "env_read", None):  # with the variables the backend read so far
            overrides.setdefault("env", self._guarded(lambda: environment(self.backend_ref, snap.env_read),
                                                      "record the variables the backend read"))
            if overrides["env"] is None:
                del overrides["env"]
        parent_frame = snap.parent["frame"] if snap.parent is not None else None
        what = f"{type(exc).__name__}" if exc is not None else kind
        shown = describe_recipe(self.backend_recipe) if self.backend_recipe else self.backend_ref
        if kind != "captured" and parent_frame is None and not snap.children:  # a piece's dump is linked to its graph's
            again = self._guarded(lambda: seen_before(self.dump_dir, snap.graph_hash,
                                                      failure_record(kind, exc, extra.get("mismatches"))), "look for the same failure")
            if again is not None:
                self.dumps.append(again[0])
                say(f"graphdbg: {kind} in backend {shown!r} ({what}); the same failure as {again[0]}, "
                    f"captured {again[1]} times (no new dump)")
                return again[0]
        if parent_frame is not None:
            overrides["parent"] = {"seq": parent_frame.snap.seq, "graph_hash": parent_frame.snap.graph_hash,
                                   "backend": parent_frame.owner.backend_ref, "phase": parent_frame.phase,
                                   "piece": snap.parent["piece"], "position": snap.parent["position"],
                                   "call": snap.parent["call"], "id": None}

        def write() -> Path:
            return write_dump(
                self.dump_dir, snap=snap, inputs=inputs, kind=kind, exc=exc,
                backend=self.backend_ref, mode=self.mode, budget_bytes=self.budget_bytes, redact=self.redact,
                manifest_overrides={**overrides, **({"backend_recipe": self.backend_recipe} if self.backend_recipe else {})},
                failure_node=node, **extra,
            )

        path = self._guarded(write, "write a dump")
        if path is not None:
            self.dumps.append(path)
            if kind == "captured":
                snap.captured_path = path
            if parent_frame is not None and kind != "captured":
                parent_frame.children.append({"path": path, "piece": overrides["parent"]["piece"], "position": overrides["parent"]["position"],
                                              "call": snap.parent["call"], "kind": kind, "backend": self.backend_ref})
            say(f"graphdbg: {kind} in backend {shown!r} ({what}); dump written to {path}")
        return path

    def _guarded(self, fn: Callable[[], Any], what: str) -> Any:
        try:
            return fn()
        except Exception as e:
            first = (exception_text(e).strip().splitlines() or [""])[0]
            say(f"graphdbg: could not {what} ({type(e).__name__}: {first}); the original behaviour is unchanged")
            return None


__all__ = ["capture", "CapturingBackend", "GraphSnapshot", "DEFAULT_BUDGET"]
