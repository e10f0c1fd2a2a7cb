"""Where a graph runs: this process, a fresh sandboxed child, warm sandboxed workers, a torchrun
world. One door, ``executor.Executor`` (``submit``/``map`` of ``Job``s), chosen once by the CLI
or the API and passed down as ``ReplayOptions.executor``; see ``executor.py``."""
