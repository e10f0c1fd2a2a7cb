"""Every child interpreter graphdbg starts is isolated from the folder it runs in (issue 42).

A dump folder (or the user's folder) that ships modules named like the standard library's, a
``graphdbg/`` package, a ``pytest.py`` or a ``conftest.py`` must never have them imported by a
replay child, torchrun, or a self-check: ``python -I`` and an explicit ``sys.path``
(``graphdbg.execution.sandbox.python_command`` / ``child_path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

# Names a child imports early (the interpreter's start, graphdbg's child, torch, pytest) or
# late (optional imports): each writes a marker where the test looks, and breaks the run.
SHADOWS = ("json.py", "signal.py", "runpy.py", "site.py", "sitecustomize.py", "usercustomize.py", "typing.py",
           "ctypes/__init__.py", "graphdbg/__init__.py", "torch/__init__.py", "pytest.py", "_pytest/__init__.py",
           "conftest.py", "numpy/__init__.py", "triton/__init__.py", "__init__.py")
SHADOW = "open({marker!r}, 'a').write({name!r} + '\\n')\nraise SystemExit('shadow {name} ran')\n"


def plant(folder: Path, markers: Path) -> None:
    for name in SHADOWS:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SHADOW.format(marker=str(markers / "ran.txt"), name=f"{folder.name}/{name}"))


def ran(markers: Path) -> list[str]:
    return (markers / "ran.txt").read_text().split() if (markers / "ran.txt").exists() else []


@pytest.fixture
def markers(tmp_path):
    out = tmp_path / "markers"
    out.mkdir()
    return out


def test_replay_from_inside_a_dump_with_shadow_modules_runs_none_of_them(fixture_copy, markers):
    """``cd DUMP && graphdbg replay . --backend eager``: the real console script; ``--backend``
    is what makes graphdbg put the current folder on the path for the user's backend."""
    dump = fixture_copy("block_compile_error")
    plant(dump, markers)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "GRAPHDBG_"))}
    env["GRAPHDBG_CACHE_DIR"] = str(markers.parent / "cache")
    script = Path(sys.executable).parent / "graphdbg"
    r = subprocess.run([str(script), "replay", ".", "--backend", "eager", "--json"], cwd=dump, env=env,
                       capture_output=True, text=True, timeout=300)
    assert ran(markers) == [], r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["isolated"] and out["status"] == "pass", out


def graphdbg_in(folder: Path, *args: object, tmp: Path) -> subprocess.CompletedProcess:
    """The real console script, run from ``folder`` in its own process (this one must never
    import a shadow: a ``triton/`` found once is remembered by torch for the whole session)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "GRAPHDBG_"))}
    env["GRAPHDBG_CACHE_DIR"] = str(tmp / "cache")
    env["PYTHONPATH"] = str(FIXTURES.parent)  # the dump's own backend (fixtures.programs), for --trust-backend
    return subprocess.run([str(Path(sys.executable).parent / "graphdbg"), *map(str, args)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compare", "share"])
def test_compare_and_share_children_run_no_module_of_the_folder(command, fixture_copy, markers, tmp_path):
    dump = fixture_copy("block_compile_error")
    plant(dump, markers)
    args = {"compare": ["compare", ".", "--backends", "eager"],
            "share": ["share", ".", "-o", tmp_path / "shared", "--trust-backend"]}[command]
    r = graphdbg_in(dump, *args, tmp=tmp_path)
    assert ran(markers) == [], r.stderr[-3000:]
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "shadow" not in r.stdout + r.stderr, r.stderr[-3000:]


@pytest.mark.slow
def test_a_trusted_backend_in_the_current_folder_still_imports_in_the_child(tmp_path, fixture_copy, markers):
    """The folder a trusted backend came from is put on the child's path explicitly, after
    the interpreter's own: the backend imports, the shadows beside it still don't."""
    work = tmp_path / "work"
    work.mkdir()
    plant(work, markers)
    (work / "__init__.py").unlink()
    (work / "my_backend.py").write_text("import json\n\ndef fails(gm, example_inputs):\n"
                                        "    raise RuntimeError('my backend ran: ' + json.dumps(1))\n")
    # the real console script in its own process: this one must never see the shadows (a
    # triton/ found once is remembered by torch for the rest of the session)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "GRAPHDBG_"))}
    env["GRAPHDBG_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([str(Path(sys.executable).parent / "graphdbg"), "replay", str(fixture_copy("block_compile_error")),
                        "--backend", "my_backend:fails", "--json"], cwd=work, env=env, capture_output=True, text=True,
                       timeout=300)
    assert ran(markers) == [], r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["isolated"] and out["status"] == "crash" and "my backend ran: 1" in out["signature"], out


@pytest.mark.slow
def test_export_test_self_check_imports_nothing_from_the_tests_folder(tmp_path, markers):
    """The exported test lands in a folder with a ``pytest.ini`` that adds a plugin, a
    ``conftest.py``, a package ``__init__.py`` and shadows: pytest runs the test file alone."""
    where = tmp_path / "user_tests"
    where.mkdir()
    plant(where, markers)
    (where / "pytest.ini").write_text("[pytest]\naddopts = -p json\npythonpath = .\n")
    r = graphdbg_in(where, "export-test", FIXTURES / "block_compile_error", "-o", where / "test_gelu.py",
                    "--trust-backend", tmp=tmp_path)
    assert ran(markers) == [], r.stderr[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    assert "run on its own: crash: NotImplementedError: no lowering for gelu" in r.stderr, r.stderr[-3000:]


def test_child_path_keeps_the_current_folder_out(monkeypatch):
    from graphdbg.execution.sandbox import CHILD_PATH_ENV, child_path

    here = os.getcwd()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([".", here, "/opt/team/lib", ""]))
    got = json.loads(child_path(["conftest:FIXTURES"])[CHILD_PATH_ENV])
    assert got["head"] == ["/opt/team/lib"], got
    # conftest, which this process imported from there, is found where it was, first; json never by name
    by_name = {**got["first"], **got["modules"]}
    assert got["first"]["conftest"] == str(Path(__file__).parent) and "json" not in by_name, got
