"""``redact`` and ``share``: a dump made safe to share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from graphdbg.errors import GraphdbgError
from graphdbg.replay.options import DEFAULT_TIMEOUT, ReplayOptions
from graphdbg.ui.commands.common import (
    IsolateOpt,
    JsonFlag,
    TimeoutOpt,
    TrustOpt,
    _example,
    _note,
    _print_json,
    command,
    console,
)

# Each command imports the layers it uses inside its function: the CLI loads without torch,
# so `graphdbg --help` and a bad argument answer without the 2 s that importing torch takes.

@command(epilog=_example("graphdbg redact dumps -o dumps-shared"))
def redact(
    dump: Annotated[Path, typer.Argument(help="A dump folder, or a folder of dumps.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the redacted copy here (default: redact in place).")] = None,
    root: Annotated[Optional[Path], typer.Option("--root", help="Project root that source paths become relative to (default: found from the paths).")] = None,
    as_json: JsonFlag = False,
    drop_weights: Annotated[bool, typer.Option("--drop-weights", help="As `graphdbg share`: parameters and large inputs generated from statistics (needs --out).")] = False,
) -> None:
    """Make a dump safe to share: relative source paths, no host name, user names or environment."""
    from graphdbg.store.redact import redact_dumps

    if drop_weights:
        if out is None:
            raise GraphdbgError("redact --drop-weights writes a copy: give it --out")
        return share(dump, out, root=root, as_json=as_json)
    report = redact_dumps(dump, out=out, root=root)
    if as_json:
        _print_json(report)
    else:
        for row in report:
            console.print(f"{row['path']}: {row['paths']} paths made relative, removed {', '.join(row['removed']) or 'nothing'}", highlight=False)


@command(epilog=_example("graphdbg share dumps/rank0/g0-compile_error-3b0e0256 -o shared --trust-backend"))
def share(
    dump: Annotated[Path, typer.Argument(help="A dump folder.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the copy goes (a new dump folder).")],
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="The backend that fails (default: the dump's own).")] = None,
    trust_backend: TrustOpt = False,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    root: Annotated[Optional[Path], typer.Option("--root", help="Project root that source paths become relative to.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A redacted copy without the weights (generated from statistics) that still fails the same way; says which values stay."""
    from graphdbg.minify.share import share_dump

    result = share_dump(dump, out, ReplayOptions(isolate=isolate, timeout=timeout), backend=backend, trust_backend=trust_backend, root=root,
                        announce=_note)
    if as_json:
        _print_json(result.to_dict())
    else:
        console.print(result.line(), highlight=False, soft_wrap=True)
