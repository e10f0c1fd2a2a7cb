from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"  # backends, passes and programs the tests name as ``module:callable``

# The helpers are plain top-level modules (``backends_for_tests:refuses_gelu``), found the way a
# user's own backend module is: on sys.path here, on PYTHONPATH in child processes (child_env).
sys.path.insert(0, str(HELPERS))

# The whole printed-graph corpus of real SGLang + ThunderFX runs, bundled (fixtures/sglang-thunderfx/README.md:
# its source and licence); fixtures/corpus holds 16 of its files, for tests that want a quick folder.
SGLANG_CORPUS = FIXTURES / "sglang-thunderfx"


def child_env(*paths: Path | str, graphdbg: bool = True, tests: bool = False, inherit: bool = False, **extra: str) -> dict:
    """The environment for a child process: this checkout's graphdbg on PYTHONPATH (``graphdbg``),
    tests/helpers/ and tests/ for the backends and passes they name (``tests``), ``paths`` first;
    then the caller's PYTHONPATH, where graphdbg's own needs may lie (a ``pip install --target``
    folder, as on the GPU image), and with ``inherit`` all of it. ``graphdbg=False`` checks a file
    runs without graphdbg: no folder that holds it is passed on."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    parts = [*map(str, paths), *([str(HELPERS), str(TESTS)] if tests else []), *([str(ROOT)] if graphdbg else [])]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and (inherit or graphdbg or not (Path(entry) / "graphdbg" / "__init__.py").exists()):
            parts.append(entry)
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.update(extra)
    return env


def run_graphdbg(*args: object, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m graphdbg ARGS`` as a user runs it, in its own process (this checkout's graphdbg,
    ``env`` over the caller's environment, no ``GRAPHDBG_DUMP_DIR`` unless given), output kept."""
    full = child_env(inherit=True, **env)
    if "GRAPHDBG_DUMP_DIR" not in env:
        full.pop("GRAPHDBG_DUMP_DIR", None)
    return subprocess.run([sys.executable, "-m", "graphdbg", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full, timeout=600)


def run_pytest_files(cwd: Path, *files: Path | str, env: dict) -> tuple[subprocess.CompletedProcess[str], dict[str, str | None]]:
    """``python -m pytest FILES`` from ``cwd`` in one interpreter (one start, not one per file, for
    exported tests that are each judged on their own), and, for each file's module name, its
    failure's message and text (``None`` where it passed), read from the run's JUnit XML."""
    xml = Path(tempfile.mkdtemp(prefix="graphdbg-test-junit-")) / "out.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                          *map(str, files)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    verdicts: dict[str, str | None] = {}
    for case in ET.parse(xml).getroot().iter("testcase") if xml.is_file() else ():
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        verdicts[case.get("classname", "").rpartition(".")[2]] = None if bad is None else f"{bad.get('message')}\n{bad.text}"
    return run, verdicts


@pytest.fixture
def child_pythonpath(monkeypatch):
    """Child processes (isolated replays, torchrun ranks) import this graphdbg and the tests' backends and passes."""
    monkeypatch.setenv("PYTHONPATH", child_env(tests=True, inherit=True)["PYTHONPATH"])
# ls's cache (listing/cache.py) in a folder of this run's, never the user's ~/.cache
os.environ.setdefault("GRAPHDBG_CACHE_DIR", os.path.join(tempfile.mkdtemp(prefix="graphdbg-test-cache-")))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def replay_children(monkeypatch) -> list[int]:
    """The process ids of the isolated replays' children started while the test runs."""
    from graphdbg.execution import isolation

    children: list[int] = []

    class Counted(isolation.ChildGroup):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            children.append(self.proc.pid)

    monkeypatch.setattr(isolation, "ChildGroup", Counted)
    return children


@pytest.fixture
def fixture_copy(tmp_path):
    """Copy a committed fixture dump somewhere a test may damage it; returns the dump folder."""

    def copy(name: str) -> Path:
        src = next((FIXTURES / name).glob("rank*/*"))
        dst = tmp_path / name / src.parent.name / src.name
        shutil.copytree(src, dst)
        return dst

    return copy


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


@pytest.fixture
def cli(capsys, monkeypatch, child_pythonpath):
    """Run the graphdbg CLI in-process, exactly as the console script does."""
    from graphdbg.__main__ import main  # here, so that conftest itself imports no graphdbg module

    environ = dict(os.environ)  # a command sets variables for its children (--ops, --trust-config, ...): undone after the test

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["graphdbg", *map(str, args)])
        monkeypatch.setenv("COLUMNS", "200")
        code = 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield run
    os.environ.clear()
    os.environ.update(environ)
