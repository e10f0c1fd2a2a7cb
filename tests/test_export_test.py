"""An exported regression test, and minify's repro.py, run the user's own backend module wherever
it is importable, and graphdbg's frozen copy only where it is not: they pass once the bug is
fixed, and say which module they used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, child_env, run_graphdbg

from graphdbg.backends.carry import import_rule_source, own_modules_first

BUGGY = '''
def compile_fn(gm, example_inputs):
    """A backend of the user's: it has no lowering for gelu (the bug)."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "__name__", "") == "gelu":
            raise NotImplementedError("no lowering for gelu")
    return gm.forward
'''
FIXED = '''
def compile_fn(gm, example_inputs):
    """The same backend, fixed."""
    return gm.forward
'''


def _pytest(test: Path, cwd: Path, *paths: Path) -> subprocess.CompletedProcess:
    """``python -m pytest TEST`` from ``cwd``, as a user runs it (graphdbg installed, ``paths`` on PYTHONPATH)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=cwd,
                          env=child_env(*paths), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_an_exported_test_passes_once_the_users_module_is_fixed_and_says_which_module_it_used(tmp_path):
    proj = tmp_path / "proj"
    (proj / "tests").mkdir(parents=True)
    module = proj / "mycc_export.py"
    module.write_text(BUGGY)
    r = run_graphdbg("export-test", FIXTURES / "block_compile_error", "--backend", "mycc_export:compile_fn",
                     "-o", "tests/test_gelu.py", cwd=proj)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "checked: tests/test_gelu.py run on its own: crash: NotImplementedError: no lowering for gelu" in r.stderr, r.stderr
    test = proj / "tests" / "test_gelu.py"
    assert str(tmp_path) not in test.read_text() and import_rule_source() in test.read_text()
    assert (proj / "tests" / "test_gelu_data" / "mycc_export.py").is_file()

    # the bug is there: red, with the user's module
    done = _pytest(test.relative_to(proj), proj)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "NotImplementedError: no lowering for gelu" in done.stdout
    assert "the backend's module mycc_export: yours, mycc_export.py" in done.stdout, done.stdout[-3000:]

    # fixed in the user's file: green, from the project and from another folder
    module.write_text(FIXED)
    for cwd in (proj, tmp_path / "elsewhere"):
        done = _pytest(test, cwd)
        assert done.returncode == 0, done.stdout[-3000:]
        shown = os.path.relpath(module, cwd)
        assert f"the backend's module mycc_export: yours, {shown}" in done.stdout, done.stdout[-3000:]

    # the module moved to a folder on PYTHONPATH: still the user's
    lib = tmp_path / "lib"
    lib.mkdir()
    module.rename(lib / module.name)
    done = _pytest(test, tmp_path / "elsewhere", lib)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "the backend's module mycc_export: yours, ../lib/mycc_export.py" in done.stdout, done.stdout[-3000:]

    # nowhere to import it from: graphdbg's copy (with the bug), and the test says so
    done = _pytest(test, tmp_path / "elsewhere")
    assert done.returncode == 1, done.stdout[-3000:]
    assert ("the backend's module mycc_export: graphdbg's copy, ../proj/tests/test_gelu_data/mycc_export.py "
            "(yours is not importable from where it was nor from sys.path)") in done.stdout, done.stdout[-3000:]
    assert "NotImplementedError: no lowering for gelu" in done.stdout


@pytest.mark.slow
def test_a_repro_runs_the_users_module_from_pythonpath_before_its_copy(tmp_path, monkeypatch):
    """repro.py's rule is the exported test's: the user's module where it is importable."""
    import graphdbg
    from graphdbg.minify.repro import write_repro

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "mycc_repro.py").write_text(BUGGY)
    monkeypatch.syspath_prepend(str(proj))
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    out = tmp_path / "min"
    write_repro(case, "mycc_repro:compile_fn", out / "repro.py", direct=True)
    text = (out / "repro.py").read_text()
    assert import_rule_source() in text and str(tmp_path) not in text
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "mycc_repro.py").write_text(FIXED)  # fixed, and moved where PYTHONPATH finds it
    (proj / "mycc_repro.py").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, str(out / "repro.py")], cwd=elsewhere, env=child_env(lib, graphdbg=False),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.startswith("FIXED"), (done.stdout, done.stderr[-3000:])
    assert "note: the backend's module mycc_repro: yours, ../lib/mycc_repro.py" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, str(out / "repro.py")], cwd=elsewhere, env=child_env(graphdbg=False),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and done.stdout.startswith("REPRODUCED"), (done.stdout, done.stderr[-3000:])
    assert "note: the backend's module mycc_repro: graphdbg's copy, ../min/mycc_repro.py" in done.stderr, done.stderr


def test_the_import_rule_puts_where_the_module_was_first_and_the_copies_last(tmp_path, monkeypatch):
    copies, lived, other = tmp_path / "out", tmp_path / "src", tmp_path / "other"
    for folder in (copies, lived, other):
        folder.mkdir()
    for name in ("a_rule_mod", "b_rule_mod", "c_rule_mod"):
        (copies / f"{name}.py").write_text("")
    (lived / "a_rule_mod.py").write_text("")
    (other / "b_rule_mod.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(copies), str(other), *sys.path])
    said = own_modules_first(copies, ["../src", "../gone", "."], copies, ["a_rule_mod", "b_rule_mod", "c_rule_mod"])
    assert said == ["the backend's module a_rule_mod: yours, src/a_rule_mod.py",
                    "the backend's module b_rule_mod: yours, other/b_rule_mod.py",
                    "the backend's module c_rule_mod: graphdbg's copy, out/c_rule_mod.py "
                    "(yours is not importable from where it was nor from sys.path)"]
    assert sys.path[0] == str(copies / "../src") and sys.path[1] == str(other) and sys.path[-1] == str(copies)
    assert sys.path.count(str(copies)) == 1


def test_the_rule_written_into_the_files_is_the_one_in_carry():
    """One definition: repro.py and the exported test get its source from backends/carry.py."""
    import importlib

    repro, export_test = (importlib.import_module(f"graphdbg.minify.{m}") for m in ("repro", "export_test"))
    assert "{rule}" in repro._TEMPLATE and "{rule}" in export_test._TEMPLATE
    assert "def own_modules_first(" not in (ROOT / "graphdbg" / "minify" / "repro.py").read_text()
    assert "def own_modules_first(" not in (ROOT / "graphdbg" / "minify" / "export_test.py").read_text()
