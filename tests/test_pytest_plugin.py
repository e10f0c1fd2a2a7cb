"""The pytest plugin (graphdbg.ui.pytest_plugin) driven through pytest itself, with pytester.

Dumps are captured here from three small programs and a backend module that refuses gelu, silu
and softplus; "fixing the backend" rewrites that module, as a compiler team's fix would land.
The plugin is loaded with ``-p graphdbg.ui.pytest_plugin`` so that it works before the package
is reinstalled with its entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ("-p", "graphdbg.ui.pytest_plugin")

BROKEN = '''
def picky(gm, example_inputs):
    for n in gm.graph.nodes:
        name = getattr(n.target, "__name__", str(n.target))
        if n.op == "call_function" and name in ("gelu", "silu", "softplus"):
            raise NotImplementedError(f"no lowering for {name}")
    return gm.forward
'''
FIXED = '''
def picky(gm, example_inputs):
    return gm.forward
'''
OTHER_BUG = '''
def picky(gm, example_inputs):
    raise ValueError("lowering table is empty")
'''
MAKE = '''
import sys
import torch
import torch.nn.functional as F
import graphdbg
import regbackends

programs = [lambda x: F.gelu(x) * 2, lambda x: F.silu(x @ x.T) + 1, lambda x: F.softplus(x).sum(-1)]
for i, f in enumerate(programs):
    torch._dynamo.reset()
    try:
        torch.compile(f, backend=graphdbg.capture(regbackends.picky, dump_dir=f"dumps/model{i}"))(torch.randn(4, 8))
    except Exception:
        pass
'''


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), "."])
    return env


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three dumps of a real capture (one per program), made once for the module."""
    where = tmp_path_factory.mktemp("captured")
    (where / "regbackends.py").write_text(BROKEN)
    (where / "make.py").write_text(MAKE)
    subprocess.run([sys.executable, "make.py"], cwd=where, env=_env(), check=True, capture_output=True, timeout=300)
    assert len(list((where / "dumps").glob("model*/rank0/g0-compile_error-*"))) == 3
    return where


@pytest.fixture
def project(pytester: pytest.Pytester, captured: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    shutil.copytree(captured / "dumps", pytester.path / "dumps")
    (pytester.path / "regbackends.py").write_text(BROKEN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    for name in list(sys.modules):  # each run imports the backend module as it is on disk now
        if name == "regbackends":
            del sys.modules[name]
    return pytester


def _fix(pytester: pytest.Pytester, text: str) -> None:
    (pytester.path / "regbackends.py").write_text(text)
    sys.modules.pop("regbackends", None)


@pytest.mark.slow
def test_three_dumps_fail_then_pass_once_the_backend_is_fixed(project: pytest.Pytester) -> None:
    p = project
    # -x stops at the first failing dump; JUnit XML carries the signature in the failure message
    r = p.runpytest(*PLUGIN, "--graphdbg=dumps", "--graphdbg-trust-backend", "-x", "--junitxml=out.xml")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*collected 3 items*",
                            "crash: NotImplementedError: no lowering for gelu (reproduce: graphdbg replay "
                            "dumps/model0/rank0/g0-compile_error-* --backend regbackends:picky)",
                            "FAILED dumps::model0/rank0/g0 - crash: NotImplementedError*"])
    failure = ET.parse(p.path / "out.xml").getroot().find(".//testcase/failure")
    assert failure is not None and "NotImplementedError: no lowering for gelu" in failure.get("message")
    assert "graphdbg replay dumps/model0/rank0/g0-compile_error-" in failure.get("message")
    assert "--backend regbackends:picky" in failure.get("message")

    # -k picks by the short names; xdist runs them in workers
    r = p.runpytest(*PLUGIN, "--graphdbg=dumps", "--graphdbg-trust-backend", "-k", "not model0", "-n", "2")
    r.assert_outcomes(failed=2)
    for op in ("silu", "softplus"):  # workers finish in either order
        r.stdout.fnmatch_lines([f"crash: NotImplementedError: no lowering for {op} (reproduce: graphdbg replay *)"])

    # the backend breaks another way: an error, not a failure
    _fix(p, OTHER_BUG)
    r = p.runpytest(*PLUGIN, "--graphdbg=dumps", "--graphdbg-trust-backend", "-k", "model1")
    r.assert_outcomes(errors=1)
    r.stdout.fnmatch_lines(["fails differently: crash: ValueError: lowering table is empty "
                            "(captured: NotImplementedError: no lowering for silu; reproduce: graphdbg replay *)",
                            "ERROR dumps::model1/rank0/g0 - *"])

    # fixed: the three that failed (--lf) pass (in this process: xdist's workers are covered above)
    _fix(p, FIXED)
    r = p.runpytest(*PLUGIN, "--graphdbg=dumps", "--graphdbg-trust-backend", "--lf")
    r.assert_outcomes(passed=3)


@pytest.mark.slow
def test_an_expected_failure_that_starts_passing_is_noticed(project: pytest.Pytester) -> None:
    p = project
    shutil.rmtree(p.path / "dumps" / "model2")
    strict = next((p.path / "dumps" / "model0").glob("rank0/g0-*"))
    (strict / "expect").write_text("xfail strict: waiting for the gelu lowering\n")
    loose = next((p.path / "dumps" / "model1").glob("rank0/g0-*"))
    manifest = json.loads((loose / "manifest.json").read_text())
    manifest["expect"] = {"xfail": True, "reason": "silu lowering is planned"}
    (loose / "manifest.json").write_text(json.dumps(manifest))

    args = (*PLUGIN, "--graphdbg=dumps", "--graphdbg-trust-backend")
    p.runpytest(*args).assert_outcomes(xfailed=2)  # in this process; in xdist's workers below
    _fix(p, FIXED)
    r = p.runpytest(*args, "-n", "2", "-rA")
    r.assert_outcomes(failed=1, xpassed=1)
    r.stdout.fnmatch_lines(["*XPASS(strict)*waiting for the gelu lowering*"], consecutive=False)


def test_collects_printed_graphs_with_markers_and_short_names(pytester: pytest.Pytester) -> None:
    corpus = ROOT / "fixtures" / "corpus" / "Qwen3-0.6B"
    r = pytester.runpytest(*PLUGIN, f"--graphdbg={corpus}", "--collect-only", "-q")
    r.stdout.fnmatch_lines(["*::rank0_0", "*::rank0_7", "*::rank1_0"], consecutive=False)
    # rank0_7 and rank0_13 were captured on CUDA: the gpu marker, so -m "not gpu" leaves them out on a CPU CI
    r = pytester.runpytest(*PLUGIN, f"--graphdbg={corpus}", "--collect-only", "-q", "-m", "not gpu")
    r.stdout.fnmatch_lines(["*::rank0_0", "*::rank1_0", "2/4 tests collected (2 deselected)*"])


def test_code_a_dump_names_is_imported_only_when_trusted(project: pytest.Pytester) -> None:
    r = project.runpytest(*PLUGIN, "--graphdbg=dumps", "-k", "model0")
    r.assert_outcomes(errors=1)
    r.stdout.fnmatch_lines(["*code the dump names*--trust-backend*"])


def test_off_unless_asked_and_a_missing_folder_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    r = pytester.runpytest(*PLUGIN, "--graphdbg=nowhere")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*graphdbg: nowhere: no such file or folder*"])


def test_ini_option_collects_the_folder(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ngraphdbg_dumps = dumps\n")
    r = project.runpytest(*PLUGIN, "--collect-only", "-q")
    r.stdout.fnmatch_lines(["dumps::model0/rank0/g0", "dumps::model1/rank0/g0", "dumps::model2/rank0/g0"])


# --- a dumps folder is data: pytest imports nothing under it -------------------------------------

def _planted(where: Path, sentinel: Path) -> str:
    """Code that leaves ``sentinel`` behind if anything ever imports it."""
    return f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text(__file__)\n"


def _hostile_dumps(project: Path, sentinel: Path) -> Path:
    """A folder of dumps as an attacker would hand it over: a conftest.py, package __init__.py
    files, a test module, and a dump whose manifest names its graph file ``conftest.py`` in a
    subfolder, each of which would run if pytest imported it."""
    src = next((ROOT / "fixtures" / "block_compile_error").glob("rank*/*"))
    bugs = project / "bug-1234"
    dump = bugs / "model" / "rank0" / src.name
    shutil.copytree(src, dump)
    (dump / "graph").mkdir()
    (dump / "graph.py").rename(dump / "graph" / "conftest.py")
    manifest = json.loads((dump / "manifest.json").read_text())
    manifest["graph"]["file"] = "graph/conftest.py"
    (dump / "manifest.json").write_text(json.dumps(manifest))
    code = _planted(bugs, sentinel)
    for name in ("conftest.py", "__init__.py", "model/__init__.py", "model/conftest.py", "model/test_model.py",
                 f"model/rank0/{src.name}/test_graph.py", "testing/conftest.py"):
        (bugs / name).parent.mkdir(parents=True, exist_ok=True)
        (bugs / name).write_text(code)
    return bugs


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest as a user runs it: a fresh interpreter in ``cwd``, the plugin named with -p."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PLUGIN, *args], cwd=cwd,
                          env={**_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=300)


@pytest.mark.slow
def test_nothing_under_the_dumps_folder_is_imported(tmp_path: Path) -> None:
    sentinel = tmp_path / "IMPORTED"
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_own.py").write_text("def test_own():\n    pass\n")  # the user's own suite, collected as always
    _hostile_dumps(project, sentinel)
    for args in (["--graphdbg=bug-1234"], [f"--graphdbg={project / 'bug-1234'}", "."]):
        done = _pytest(project, *args, "--collect-only", "-q")
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        assert "test_own.py::test_own" in out and "bug-1234::model/rank0/g0" in out, out
        assert not sentinel.exists(), f"{args}: {sentinel.read_text()} was imported"


@pytest.mark.slow  # six pytest runs (~2.5 s of CPU each)
def test_pytest_settings_or_conftests_from_the_dumps_folder_are_refused(tmp_path: Path) -> None:
    sentinel = tmp_path / "IMPORTED"
    project = tmp_path / "project"
    project.mkdir()
    bugs = _hostile_dumps(project, sentinel)
    (bugs / "hooks.py").write_text(_planted(bugs, sentinel))
    (bugs / "tox.ini").write_text("[pytest]\naddopts = -p hooks\npythonpath = .\n")
    # one argument: pytest takes its settings from the project, and the folder's tox.ini is data
    done = _pytest(project, "--graphdbg=bug-1234", "--collect-only", "-q")
    assert done.returncode == 0 and b"bug-1234::model/rank0/g0" in done.stdout, done.stdout + done.stderr
    assert not sentinel.exists()
    # as two arguments, pytest itself reads DIR's settings (before any plugin runs): the form is an
    # error, one line with the spelling to use (docs/security.md)
    (bugs / "tox.ini").write_text("[pytest]\nmarkers =\n    planted: a marker from the dumps folder\n")
    done = _pytest(project, "--graphdbg", "bug-1234", "--collect-only", "-q")
    err = done.stderr.decode()
    assert done.returncode == pytest.ExitCode.USAGE_ERROR and "spell it --graphdbg=bug-1234" in err, err
    # run from inside the folder, pytest would load its conftest.py first: refused before it does
    (bugs / "tox.ini").unlink()
    (project / "pytest.ini").write_text("[pytest]\n")
    # pytest loads the conftest.py of every test* folder where it starts: a dumps folder named so, too
    (project / "testcases").mkdir()
    shutil.copytree(bugs, project / "testcases" / "test-dumps")
    for cwd, args in ((bugs, ["--graphdbg=."]), (project, ["--graphdbg=bug-1234", "bug-1234/model"]),
                      (project / "testcases", ["--graphdbg=test-dumps"]), (project, ["--graphdbg=testcases/test-dumps", "testcases"])):
        done = _pytest(cwd, *args, "--collect-only", "-q")
        err = done.stderr.decode()
        assert done.returncode == pytest.ExitCode.USAGE_ERROR and "inside the dumps folder" in err, (args, err)
    assert not sentinel.exists()


@pytest.mark.slow  # three pytest runs
@pytest.mark.parametrize("config", ["pytest.ini", "setup.cfg", "pyproject.toml"])
def test_a_settings_file_in_the_dumps_folder_never_runs_and_two_arguments_are_an_error(tmp_path: Path, config: str) -> None:
    """A dumps folder whose settings file would load a plugin of its own (``addopts = -p evilplugin``,
    ``pythonpath = .``): ``--graphdbg=DIR`` never reads it; ``--graphdbg DIR``, the spelling under
    which pytest reads it before any plugin runs, is an error of one line on a clean folder too."""
    marker = tmp_path / "EVIL_RAN"
    project = tmp_path / "project"
    dumps = project / "dumps"
    src = next((ROOT / "fixtures" / "block_compile_error").glob("rank*/*"))
    shutil.copytree(src, dumps / "rank0" / src.name)
    (dumps / "evilplugin.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    section = {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p evilplugin'\npythonpath = ['.']\n",
               "setup.cfg": "[tool:pytest]\naddopts = -p evilplugin\npythonpath = .\n"}
    (dumps / config).write_text(section.get(config, "[pytest]\naddopts = -p evilplugin\npythonpath = .\n"))
    done = _pytest(project, "--graphdbg=dumps", "--collect-only", "-q")
    assert done.returncode == 0 and b"dumps::rank0/g0" in done.stdout, done.stdout + done.stderr
    assert not marker.exists()
    (dumps / config).unlink()  # a clean folder: the two-argument form is refused all the same
    (dumps / "evilplugin.py").unlink()
    done = _pytest(project, "--graphdbg", "dumps", "--collect-only", "-q")
    err = [ln for ln in done.stderr.decode().splitlines() if ln.strip()]
    assert done.returncode == pytest.ExitCode.USAGE_ERROR and len(err) == 1, err
    assert "spell it --graphdbg=dumps (one argument)" in err[0] and b"dumps::" not in done.stdout, err


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_an_error_item_not_an_internal_error(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    src = next((ROOT / "fixtures" / "block_compile_error").glob("rank*/*"))
    odd = os.fsdecode(b"dumps-\xff\xfe")
    shutil.copytree(src, project / odd / "rank0" / "g0-compile_error-3b0e0256")
    shutil.copytree(src, project / "dumps" / os.fsdecode(b"model-\xe9") / "rank0" / "g0-compile_error-3b0e0256")
    shutil.copytree(src, project / "dumps" / "model" / "rank0" / "g0-compile_error-3b0e0256")
    done = _pytest(project, "--graphdbg=dumps", "--collect-only", "-q")
    out = done.stdout.decode()
    assert done.returncode == 0 and "INTERNALERROR" not in out + done.stderr.decode(), out + done.stderr.decode()
    assert "dumps::model/rank0/g0" in out and "model-\\xe9" in out, out
    done = _pytest(project, "--graphdbg=dumps", "-q", "-k", "xe9")
    out = done.stdout.decode()
    assert done.returncode == 1 and "not UTF-8" in out and "1 error" in out and "INTERNALERROR" not in out, out
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PLUGIN, b"--graphdbg=" + os.fsencode(odd),
                           "-q"], cwd=project, env={**_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=300)
    out = done.stdout.decode()
    assert done.returncode == 1 and "1 error" in out and "not UTF-8" in out and "INTERNALERROR" not in out, out
