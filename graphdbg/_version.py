"""The package's version, in a module of its own so that no module needs the facade for it, and
the torch versions graphdbg is tested on.

    >>> untested_torch("2.9.1")
    'graphdbg: torch 2.9.1 is untested (tested: 2.11, 2.13); if something fails, say which torch you ran'
"""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# The torch releases the whole suite runs on: CI's (2.13) and the GPU image's (2.11,
# scripts/gpu-cpu-suite.sh). Any other torch may work; graphdbg says once that it is untested.
TESTED_TORCH = ("2.11", "2.13")
_SAID = "GRAPHDBG_TORCH_SAID"  # set once said: this process's children say nothing more


def untested_torch(version: str | None = None) -> str | None:
    """The one line to say when the installed torch (or ``version``) is not a tested release;
    None when it is, or when no torch is installed. Reads the installed version without
    importing torch."""
    if version is None:
        try:
            import importlib.metadata  # here: only this check needs it (0.04 s)

            version = importlib.metadata.version("torch")
        except Exception:  # no torch installed (PackageNotFoundError), or no metadata to read
            return None
    release = ".".join(version.split("+")[0].split(".")[:2])
    if release in TESTED_TORCH:
        return None
    return f"graphdbg: torch {version} is untested (tested: {', '.join(TESTED_TORCH)}); if something fails, say which torch you ran"


def say_untested_torch() -> None:
    """Print ``untested_torch()``'s line on stderr, once for this process and its children."""
    if os.environ.get(_SAID):
        return
    os.environ[_SAID] = "1"
    line = untested_torch()
    if line:
        print(line, file=sys.stderr)
