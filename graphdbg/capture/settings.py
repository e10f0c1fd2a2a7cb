"""Capture's settings and the environment variables that carry them to a captured program
(``graphdbg capture -- CMD`` sets them; ``autowrap`` and ``hook`` read them). Torch-free: the
``capture`` command only starts CMD and waits for it, without importing torch."""

MODES = ("error", "accuracy", "always")
DEFAULT_BUDGET = 4 << 30  # bytes of input values stored per graph; past it, spec and statistics only
ENV_DUMP_DIR = "GRAPHDBG_DUMP_DIR"
ENV_REDACT = "GRAPHDBG_REDACT"
ENV_MODE = "GRAPHDBG_MODE"
ENV_BUDGET = "GRAPHDBG_BUDGET"
