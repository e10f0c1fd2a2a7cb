"""The files graphdbg writes for the user hand the backend the graph Dynamo hands it (issue 53):
minify's repro.py and an exported test give it the node meta graphdbg's replay gives
(``replay/graph_meta.dynamo_meta``, written whole into repro.py), so a backend whose FX pass
reads ``example_value`` or ``val`` fails there with its own bug, not on missing meta."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, run_graphdbg
from meta_cc import capture_user_cc, write_user_cc

from graphdbg.replay.graph_meta import meta_source

CAPTURED = "IndexError: tuple index out of range"


def _repro(repro: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``python repro.py`` as the user runs it: another folder, no graphdbg importable."""
    return subprocess.run([sys.executable, str(repro)], cwd=cwd, env=child_env(graphdbg=False), capture_output=True,
                          text=True, timeout=600)


def _fix(module: Path) -> None:
    module.write_text(module.read_text().replace("v.shape[rank]", "v.shape[rank - 1]"))


@pytest.fixture
def project(tmp_path):
    """A user's folder: the ``cc_crash_*`` compilers and a dump captured under ``cc_crash_example_value``."""
    proj = tmp_path / "proj"
    proj.mkdir()
    write_user_cc(proj, modes=("crash",))
    dump = capture_user_cc(proj, proj / "dumps")
    assert dump.name.startswith("g0-compile_error"), dump
    return proj, dump


@pytest.mark.slow
@pytest.mark.parametrize("key", ["example_value", "val"])
def test_minify_writes_a_repro_that_fails_with_the_backends_own_bug(project, tmp_path, key):
    proj, dump = project
    r = run_graphdbg("minify", dump, "--backend", f"cc_crash_{key}:backend", "-o", "min", cwd=proj)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "does not show the captured failure" not in r.stderr, r.stderr[-3000:]
    assert f"checked: min/repro.py run on its own: REPRODUCED: {CAPTURED}" in r.stderr, r.stderr[-3000:]
    repro = proj / "min" / "repro.py"
    assert meta_source() in repro.read_text() and str(tmp_path) not in repro.read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _repro(repro, elsewhere)
    assert done.returncode == 1 and done.stdout.startswith(f"REPRODUCED: {CAPTURED}"), (done.stdout, done.stderr[-3000:])
    _fix(proj / f"cc_crash_{key}.py")
    done = _repro(repro, elsewhere)
    assert done.returncode == 0 and done.stdout.startswith("FIXED"), (done.stdout, done.stderr[-3000:])


@pytest.mark.slow
def test_a_repro_through_torch_compile_gets_val_as_replay_gives_it(project, tmp_path, monkeypatch):
    """DIRECT=False: Dynamo gives example_value; val and tensor_meta follow it, as in a replay."""
    import graphdbg
    from graphdbg.minify.repro import write_repro

    proj, dump = project
    monkeypatch.syspath_prepend(str(proj))
    monkeypatch.chdir(proj)
    write_repro(graphdbg.load(dump).case(), "cc_crash_val:backend", proj / "min" / "repro.py", direct=False)
    done = _repro(proj / "min" / "repro.py", tmp_path)
    assert done.returncode == 1 and done.stdout.startswith(f"REPRODUCED: {CAPTURED}"), (done.stdout, done.stderr[-3000:])


@pytest.mark.slow
def test_an_exported_test_fails_with_the_backends_own_bug_and_passes_once_it_is_fixed(project, tmp_path):
    proj, dump = project
    r = run_graphdbg("minify", dump, "--backend", "cc_crash_val:backend", "--no-self-check", "-o", "min", cwd=proj)
    assert r.returncode == 0, r.stderr[-3000:]
    minified = next((proj / "min").glob("rank0/g0-*"))
    r = run_graphdbg("export-test", minified, "--trust-backend", "-o", "tests/test_cc.py", cwd=proj)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"run on its own: crash: {CAPTURED}" in r.stderr, r.stderr[-3000:]

    ci = tmp_path / "ci"  # beside the project: run from the module's own folder, the isolated replay imports
    ci.mkdir()  # graphdbg's copy of it (execution/sandbox.child_path drops the current folder), fixed or not

    def pytest_run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(proj / "tests" / "test_cc.py")],
                              cwd=ci, env=child_env(), capture_output=True, text=True, timeout=600)

    done = pytest_run()
    assert done.returncode == 1 and CAPTURED in done.stdout, done.stdout[-3000:]
    _fix(proj / "cc_crash_val.py")
    done = pytest_run()
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_meta_written_into_repro_py_is_the_one_replay_gives():
    """One definition: repro.py gets ``dynamo_meta``'s source from replay/graph_meta.py, which replay calls."""
    import inspect

    from graphdbg.minify import repro
    from graphdbg.replay import graph_meta

    assert "{meta}" in repro._TEMPLATE and "def dynamo_meta(" not in inspect.getsource(repro)
    assert "dynamo_meta(gm, inputs, recorded_meta(gm, dump)" in inspect.getsource(graph_meta.with_dynamo_meta)
    namespace: dict = {}
    exec(compile(meta_source(), "repro.py", "exec"), namespace)  # whole: runs with torch alone, nothing of graphdbg's
    assert set(namespace) - {"__builtins__"} == {f.__name__ for f in graph_meta._META_FUNCTIONS}
    import torch

    gm = torch.fx.symbolic_trace(lambda x: torch.tanh(x) + 1)
    namespace["dynamo_meta"](gm, [torch.randn(2, 3)])
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert type(node.meta["val"]).__name__ == "FakeTensor" and node.meta["example_value"].shape == (2, 3)
    assert node.meta["tensor_meta"].shape == (2, 3) and node.meta["source_fn_stack"][0][1] is torch.tanh
