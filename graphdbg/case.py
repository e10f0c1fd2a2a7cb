"""Case: a runnable graph with its inputs on one device, and the stand-ins it needed.

    >>> case = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d").case()
    >>> out = case.run_eager()
    >>> case.stand_ins        # what is not the captured value, and why
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import torch.fx as fx

from graphdbg.backends.compiler_config import replay_settings
from graphdbg.display import Displayed, run_quietly
from graphdbg.graph.allow_list import check_graph_module
from graphdbg.graph.snapshot import GraphSnapshot
from graphdbg.rebuild.inputs import StandIn
from graphdbg.rebuild.kernel_source import kernels_as_captured, kernels_ran, recorded_kernels
from graphdbg.store.manifest import GRAPH, MAX_GRAPH_BYTES, update_manifest
from graphdbg.store.safe_files import read_inside, write_file
from graphdbg.store.specs import SymSpec
from graphdbg.store.write import write_dump

if TYPE_CHECKING:
    from graphdbg.dump import Dump
    from graphdbg.outcome import Outcome
    from graphdbg.replay.options import ReplayOptions


@dataclass
class Case(Displayed):
    gm: fx.GraphModule
    inputs: list[Any]
    device: torch.device
    stand_ins: list[StandIn] = field(default_factory=list)
    dump: Dump | None = None
    modified: bool = False  # True once the graph or inputs differ from ``dump`` (a minified candidate)

    @property
    def placeholders(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def run(self, backend: str | Callable[..., Any] = "eager", passes: str | Sequence[Any] | None = None, *,
            isolate: bool | None = None, timeout: float | None = None, accuracy: bool | None = None,
            rtol: float | None = None, atol: float | None = None, direct: bool | None = None,
            pass_stage: str | None = None, backward: bool | None = None,
            options: ReplayOptions | None = None) -> Outcome:
        """Replay under ``backend`` after ``passes``; returns an Outcome (see ``run_case``).

        The keywords are fields of ``graphdbg.ReplayOptions``; given (not None), each wins over
        ``options``. ``isolate`` runs it in a child process (a segfault or hang becomes an
        outcome, ``timeout`` seconds); ``accuracy`` (default True) compares outputs with eager
        within ``rtol``/``atol`` (default by dtype); ``direct`` calls ``backend(gm, inputs)``
        instead of re-tracing with torch.compile; ``backward`` runs the backward too (training);
        by default, when the dump is the forward of a failure in the backward.
        """
        from graphdbg.replay.run import run_case  # upward, declared in ARCHITECTURE.md

        given = {"isolate": isolate, "timeout": timeout, "accuracy": accuracy, "rtol": rtol, "atol": atol,
                 "direct": direct, "pass_stage": pass_stage, "backward": backward}
        settings = {k: v for k, v in given.items() if v is not None}
        return run_quietly(lambda: run_case(self, backend, passes, options=options, **settings))

    def save(self, dump_dir: Path | str, *, kind: str | None = None) -> Path:
        """Write this case as a dump folder under ``dump_dir`` (``rank<R>/<id>/``); returns its path."""
        return save_case(self, dump_dir, kind=kind)

    def run_eager(self) -> Any:
        """Run the graph as it is, in eager mode, on the case's inputs."""
        check_graph_module(self.gm, self.inputs)
        with torch.no_grad():
            return self.gm(*self.inputs)


def save_case(case: Case, dump_dir: Path | str, *, kind: str | None = None) -> Path:
    """Write ``case`` as a dump folder under ``dump_dir`` (``rank<R>/<id>/``); returns its path."""
    loaded = case.dump.manifest_data if case.dump is not None else {}
    with kernels_as_captured(case.gm) as called:  # a Triton kernel's call as captured, and what the dump recorded of it
        snap = GraphSnapshot.take(0, case.gm, keep_eager=False)
    if "backward" in (loaded.get("stage"), loaded.get("failed")):  # a training failure's stage stays in its id, as captured
        snap.seq = "0-backward"  # type: ignore[assignment]  # g0-backward-compile_error-<hash>
    kernels = recorded_kernels(loaded, called)
    calls = {k["kernel"] for k in kernels_ran(case.gm, case.dump.manifest if case.dump is not None else None)}  # the custom ops it still calls, as the dump recorded them
    ops = [o for o in loaded.get("custom_ops") or [] if o.get("name") in calls]
    path = write_dump(
        Path(dump_dir), snap=snap, inputs=list(case.inputs), kind=kind or loaded.get("failure", {}).get("kind", "captured"),
        exc=None, backend=str(loaded.get("backend", "replay")), mode="replay", budget_bytes=1 << 62,
        inputs_state="replay", manifest_overrides={"grad_enabled": loaded.get("grad_enabled", False),
                                                   # training: a backward graph stays one (replay/training_replay.py)
                                                   **{k: loaded[k] for k in ("stage", "backward", "failed") if k in loaded},
                                                   **({"backend_source": loaded["backend_source"]} if "backend_source" in loaded else {}),
                                                   **({"triton_kernels": kernels} if kernels else {}),
                                                   **({"custom_ops": ops} if ops else {}),
                                                   "config": {**(loaded.get("config") or {}), "values": replay_settings(loaded)}},
    )
    _keep_symbolic_sizes(case, path)  # in every save: a minify candidate sent to its worker is traced dynamic too
    return path


def _keep_symbolic_sizes(case: Case, folder: Path) -> None:
    """A Case of a dynamic-shape graph (a dump's, a minify candidate), saved: the inputs whose capture
    had symbolic sizes (``candidates`` keeps them in ``graphdbg_symbolic_spec``) get those
    annotations back in ``graph.py`` and their descriptors (``Sym(s77)`` a symint, a tensor its
    ``symbolic_shape``), so the dump replays traced with the same dynamic dims."""

    placeholders = [n for n in case.gm.graph.nodes if n.op == "placeholder" and "graphdbg_symbolic_spec" in n.meta]
    symbolic = {n.name: n.meta["graphdbg_symbolic_spec"] for n in placeholders}
    if not symbolic:
        return
    def described_symbolic(manifest: dict[str, Any]) -> None:
        for d in manifest.get("inputs", []):
            spec = symbolic.get(d.get("node"))
            if isinstance(spec, SymSpec) and d.get("kind") == "int":
                d.update(kind="symint", expr=spec.expr, hint=d.pop("value"))
            elif spec is not None and d.get("kind") == "tensor":
                d["symbolic_shape"], d["symbolic_stride"] = list(spec.shape), (list(spec.stride) if spec.stride else None)

    lines = str(read_inside(folder, GRAPH, max_bytes=MAX_GRAPH_BYTES, text=True)).splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("def forward(self"):
            lines[i] = _annotated_signature(line, {str(n.target): n.meta["graphdbg_symbolic_spec"] for n in placeholders})
            break
    write_file(folder / GRAPH, "".join(lines), create_parent=False)
    update_manifest(folder, described_symbolic)


def _annotated_signature(line: str, specs: dict[str, Any]) -> str:
    """``def forward(self, s77, x: "f32[2, 24]..."):`` with the annotations of ``specs``."""
    head, _, rest = line.partition("def forward(")
    params, sep, tail = rest.rpartition("):")
    out = []
    for name, annotation in re.findall(r'(\w+)(\s*:\s*"[^"]*")?', params):
        out.append(f'{name}: "{specs[name].annotation()}"' if name in specs else name + annotation)
    return f"{head}def forward({', '.join(out)}{sep}{tail}"
