# Put on PYTHONPATH by `graphdbg capture`: wraps every torch.compile backend in this process,
# then runs the sitecustomize this one shadows, if there is one.
import os
import sys


def _graphdbg_install():
    try:
        from graphdbg.capture.autowrap import install  # inside the try: a broken install must not stop the user's program

        install()
    except Exception as e:  # never break the user's program over a debugging aid
        sys.stderr.write(f"graphdbg: capture hook not installed ({type(e).__name__}: {e})\n")


def _graphdbg_chain():
    # here, not at the top: this file runs in every process the user starts; keep its names few
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_graphdbg_install()
_graphdbg_chain()
