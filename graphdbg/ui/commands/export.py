"""``export-test``: a pytest regression test from a dump."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.ui.commands.common import (
    OpsOpt,
    PassesOpt,
    SelfCheckOpt,
    SwapOpt,
    TrustKernelsOpt,
    TrustOpt,
    WithinOpt,
    _bounds,
    _example,
    _load_with_progress,
    _must_exist,
    _progress,
    _self_checked,
    command,
    console,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command("export-test", epilog=_example("graphdbg export-test fixtures/block_runtime_error --trust-backend -o tests/test_block.py"))
def export_test(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The test file to write, e.g. tests/test_gelu_lowering.py.")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Backend under test (default: the dump's own).")] = None,
    passes: PassesOpt = None,
    trust_backend: TrustOpt = False,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite an existing test file and its data folder.")] = False,
    swap: SwapOpt = None,
    within: WithinOpt = None,
    ops: OpsOpt = None,
    trust_kernels: TrustKernelsOpt = False,
    self_check: SelfCheckOpt = True,
) -> None:
    """Write a pytest regression test from a dump, with its data next to it; it fails while the bug is there.

    With --swap OP=REFERENCE: a test that the graph with OP agrees with the graph with REFERENCE
    (within the --within bounds, which the test records)."""
    _must_exist(dump)
    bounds = _bounds(within, swap)
    from graphdbg.minify import export_test as run

    data = out.with_name(out.stem + "_data")
    there = [p for p in (out, data) if p.exists()]
    if there and not force:
        raise GraphdbgError(f"{there[0]} exists; pass --force to overwrite it")
    d = _load_with_progress(dump, "export-test")
    if swap:
        _export_swap_test(d, out, swap, ops, trust_kernels, bounds)
        return
    with _progress(f"export-test: writing {out}"):
        path = run(d, out, backend=backend, passes=passes, trust=trust_backend)  # code the dump names: only with --trust-backend
    if self_check and d.failure_kind in ("compile_error", "runtime_error", "crash", "accuracy"):  # run once on its own: exit 4 if it fails otherwise
        device = "cpu" if d.cpu_replay(None) else d.captured_device_name
        _self_checked(lambda c: c.check_exported_test(path, kind=d.failure_kind, captured=d.signature, device=device), path,
                      d.signature)
    console.print(f"wrote {path}")


def _export_swap_test(d: object, out: Path, swap: list[str], ops: str | None, trust_kernels: bool,
                      bounds: list | None = None) -> None:
    from graphdbg.minify.export_test import export_swap_test
    from graphdbg.replay.compare_swap import swap_dump

    modules = [m.strip() for m in (ops or "").split(",") if m.strip()]
    swap_dump(d, swap, ops=modules, trust_kernels=trust_kernels, within=bounds)  # a bad --swap is an error now, not in the test
    path = export_swap_test(d, out, swap, ops=modules, trust_kernels=trust_kernels, within=[str(b) for b in bounds or []])
    console.print(f"wrote {path}")
