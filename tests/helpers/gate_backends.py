"""Backends for tests/test_gate.py, imported by name in isolated replay children."""

from __future__ import annotations

import os
import sys


def garbage_outcome(gm, example_inputs):
    """In an isolated replay child (``python -m graphdbg.execution.child REQUEST OUTCOME``): leave
    garbage where the child's outcome.json goes and end the child, as a hostile backend could."""
    if len(sys.argv) >= 3 and sys.argv[2].endswith(".json"):
        with open(sys.argv[2], "w") as f:
            f.write('{"status": 5, "backend": ["x"], "mismatches": "all"}')
        os._exit(0)
    return gm.forward
