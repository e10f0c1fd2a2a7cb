"""The public API and the installed package: typed signatures whose keywords reach the run, and the
wheel a user installs (the typed package, the entry point, the extras)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

DUMP = FIXTURES / "block_runtime_error"


def test_public_api_is_typed():
    import graphdbg
    from graphdbg.case import Case

    assert (Path(graphdbg.__file__).parent / "py.typed").is_file()
    for fn, names in ((graphdbg.capture, {"mode", "budget_bytes", "rtol", "atol", "redact"}),
                      (graphdbg.compare, {"device", "isolate", "timeout", "passes", "accuracy", "rtol", "atol"}),
                      (Case.run, {"isolate", "timeout", "accuracy", "rtol", "atol", "direct", "backward"})):
        params = inspect.signature(fn).parameters
        assert names <= set(params), fn
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), fn
        assert all(p.annotation is not inspect.Parameter.empty for n, p in params.items() if n != "self"), fn


def test_public_api_keywords_reach_the_run():
    import graphdbg

    dump = graphdbg.load(DUMP)
    outcome = dump.case().run("eager", accuracy=False, isolate=False)
    assert outcome.status == "pass"
    with pytest.raises(TypeError):
        dump.case().run("eager", no_such_option=True)
    df = graphdbg.compare(dump, ["eager"], isolate=False, accuracy=False)
    assert list(df.status) == ["pass"]


@pytest.mark.slow
def test_the_wheel_has_the_typed_package_the_entry_point_and_the_extras(tmp_path):
    """What `pip install` from a checkout or a wheel gets (built here without network)."""
    import zipfile

    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                        str(ROOT)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = zipfile.ZipFile(next(tmp_path.glob("graphdbg-*.whl")))
    names = wheel.namelist()
    assert {"graphdbg/py.typed", "graphdbg/__main__.py", "graphdbg/ui/schemas.py"} <= set(names)
    entry = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "graphdbg = graphdbg.__main__:main" in entry
    meta = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode().splitlines()
    assert {f"Provides-Extra: {e}" for e in ("thunder", "flashinfer", "gpu", "dev")} <= set(meta)
    assert "Classifier: Typing :: Typed" in meta
