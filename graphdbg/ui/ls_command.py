"""``graphdbg ls``'s command: what it prints and its exit code (``run_ls``), for the typer
command in ``ui/commands/show.py`` and for ``plain_ls``, the command line ``python -m graphdbg`` and the
console script answer without importing the CLI's framework (typer and click: half the start-up
of a cached listing). This module imports neither, nor rich unless a table is printed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from graphdbg.errors import GraphdbgError
from graphdbg.strict_json import encode_jsonable

# The ls command's options (ui/commands/show.py:ls declares them, with their help) as its parameters;
# tests/test_ls.py checks that the two agree. A command line with anything else (--ops, --help,
# a bad option) goes to the CLI, which answers it.
FLAGS = {"--json": "as_json", "--failed": "failed", "--strict": "strict", "--no-cache": "no_cache"}
VALUES = {"--kind": "kind", "--log": "log"}


def plain_ls(args: list[str]) -> dict[str, Any] | None:
    """``run_ls``'s arguments for ``ls PATH [options]`` (``args``: the command line after the
    program), or None for any other command line."""
    if args[:1] != ["ls"]:
        return None
    out: dict[str, Any] = {"path": None, "log": None, "kind": None, **dict.fromkeys(FLAGS.values(), False)}
    rest = iter(args[1:])
    for arg in rest:
        name, eq, value = arg.partition("=")
        if arg in FLAGS:
            out[FLAGS[arg]] = True
        elif name in VALUES:
            value = value if eq else next(rest, None)  # type: ignore[arg-type]
            if value is None or value.startswith("-"):
                return None
            out[VALUES[name]] = value
        elif arg.startswith("-") or out["path"] is not None:
            return None
        else:
            out["path"] = arg
    if out["path"] is None:
        return None
    out["path"] = Path(out["path"])
    out["log"] = Path(out["log"]) if out["log"] is not None else None
    return out


def run_ls(path: Path, as_json: bool = False, log: Path | None = None, failed: bool = False, kind: str | None = None,
           strict: bool = False, no_cache: bool = False) -> int:
    """List ``path`` on stdout (a table, or ``--json``), each unreadable file a line on stderr;
    the exit code: 2 with ``strict`` where a file can't be read, else 0."""
    from graphdbg.listing import ls_output  # lazy: `graphdbg --help` needs none of the listing

    if not os.path.lexists(path):  # answered before anything is read
        raise GraphdbgError(f"{path}: no such file or folder")
    if as_json:
        data = ls_output(path, log=log, failed=failed, kind=kind, cache=not no_cache)
        sys.stdout.write(encode_jsonable(data))
    else:
        data = _print_table(path, log, failed, kind, no_cache)
    if data["problems"]:
        from graphdbg.ui.render import safe_console  # lazy: rich, only for what goes on stderr

        for p in data["problems"]:
            safe_console(stderr=True).print(f"graphdbg: unreadable: {p['error']}", highlight=False, soft_wrap=True, markup=False)
    return 2 if data["problems"] and strict else 0


def _print_table(path: Path, log: Path | None, failed: bool, kind: str | None, no_cache: bool) -> dict[str, Any]:
    from graphdbg.listing import ls_output  # lazy: as in run_ls
    from graphdbg.ui.render import ListingProgress, ListingView, log_notes, safe_console  # lazy: rich, for tables only

    progress = ListingProgress(safe_console(stderr=True))
    try:
        data = ls_output(path, log=log, failed=failed, kind=kind, cache=not no_cache, progress=progress)
    finally:
        progress.close()
    console = safe_console()
    if not data["summary"]["files"] and not data["problems"]:
        console.print(f"no dumps under {data['root']}" + (" (none match the filter)" if failed or kind else ""),
                      highlight=False, soft_wrap=True)
        return data
    console.print(ListingView(data["groups"], data["root"], len(data["problems"])), crop=False,
                  soft_wrap=not console.is_terminal)  # piped: whole lines, for grep
    if data.get("logs"):
        console.print(log_notes(data["logs"], data["root"]), soft_wrap=not console.is_terminal)
    return data
