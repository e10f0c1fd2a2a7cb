"""Errors a user sees as one line: what is wrong, and where."""

from __future__ import annotations


class GraphdbgError(Exception):
    """A problem with the user's input (a dump, a file, an option), reported as one line."""

    exit_code = 2


class DumpError(GraphdbgError):
    """A dump that can't be read: missing or malformed manifest, truncated tensors, future schema."""


class GraphSourceError(GraphdbgError):
    """A printed graph that can't be turned into an FX graph; names the file and line."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.file, self.line = file, line
        where = f"{file}:{line}: " if file and line else f"{file}: " if file else ""
        super().__init__(f"{where}{message}")
