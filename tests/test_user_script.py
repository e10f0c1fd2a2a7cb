"""A backend defined in the user's own script, in the README's pattern (the script imports graphdbg,
defines its backend, runs the model in a top-level ``try:``, and writes a file at its top level):
replay, minify, bisect, compare and export-test bring the backend back without running a
statement of the program, and what minify and export-test write runs from another folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES, child_env

import graphdbg
from graphdbg.backends.resolve import resolve_backend
from graphdbg.errors import GraphdbgError
from graphdbg.store.manifest import find_dumps

# The README's pattern. RAN counts the program's runs: every run appends a line to it.
PROGRAM = '''
"""A model compiled with a backend of the script's own, which breaks every linear layer."""
from pathlib import Path

import torch
import torch.fx as fx

import graphdbg

RAN = Path(__file__).with_name("ran.txt")
with open(RAN, "a") as f:
    f.write("ran\\n")

BROKEN = (torch._C._nn.linear,)


def _broken(node):
    return node.op == "call_function" and node.target in BROKEN


def strict_backend(gm: fx.GraphModule, example_inputs):
    """Transposes every linear weight: only square ones survive."""
    for node in list(gm.graph.nodes):
        if _broken(node):
            with gm.graph.inserting_before(node):
                t = gm.graph.call_method("t", (node.args[1],))
            node.args = (node.args[0], t, *node.args[2:])
    gm.recompile()
    return gm.forward


model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
compiled = torch.compile(model, backend=graphdbg.capture(strict_backend, dump_dir=Path(__file__).with_name("dumps")))
try:
    print(compiled(torch.randn(4, 8)).shape)
except Exception as e:
    print("failed:", type(e).__name__)
'''


def _program(folder: Path, text: str = PROGRAM, name: str = "prog.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    prog = folder / name
    prog.write_text(text)
    return prog


def _runs(prog: Path) -> int:
    ran = prog.with_name("ran.txt")
    return len(ran.read_text().splitlines()) if ran.exists() else 0


def _dumps(prog: Path) -> list[Path]:
    return find_dumps(prog.with_name("dumps")) if prog.with_name("dumps").is_dir() else []


# -- definitions only, decided by reading the script ---------------------------------------------


def test_a_script_backend_loads_without_running_a_statement_of_the_program(tmp_path):
    prog = _program(tmp_path)
    name, backend = resolve_backend(f"{prog}:strict_backend")
    assert callable(backend) and backend.__name__ == "strict_backend"
    assert _runs(prog) == 0 and _dumps(prog) == []  # no file written, no model run, no dump
    assert backend.__globals__["BROKEN"]  # what it needs came along


@pytest.mark.parametrize("text, needs, why", [
    ("def make_config():\n    open(__file__ + '.ran', 'a').write('x')\n    return 2\n\nCONFIG = make_config()\n\n"
     "def backend(gm, ex):\n    return gm.forward if CONFIG else None\n", "CONFIG", "a call of the script's make_config"),
    ("import torch\nwith torch.no_grad():\n    W = torch.ones(2)\n\ndef backend(gm, ex):\n    return W\n", "W", "with statement"),
    ("TABLE = {}\nTABLE.update(a=1)\n\ndef backend(gm, ex):\n    return TABLE\n", "TABLE", "expression statement"),
    ("LOG = open(__file__ + '.ran', 'a')\n\ndef backend(gm, ex):\n    LOG.write('x')\n    return gm.forward\n", "LOG",
     "a call of open()"),
    ("for i in range(2):\n    K = i\n\ndef backend(gm, ex):\n    return K\n", "K", "for statement"),
])
def test_a_backend_that_needs_more_than_definitions_is_refused_in_one_line(tmp_path, text, needs, why):
    prog = _program(tmp_path, text)
    with pytest.raises(GraphdbgError) as e:
        resolve_backend(f"{prog}:backend")
    line = str(e.value)
    assert "\n" not in line and f"needs {needs}, which line" in line and why in line, line
    assert "into a module" in line and "--backend module:function" in line
    assert not Path(str(prog) + ".ran").exists()


def test_the_refusal_is_one_line_on_the_command_line(tmp_path, cli):
    prog = _program(tmp_path, "def make_config():\n    return 2\n\nCONFIG = make_config()\n\n"
                              "def backend(gm, ex):\n    return gm.forward if CONFIG else None\n")
    r = cli("replay", FIXTURES / "block_runtime_error", "--backend", f"{prog}:backend", "--no-isolate")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and r.err.startswith("graphdbg: error: "), r
    assert "needs CONFIG, which line 4 binds by running the program (a call of the script's make_config)" in r.err, r


def test_definitions_an_if_a_try_an_import_fallback_and_a_library_call_are_kept(tmp_path):
    prog = _program(tmp_path, '''
import functools
import torch

try:
    import not_a_module_here as fast
except ImportError:
    fast = None

if torch.cuda.is_available():
    DEVICE = "cuda"
else:
    DEVICE = "cpu"

SCALE = 2.0 * 3
TABLE = {"relu": torch.relu}
TABLE["gelu"] = torch.nn.functional.gelu


def make_config():
    open(__file__ + ".ran", "a").write("ran")
    return {}


CONFIG = make_config()  # not needed by the backend: never run


class Lowering:
    scale = SCALE


def lowering(gm, example_inputs, scale):
    assert fast is None and DEVICE in ("cpu", "cuda") and set(TABLE) == {"relu", "gelu"} and Lowering.scale == scale
    return gm.forward


backend = functools.partial(lowering, scale=SCALE)

if __name__ == "__main__":
    print("the program")
''')
    _, backend = resolve_backend(f"{prog}:backend")
    assert backend.keywords == {"scale": 6.0}
    backend(torch.fx.symbolic_trace(lambda x: x + 1), [])
    assert not Path(str(prog) + ".ran").exists()


# -- names resolved without running anything ------------------------------------------------------


def test_a_typo_in_a_script_backend_gets_a_did_you_mean_without_running_the_script(tmp_path, cli, monkeypatch):
    prog = _program(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # `prog:...` names the script as a module, as the user did
    for spec in (f"{prog}:strict_backnd", "prog:strict_backnd"):
        r = cli("replay", FIXTURES / "block_runtime_error", "--backend", spec, "--no-isolate")
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r
        assert "defines no strict_backnd; did you mean strict_backend?" in r.err, r
    assert _runs(prog) == 0 and _dumps(prog) == []


def test_a_module_that_runs_a_program_gives_its_definitions_only(tmp_path, monkeypatch):
    prog = _program(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _, backend = resolve_backend("prog:strict_backend")
    assert backend.__name__ == "strict_backend" and _runs(prog) == 0 and _dumps(prog) == []


def test_an_unknown_backend_name_gets_a_did_you_mean_not_a_list(cli):
    r = cli("replay", FIXTURES / "block_runtime_error", "--backend", "inductr", "--no-isolate")
    assert r.code == 2 and "unknown backend 'inductr'; did you mean inductor?" in r.err, r
    assert "TESTING_ONLY" not in r.err and "aot_eager_decomp_partition" not in r.err
    r = cli("replay", FIXTURES / "block_runtime_error", "--backend", "relu_compile_error_TESTING_ONL", "--no-isolate")
    assert r.code == 2 and "did you mean" not in r.err and "TESTING_ONLY" not in r.err.replace("TESTING_ONL'", ""), r


def test_a_module_that_makes_its_backends_by_calls_is_imported_as_a_module(tmp_path, monkeypatch):
    (tmp_path / "team_backends.py").write_text(
        "def make(op):\n    def refuses(gm, ex):\n        raise NotImplementedError(op)\n    return refuses\n\n"
        "refuses_gelu = make('gelu')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, backend = resolve_backend("team_backends:refuses_gelu")
    assert backend.__qualname__ == "make.<locals>.refuses"


def test_a_module_that_registers_ops_and_backends_at_import_is_imported_as_a_module(tmp_path, monkeypatch):
    # registrations on library objects are what such modules are for (examples/int8_attention.py):
    # left out, the backend's op would not exist
    (tmp_path / "team_ops.py").write_text(
        "import torch\n\nLIB = torch.library.Library('graphdbg_team_ops', 'FRAGMENT')\n"
        "LIB.define('twice(Tensor x) -> Tensor')\nLIB.impl('twice', lambda x: x * 2, 'CompositeExplicitAutograd')\n"
        "REGISTRY = {}\nREGISTRY.update(mode='fast')\n\n"
        "def backend(gm, example_inputs):\n    return lambda *a: torch.ops.graphdbg_team_ops.twice(gm(*a)[0])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, backend = resolve_backend("team_ops:backend")
    assert backend.__module__ == "team_ops"
    assert torch.ops.graphdbg_team_ops.twice(torch.ones(2)).tolist() == [2.0, 2.0]


# -- what a repro or an exported test carries ------------------------------------------------------


@pytest.mark.slow
def test_a_script_backend_is_carried_as_its_definitions_without_graphdbg(tmp_path):
    from graphdbg.backends.carry import carry_backend
    from graphdbg.backends.recipe import recipe_of_spec

    prog = _program(tmp_path / "project", ACCURACY_PROGRAM)
    out = tmp_path / "min"
    recipe = ('recipe:{"kind": "aot_autograd", "kwargs": {"fw_compiler": '
              f'{{"callable": "__main__:leaky_relu_everywhere", "script": {json.dumps(str(prog))}}}}}}}')
    carried = carry_backend(recipe, out)
    assert recipe_of_spec(carried.spec)["kwargs"]["fw_compiler"] == {"callable": "prog_backend:leaky_relu_everywhere"}
    assert carried.paths == ["../project"] and carried.files == ["prog_backend.py"]
    copied = (out / "prog_backend.py").read_text()
    assert "from ../project/prog.py" in copied and str(tmp_path) not in copied
    assert "import graphdbg" not in copied and "aot_autograd" not in copied and "NEGATIVE_SLOPE = 0.5" in copied
    shadow = tmp_path / "shadow" / "graphdbg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError('no graphdbg here')\n")
    done = subprocess.run([sys.executable, "-c", "import prog_backend; print(prog_backend.NEGATIVE_SLOPE)"], cwd=out,
                          env=child_env(shadow.parent, graphdbg=False), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "0.5", done.stderr[-2000:]
    assert _runs(prog) == 0 and not Path(str(prog) + ".ran").exists()


# -- a program is not a dump ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["replay", "show", "minify"])
def test_a_program_given_for_a_dump_says_how_to_capture_it(tmp_path, cli, command):
    prog = _program(tmp_path)
    r = cli(command, prog)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r
    assert "is a program, not a dump" in r.err and f"graphdbg capture -- python {prog}" in r.err, r
    assert _runs(prog) == 0


# -- export-test without pytest -------------------------------------------------------------------


def test_export_test_where_pytest_is_missing_says_so(tmp_path, cli, monkeypatch):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a Python with no pytest in it
    python = bare / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    monkeypatch.setattr(sys, "executable", str(python))
    r = cli("export-test", FIXTURES / "block_runtime_error", "--trust-backend", "-o", tmp_path / "test_block.py")
    assert r.code == 0 and (tmp_path / "test_block.py").is_file(), r
    assert "pytest is not installed" in r.err and "does not show the captured failure" not in r.err, r


# -- end to end: capture, then every command, nothing of the program run again --------------------


def _capture(prog: Path, *via_cli: str) -> Path:
    cmd = [sys.executable, "-m", "graphdbg", "capture", "-o", str(prog.with_name("dumps")), "--"] if via_cli else []
    done = subprocess.run([*cmd, sys.executable, str(prog)], cwd=prog.parent, env=child_env(), capture_output=True,
                          text=True, timeout=600)
    assert "failed:" in done.stdout, (done.stdout, done.stderr[-3000:])
    (dump,) = _dumps(prog)
    return dump


def _copied_elsewhere_reproduces(out: Path, prog: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The minify folder copied to another folder, the script gone: repro.py still runs, with torch only."""
    moved = tmp_path / "elsewhere" / "min"
    shutil.copytree(out, moved)
    prog.rename(prog.with_suffix(".gone"))
    try:
        return subprocess.run([sys.executable, str(moved / "repro.py")], cwd=tmp_path, env=child_env(graphdbg=False),
                              capture_output=True, text=True, timeout=600)
    finally:
        prog.with_suffix(".gone").rename(prog)


@pytest.mark.slow
def test_the_readme_pattern_is_replayed_minified_compared_and_exported_without_rerunning_it(tmp_path, cli):
    prog = _program(tmp_path / "project")
    dump = _capture(prog, "cli")
    assert _runs(prog) == 1 and graphdbg.load(dump).backend == "__main__:strict_backend"

    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["reproduces"], r
    r = cli("compare", dump, "--backends", "dump", "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["rows"][0]["reproduces"], r
    out = tmp_path / "min"
    r = cli("minify", dump, "--trust-backend", "-o", out)
    assert r.code == 0 and "checked: " in r.err and "REPRODUCED" in r.err, r
    assert "copied the definitions strict_backend needs from" in r.err, r
    repro = (out / "repro.py").read_text()
    assert "BACKEND = 'prog_backend:strict_backend'" in repro and str(tmp_path) not in repro
    copied = (out / "prog_backend.py").read_text()
    assert "def strict_backend" in copied and "import graphdbg" not in copied and "try:" not in copied
    r = cli("export-test", dump, "--trust-backend", "-o", tmp_path / "tests" / "test_prog.py")
    assert r.code == 0 and "checked: " in r.err, r
    assert str(tmp_path) not in (tmp_path / "tests" / "test_prog.py").read_text()
    assert _runs(prog) == 1 and _dumps(prog) == [dump]  # no statement of the program ran again, no new dump

    prog.write_text(prog.read_text() + "# edited\n")  # the repro runs its copy, and says the script changed since
    here = subprocess.run([sys.executable, str(out / "repro.py")], cwd=tmp_path, env=child_env(graphdbg=False),
                          capture_output=True, text=True, timeout=600)
    assert here.returncode == 1 and "note: ../project/prog.py changed since prog_backend.py was copied" in here.stderr, here
    run = _copied_elsewhere_reproduces(out, prog, tmp_path)
    assert run.returncode == 1 and run.stdout.startswith("REPRODUCED: RuntimeError"), (run.stdout, run.stderr[-2000:])
    shutil.copytree(tmp_path / "tests", tmp_path / "elsewhere" / "tests")
    prog.rename(prog.with_suffix(".gone"))
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_prog.py"],
                          cwd=tmp_path / "elsewhere", env=child_env(), capture_output=True, text=True, timeout=600)
    assert test.returncode == 1 and "mat1 and mat2 shapes cannot be multiplied" in test.stdout, test.stdout[-3000:]
    assert _runs(prog.with_suffix(".py")) == 1


ACCURACY_PROGRAM = '''
import torch
from torch._dynamo.backends.common import aot_autograd

import graphdbg

SIDE = __file__ + ".ran"
open(SIDE, "a").write("ran\\n")

NEGATIVE_SLOPE = 0.5


def leaky_relu_everywhere(gm, example_inputs):
    """A 'fusion' that turns relu into a leaky relu: the outputs differ."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and "relu" in str(node.target):
            node.target = torch.ops.aten.leaky_relu.default
            node.args = (node.args[0], NEGATIVE_SLOPE)
    gm.recompile()
    return gm


backend = aot_autograd(fw_compiler=leaky_relu_everywhere)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
compiled = torch.compile(model, backend=graphdbg.capture(backend, dump_dir=__file__.rpartition("/")[0] + "/dumps",
                                                        mode="accuracy"))
if True:
    with torch.no_grad():
        print("failed:", compiled(torch.randn(4, 8)).shape)
'''


@pytest.mark.slow
def test_an_aot_autograd_backend_of_the_script_is_bisected_and_minified_without_rerunning_it(tmp_path, cli):
    prog = _program(tmp_path / "project", ACCURACY_PROGRAM)
    dump = _capture(prog)
    ran = Path(str(prog) + ".ran")
    assert ran.read_text() == "ran\n" and graphdbg.load(dump).failure_kind == "accuracy"
    r = cli("bisect", "nodes", dump, "--trust-backend", "--json")
    assert r.code == 1, r
    out = tmp_path / "min"
    r = cli("minify", dump, "--trust-backend", "-o", out)
    assert r.code == 0 and "REPRODUCED" in r.err, r
    assert ran.read_text() == "ran\n" and _dumps(prog) == [dump]
    run = _copied_elsewhere_reproduces(out, prog, tmp_path)
    assert run.returncode == 1 and run.stdout.startswith("REPRODUCED: output"), (run.stdout, run.stderr[-2000:])


SIBLING = '''
import torch


def fast_backend(gm, example_inputs):
    raise NotImplementedError("fast_backend: no lowering for this graph")
'''


@pytest.mark.slow
def test_an_isolated_minify_of_a_sibling_module_backend_writes_a_repro_that_runs_where_the_user_runs_it(tmp_path, cli):
    """With --isolate the backend is imported only by the children: the repro still brings the
    module along, and the self-check runs it as the user will (no PYTHONPATH graphdbg added)."""
    project = tmp_path / "project"
    _program(project, SIBLING, "fastbackend.py")
    prog = _program(project, "import torch\nimport graphdbg\nfrom fastbackend import fast_backend\n\n"
                    "compiled = torch.compile(torch.nn.Linear(4, 4), backend=graphdbg.capture(fast_backend, "
                    "dump_dir=__file__.rpartition('/')[0] + '/dumps'))\n"
                    "try:\n    compiled(torch.randn(2, 4))\nexcept Exception as e:\n    print('failed:', e)\n")
    dump = _capture(prog)
    out = tmp_path / "min"
    r = cli("minify", dump, "--trust-backend", "--isolate", "-o", out)
    assert r.code == 0 and "REPRODUCED" in r.err and "copied the backend's module fastbackend" in r.err, r
    assert (out / "fastbackend.py").is_file() and str(tmp_path) not in (out / "repro.py").read_text()
    (project / "fastbackend.py").rename(project / "fastbackend.gone")
    run = _copied_elsewhere_reproduces(out, prog, tmp_path)
    assert run.returncode == 1 and run.stdout.startswith("REPRODUCED: NotImplementedError"), (run.stdout, run.stderr[-2000:])
