"""Nested capture: the compiles a captured backend starts itself, dumped as pieces of its graph.

ThunderFX, vLLM and SGLang split the graph Dynamo gives them and hand pieces to Inductor
(``torch._inductor.compile``, ``compile_fx``, ``standalone_compile``) or to an
``aot_autograd`` backend. When a piece fails, the piece is what to replay, not the whole graph.

    >>> with outer_frame(owner, snap, gm):      # set by CapturingBackend while its backend runs
    ...     backend(gm, inputs)                  # torch._inductor.compile(piece, ...) raises
    # -> dumps/rank0/g0.1-compile_error-<hash>/  (manifest "parent": outer seq, piece, position)

While an outer backend compiles, or its compiled code runs (Thunder compiles its Inductor
pieces lazily, on their first call), a thread-local frame says so. The inner entry points are
patched once per process; outside a frame they call straight through. A call whose graph is
the outer graph itself (``capture("inductor")`` reaching ``compile_fx``) is not a piece, and
neither is a compile started inside another piece's compile (``torch._inductor.compile``
calls ``compile_fx``): one failure, one dump. The piece's snapshot is taken before the inner
compiler runs, because Inductor changes the graph it is given.

The outer dump's id is decided only when it is written (its failure kind and a free folder
name are part of it), so children are written first with the outer's sequence number, and
linked both ways once the outer dump exists (``write.link_children``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch.fx as fx

from graphdbg.backends.calls import call_inputs, drop_own_frame
from graphdbg.backends.compiler_config import config_diff
from graphdbg.capture.dynamo_exceptions import is_control_flow
from graphdbg.capture.on_import import watch
from graphdbg.capture.stderr import say
from graphdbg.graph.snapshot import GraphSnapshot
from graphdbg.store.write import write_dump

if TYPE_CHECKING:
    from graphdbg.capture.hook import CapturingBackend
    from graphdbg.graph.snapshot import GraphSnapshot

_local = threading.local()


@dataclass(slots=True)  # made on every compiled call: half the cost of a plain dataclass's
class Frame:
    """One outer backend call in progress (compiling, or running what it compiled)."""

    owner: CapturingBackend
    snap: GraphSnapshot
    gm: fx.GraphModule
    phase: str  # "compile" | "run"
    busy: bool = False  # a piece is compiling: entry points it reaches are part of it

    @property
    def children(self) -> list[dict[str, Any]]:
        return self.snap.children

    def next_call(self) -> int:
        with _counter_lock:
            self.snap.pieces += 1
            return self.snap.pieces


_counter_lock = threading.Lock()


def _stack() -> list[Frame]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current() -> Frame | None:
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def outer_frame(owner: CapturingBackend, snap: GraphSnapshot, gm: fx.GraphModule, phase: str) -> Iterator[Frame]:
    frame = enter_frame(owner, snap, gm, phase)
    try:
        yield frame
    finally:
        leave_frame()


def enter_frame(owner: CapturingBackend, snap: GraphSnapshot, gm: fx.GraphModule, phase: str) -> Frame:
    """Push a frame; ``leave_frame()`` pops it. ``outer_frame`` as two calls, for the call path
    of compiled code, where a generator-based context manager costs microseconds per call."""
    if _look_again:
        install()  # an entry point's module may have finished importing since the last look
    frame = Frame(owner, snap, gm, phase)
    _stack().append(frame)
    return frame


def leave_frame() -> None:
    _local.stack.pop()


@contextlib.contextmanager
def piece_compile(frame: Frame) -> Iterator[None]:
    frame.busy = True
    try:
        yield
    finally:
        frame.busy = False


def parent_of(gm: Any) -> Frame | None:
    """The frame a compile of ``gm`` is a piece of, or None (no frame, the outer graph itself,
    or inside another piece's compile)."""
    frame = current()
    if frame is None or frame.busy or not isinstance(gm, fx.GraphModule) or gm is frame.gm:
        return None
    return frame


def piece_place(gm: fx.GraphModule, max_frames: int = 40) -> tuple[str | None, int | None]:
    """(name, position) of ``gm`` in the split module that holds it, found among the callers'
    local variables: ``submod_2`` from ``split_module``, ``inductor_3`` once Thunder renamed it
    (its lazily compiled wrapper keeps the piece as an attribute)."""
    f = sys._getframe(1)
    seen: set[int] = set()
    for _ in range(max_frames):
        if f is None:
            break
        for value in list(f.f_locals.values()):
            # Only a GraphModule splits a graph; a lazy wrapper holding the piece is not its parent.
            if not isinstance(value, fx.GraphModule) or id(value) in seen or value is gm:
                continue
            seen.add(id(value))
            for position, (name, child) in enumerate(value.named_children()):
                if child is gm or any(c is gm for c in child.children()) or any(v is gm for v in vars(child).values()):
                    return name, position
        f = f.f_back
    return None, None


def dump_piece(frame: Frame, snap: GraphSnapshot, inputs: list[Any], exc: BaseException | None, *, backend: str,
               call: int, name: str | None, position: int | None, config: dict[str, Any] | None,
               kind: str = "compile_error", inputs_state: str = "at_compile") -> Path | None:
    """Write the failed piece as its own dump, a child of ``frame``'s graph; never raises."""
    owner = frame.owner
    parent = {
        "seq": frame.snap.seq,
        "graph_hash": frame.snap.graph_hash,
        "backend": owner.backend_ref,
        "phase": frame.phase,
        "piece": name or f"piece_{call}",
        "position": position,
        "call": call,
        "id": None,  # set once the outer dump is written
    }
    snap.seq = f"{frame.snap.seq}.{call}"

    def write() -> Path:
        return write_dump(owner.dump_dir, snap=snap, inputs=inputs, kind=kind, exc=exc, backend=backend,
                          mode=owner.mode, budget_bytes=owner.budget_bytes, inputs_state=inputs_state,
                          manifest_overrides={"parent": parent, "config": config or snap.config})

    path = owner._guarded(write, "write a piece dump")
    if path is not None:
        frame.children.append({"path": path, "piece": parent["piece"], "position": position, "call": call,
                               "kind": kind, "backend": backend})
        say(f"graphdbg: {kind} in {backend!r} on piece {parent['piece']} of a graph compiled by "
             f"{owner.backend_ref!r} ({type(exc).__name__ if exc is not None else 'as compiled'}); dump written to {path}")
    return path


def _entry(fn: Callable[..., Any], backend: Callable[[tuple, dict], str], graph_and_inputs: Callable[[tuple, dict], tuple],
           config_of: Callable[[tuple, dict], dict[str, Any] | None]) -> Callable[..., Any]:
    """``fn`` that, inside a frame, dumps the piece it is given when it raises."""
    if getattr(fn, "_graphdbg_piece_entry", False):
        return fn

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
        try:
            gm, inputs = graph_and_inputs(args, kwargs)
            frame = parent_of(gm)
        except Exception:
            frame = None
        if frame is None:
            try:
                return fn(*args, **kwargs)
            except BaseException as e:
                drop_own_frame(e)  # the user's traceback, as without graphdbg (backends/calls.py)
                raise

        call = frame.next_call()
        snap = frame.owner._guarded(lambda: GraphSnapshot.take(0, gm, keep_eager=False), "snapshot a piece")
        if snap is not None:
            snap.config = frame.owner._guarded(lambda: config_diff(config_of(args, kwargs)), "record the compiler settings")
        inputs = list(inputs) if inputs is not None else []
        if snap is not None and frame.owner.mode == "always":
            name, position = frame.owner._guarded(lambda: piece_place(gm), "name the piece") or (None, None)
            dump_piece(frame, snap, inputs, None, backend=backend(args, kwargs), call=call, name=name,
                       position=position, config=snap.config, kind="captured")
        with piece_compile(frame):
            try:
                compiled = fn(*args, **kwargs)
                if snap is None or not callable(compiled):
                    return compiled
                return PieceRuns(compiled, frame, snap, backend(args, kwargs), call, gm)
            except Exception as e:
                if snap is not None:
                    name, position = frame.owner._guarded(lambda: piece_place(gm), "name the piece") or (None, None)
                    dump_piece(frame, snap, inputs, e, backend=backend(args, kwargs), call=call, name=name,
                               position=position, config=snap.config)
                drop_own_frame(e)
                raise
            except BaseException as e:
                drop_own_frame(e)
                raise

    entry._graphdbg_piece_entry = True  # type: ignore[attr-defined]
    return entry


class PieceRuns:
    """A piece's compiled code that, when a call of it raises, dumps the piece with that call's
    inputs (kind ``runtime_error``, once per piece) and re-raises. vLLM and SGLang compile their
    pieces up front and run them later: a kernel that fails when it runs is found here, not
    only as the outer graph's failure. Everything else (``_boxed_call``, a standalone
    artifact's ``save``) is the compiled object's own."""

    def __init__(self, compiled: Any, frame: Frame, snap: GraphSnapshot, backend: str, call: int, gm: fx.GraphModule):
        self.__dict__.update(_compiled=compiled, _frame=frame, _snap=snap, _backend=backend, _call=call, _gm=gm,
                             _dumped=False, _boxed=bool(getattr(compiled, "_boxed_call", False)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame where Python keeps it (3.10)
        held = None if self._dumped else call_inputs(args, self._boxed)  # for the dump; a boxed callee may empty its list
        try:
            return self._compiled(*args, **kwargs)
        except Exception as e:
            if held is not None:
                self._dump(held, e)
            drop_own_frame(e)
            raise

    def _dump(self, inputs: list[Any], exc: BaseException) -> None:
        if is_control_flow(exc):
            return
        self.__dict__["_dumped"] = True
        running = current()  # the outer graph's run in progress, whose dump will list this piece
        frame = running if running is not None and running.snap is self._frame.snap else self._frame
        owner = frame.owner
        name, position = owner._guarded(lambda: piece_place(self._gm), "name the piece") or (None, None)
        dump_piece(frame, self._snap, inputs, exc, backend=self._backend, call=self._call, name=name, position=position,
                   config=self._snap.config, kind="runtime_error", inputs_state="after_failed_call")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_compiled"], name)


def _gm_inputs(args: tuple, kwargs: dict, gm_key: str = "gm", inputs_key: str = "example_inputs") -> tuple:
    gm = args[0] if args else kwargs.get(gm_key)
    inputs = args[1] if len(args) > 1 else kwargs.get(inputs_key)
    return gm, inputs


def _aot_backend_name(self: Any) -> str:
    """The registered name of an aot_autograd backend (``aot_eager``), else its forward compiler."""
    try:
        from torch._dynamo.backends.registry import _COMPILER_FNS  # torch._dynamo costs about 2 s: imported only when needed

        for name, fn in _COMPILER_FNS.items():
            if fn is self:
                return name
    except Exception:
        pass
    fw = getattr(self, "kwargs", {}).get("fw_compiler")
    target = fw if hasattr(fw, "__qualname__") else type(fw)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"


def _patch_inductor_package(mod: Any) -> None:
    if callable(getattr(mod, "compile", None)):
        mod.compile = _entry(mod.compile, lambda a, k: "inductor", _gm_inputs,
                             lambda a, k: (a[2] if len(a) > 2 else k.get("options")))
    standalone = getattr(mod, "standalone_compile", None)
    if callable(standalone) and not isinstance(standalone, type(sys)):
        mod.standalone_compile = _entry(standalone, lambda a, k: "inductor", _gm_inputs,
                                        lambda a, k: k.get("options"))


def _patch_compile_fx(mod: Any) -> None:
    mod.compile_fx = _entry(mod.compile_fx, lambda a, k: "inductor",
                            lambda a, k: _gm_inputs(a, k, "model_", "example_inputs_"),
                            lambda a, k: (a[3] if len(a) > 3 else k.get("config_patches")))


def _patch_aot_common(mod: Any) -> None:
    cls = mod.AotAutograd
    cls.__call__ = _entry(cls.__call__, lambda a, k: _aot_backend_name(a[0]), lambda a, k: _gm_inputs(a[1:], k),
                          lambda a, k: None)


_PATCHES: dict[str, Callable[[Any], None]] = {
    "torch._inductor": _patch_inductor_package,
    "torch._inductor.compile_fx": _patch_compile_fx,
    "torch._dynamo.backends.common": _patch_aot_common,
}
_installed: set[str] = set()
_install_lock = threading.Lock()
# install() must look again: it has not run yet, or found a module half imported (the import
# watcher never sees a module that is already in sys.modules). Else the watcher does the rest.
_look_again = True


def _apply(name: str, module: Any) -> None:
    with _install_lock:
        if name in _installed:
            return
        _installed.add(name)
    try:
        _PATCHES[name](module)
    except Exception as e:
        say(f"graphdbg: could not watch {name} for nested compiles ({type(e).__name__}: {e})")


def install() -> None:
    """Watch the nested-compile entry points in this process (idempotent, cheap)."""
    global _look_again
    half_imported = False
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None and name not in _installed:
            if name == "torch._inductor" and not hasattr(module, "standalone_compile"):
                half_imported = True  # still being imported: look again on the next frame
                continue
            _apply(name, module)
    _look_again = half_imported
    if len(_installed) < len(_PATCHES):
        # the rest are patched right after they are imported: watching never imports Inductor
        watch("nested", lambda name: name in _PATCHES and name not in _installed, _apply)
