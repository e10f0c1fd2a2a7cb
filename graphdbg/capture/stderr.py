"""capture's one way of telling the user something: a line on stderr that can never raise."""

from __future__ import annotations

import sys


def say(line: str) -> None:
    """One line on stderr, never an exception: capture must not change the user's program."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass
