"""Nothing a dump names reaches a file graphdbg writes unless the user trusted it (issue 51,
section 2): repro.py, repro_kernels.py, an exported test and its data folder, a carried backend.

Each hostile manifest names modules (one inside the dump, a standard-library one, one outside
the dump beside a secret), folders and kernel source with code after the function; every file
written is scanned byte by byte, and the repro is run in a subprocess: no marker appears.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, child_env

import graphdbg
from graphdbg.minify.repro import write_repro

SECRET = "victim-SECRET-4711"
MARKER = "GRAPHDBG_PWNED"


def _plant(dump: Path, marker: Path, victim: Path) -> None:
    """The dump names hostile modules: ``pwnmod`` (a file of its own that writes the marker),
    ``this`` (the standard library), ``victim_settings`` (a file outside the dump, with a
    secret), and records the victim's folder as where its backend was imported from."""
    (dump / "pwnmod.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (dump / "evil").mkdir(exist_ok=True)
    (dump / "evil" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    victim.mkdir(parents=True, exist_ok=True)
    (victim / "victim_settings.py").write_text(f"PASSWORD = {SECRET!r}\n\ndef broken_transpose_backend(gm, inputs):\n"
                                               "    return gm.forward\n")
    data = json.loads((dump / "manifest.json").read_text())
    data["custom_ops"] = [{"name": f"{ns}::op", "module": m, "schema": f"{ns}::op(Tensor x) -> Tensor", "calls": 1}
                          for ns, m in (("pwn", "pwnmod"), ("ev", "evil"), ("stdlib", "this"), ("vic", "victim_settings"),
                                        ("abs", str(dump / "pwnmod.py")), ("up", "..victim_settings"))]
    data["backend_source"] = {**(data.get("backend_source") or {}), "path": str(victim)}
    (dump / "manifest.json").write_text(json.dumps(data))


def _written(folder: Path, code_only: bool = False) -> bytes:
    """Every file under ``folder``; ``code_only``: but a minified dump's manifest, data that records where it came from."""
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not (code_only and p.name == "manifest.json"))


def _assert_clean(out: Path, dump: Path, victim: Path) -> None:
    names = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert not {"pwnmod.py", "victim_settings.py", "this.py", "__init__.py"} & set(names), names
    blob = _written(out, code_only=True)
    for bad in (SECRET.encode(), b"pwnmod", b"import_module('this')", b"import_module('evil')",
                b"import_module('victim_settings')", str(dump).encode(), str(victim).encode(), MARKER.encode()):
        assert bad not in blob, (bad, names)


def _run(repro: Path, cwd: Path, *paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(repro)], cwd=cwd, env=child_env(*paths, graphdbg=False, tests=False),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # the repro run in a subprocess
def test_a_repro_takes_no_module_folder_or_file_the_manifest_names(fixture_copy, tmp_path, monkeypatch):
    dump = fixture_copy("block_runtime_error")
    marker, victim = tmp_path / MARKER, tmp_path / "victim"
    _plant(dump, marker, victim)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    case = graphdbg.load(dump).case("cpu")
    out = write_repro(case, "victim_settings:broken_transpose_backend", work / "min" / "repro.py", outcome=case.run("eager"))
    _assert_clean(out.parent, dump, victim)
    assert "'victim_settings:broken_transpose_backend'" in out.read_text()  # the user's name, imported by name
    done = _run(out, work)
    assert not marker.exists(), done.stdout + done.stderr


def test_the_folder_a_dump_records_is_looked_in_only_under_the_users_folder(fixture_copy, tmp_path, monkeypatch):
    """The dump records where its backend module was; a module there is copied only when that
    folder is the user's (under the working folder) and not inside the dump."""
    dump = fixture_copy("block_runtime_error")
    marker = tmp_path / MARKER
    _plant(dump, marker, dump / "inside")  # the recorded folder is inside the dump
    monkeypatch.chdir(tmp_path)
    case = graphdbg.load(dump).case("cpu")
    out = write_repro(case, "victim_settings:broken_transpose_backend", tmp_path / "min" / "repro.py", outcome=case.run("eager"))
    assert not (out.parent / "victim_settings.py").exists()
    assert SECRET.encode() not in _written(out.parent) and b"inside" not in _written(out.parent)
    # the user's own folder: the module the user named is copied from there
    own = tmp_path / "mine"
    _plant(dump, marker, own)
    case = graphdbg.load(dump).case("cpu")
    out = write_repro(case, "victim_settings:broken_transpose_backend", tmp_path / "min2" / "repro.py", outcome=case.run("eager"))
    assert (out.parent / "victim_settings.py").is_file()


def test_an_exported_test_and_its_data_folder_take_nothing_the_manifest_names(fixture_copy, tmp_path, monkeypatch, cli):
    dump = fixture_copy("block_runtime_error")
    marker, victim = tmp_path / MARKER, tmp_path / "victim"
    _plant(dump, marker, victim)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = cli("export-test", dump, "-o", work / "tests" / "test_bug.py", "--backend", "victim_settings:broken_transpose_backend",
            "--no-self-check")
    assert r.code == 0, r
    out = work / "tests"
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert set(names) == {"test_bug.py", "test_bug_data/graph.py", "test_bug_data/inputs.safetensors",
                          "test_bug_data/manifest.json"}, names
    code = b"".join((out / n).read_bytes() for n in names if not n.endswith("manifest.json"))
    assert SECRET.encode() not in code and b"pwnmod" not in code and str(victim).encode() not in code


# -- a recorded Triton kernel: the one def, nothing after it, and only with --trust-kernels -------------------------

_TRAILER = "\nimport os\nopen(os.environ['GRAPHDBG_TEST_MARKER'], 'w').write('pwned')\n"
_SOURCE = "def relu_kernel(X, Y, n, BLOCK: tl.constexpr):\n    pass\n"


def _kernel_dump(root: Path, source: str) -> Path:
    from kernel_programs import relu_kernel_dump

    return relu_kernel_dump(root, source)


def _fake_triton(folder: Path) -> Path:
    """A ``triton`` that imports (jit is the identity): what the repro's kernels module runs is then Python's to see."""
    (folder / "triton" / "language").mkdir(parents=True)
    (folder / "triton" / "__init__.py").write_text("def jit(f):\n    return f\n\ndef autotune(**k):\n    return jit\n\n"
                                                   "class Config:\n    def __init__(self, *a, **k):\n        pass\n")
    (folder / "triton" / "language" / "__init__.py").write_text("constexpr = int\n")
    return folder


@pytest.mark.parametrize("source", [
    pytest.param(_SOURCE + _TRAILER, marks=pytest.mark.slow),  # statements after the function (run: slow)
    _SOURCE + "\n\nprint('GRAPHDBG_AFTER')\n",  # the same, only scanned
    "import os\nos.system('true')\n" + _SOURCE,  # before it
    "@__import__('os').system('touch /tmp/x')\n" + _SOURCE,  # a decorator that calls
    pytest.param("def relu_kernel(X, Y, n, BLOCK=open(__import__('os').environ['GRAPHDBG_TEST_MARKER'], 'w')):\n    pass\n",
                 marks=pytest.mark.slow),  # a default
    "def relu_kernel(X, Y, n: __import__('os').getcwd(), BLOCK=1):\n    pass\n",  # an annotation
    _SOURCE.replace("    pass\n", "    pass\x0c\n") + _TRAILER,  # a form feed: no line of its own to Python
])
def test_a_kernels_source_is_its_one_def_and_only_with_trust_kernels(tmp_path, source, monkeypatch):
    marker = tmp_path / MARKER
    monkeypatch.setenv("GRAPHDBG_TEST_MARKER", str(marker))
    dump = _kernel_dump(tmp_path / "dumps", source)
    assert graphdbg.load(dump).manifest_data["triton_kernels"][0]["source"] == source  # recorded as it was: data
    case = graphdbg.load(dump).case("cpu")
    plain = write_repro(case, "eager", tmp_path / "plain" / "repro.py")
    assert not (plain.parent / "repro_kernels.py").exists()  # no trust: no text of the dump's
    trusted = write_repro(graphdbg.load(dump).case("cpu"), "eager", tmp_path / "trusted" / "repro.py", trust_kernels=True)
    kernels = trusted.parent / "repro_kernels.py"
    for folder in (plain.parent, trusted.parent):
        blob = _written(folder)
        assert b"GRAPHDBG_TEST_MARKER" not in blob and b"os.system" not in blob and b"__import__('os')" not in blob
        assert b"GRAPHDBG_AFTER" not in blob
    if kernels.exists():  # the def alone, decorated by graphdbg
        assert "@triton.jit\ndef relu_kernel(X, Y, n, BLOCK: tl.constexpr):\n    pass" in kernels.read_text()
    if source == _SOURCE + _TRAILER or "BLOCK=open(" in source:  # run: no marker
        stub = _fake_triton(tmp_path / "stub")
        for repro in (plain, trusted):
            done = subprocess.run([sys.executable, str(repro), "--in-process"], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=300, env=child_env(stub, graphdbg=False, GRAPHDBG_TEST_MARKER=str(marker)))
            assert not marker.exists(), done.stdout + done.stderr


def test_a_clean_kernel_source_is_still_written_with_trust_kernels(tmp_path):
    dump = _kernel_dump(tmp_path / "dumps", "@triton.jit\n" + _SOURCE)  # inspect.getsource's shape: with its decorator
    out = write_repro(graphdbg.load(dump).case("cpu"), "eager", tmp_path / "min" / "repro.py", trust_kernels=True)
    text = (out.parent / "repro_kernels.py").read_text()
    assert text.count("@triton.jit\n") == 1 and "@triton.jit\n" + _SOURCE in text


# -- the whole command, as a user runs it -----------------------------------------------------------------------------

@pytest.mark.slow
def test_minify_of_a_hostile_dump_writes_nothing_it_names_and_its_repro_runs_no_marker(fixture_copy, tmp_path):
    dump = fixture_copy("block_runtime_error")
    marker, victim = tmp_path / MARKER, tmp_path / "victim"
    _plant(dump, marker, victim)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "fixtures", work / "fixtures")  # the user's backend module, in the user's folder
    done = subprocess.run([sys.executable, "-m", "graphdbg", "minify", str(dump), "--trust-backend", "-o", "min",
                           "--max-queries", "20"], cwd=work, env=child_env(graphdbg=True), capture_output=True, text=True,
                          timeout=600)
    assert (work / "min" / "repro.py").is_file(), done.stderr[-3000:]
    _assert_clean(work / "min", dump, victim)
    assert not marker.exists(), done.stderr[-2000:]
    ran = _run(work / "min" / "repro.py", work)
    assert ran.returncode == 1 and not marker.exists(), ran.stdout + ran.stderr
