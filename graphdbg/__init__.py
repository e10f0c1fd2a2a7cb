"""graphdbg: capture the FX graphs a torch.compile backend fails on, and replay them offline.

    >>> import graphdbg
    >>> compiled = torch.compile(model, backend=graphdbg.capture("inductor", dump_dir="dumps"))
    >>> dump = graphdbg.load("dumps/rank0/g0-compile_error-1a2b3c4d")
    >>> case = dump.case()          # the GraphModule and its inputs, on this machine
    >>> dump.nodes()                # a pandas table of the graph
"""

__version__ = "0.1.0"

from graphdbg.capture import capture  # noqa: E402
from graphdbg.errors import DumpError, GraphdbgError, GraphSourceError  # noqa: E402
from graphdbg.formats import load as _load


def load(path):
    """Load a dump folder (or a printed graph file) as a :class:`~graphdbg.dump.Dump`."""
    return _load(path)


def compare(dump, backends=("eager", "aot_eager", "inductor"), **options):
    """Replay ``dump`` (a Dump or a path) under each backend; a pandas DataFrame, one row each."""
    from graphdbg.replay.run import compare_backends  # this module loads without torch (fast CLI start); this brings torch in

    if not hasattr(dump, "manifest"):
        dump = load(dump)
    return compare_backends(dump, list(backends), **options)


__all__ = ["compare", "capture", "load", "GraphdbgError", "DumpError", "GraphSourceError", "__version__"]
