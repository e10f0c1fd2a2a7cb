from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# ls's cache (formats/ls_cache.py) in a folder of this run's, never the user's ~/.cache
os.environ.setdefault("GRAPHDBG_CACHE_DIR", os.path.join(__import__("tempfile").mkdtemp(prefix="graphdbg-test-cache-")))


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
def cli(capsys, monkeypatch):
    """Run the graphdbg CLI in-process, exactly as the console script does."""
    from graphdbg.ui.cli import main

    # child processes (isolated replays) import the test passes and backends by name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))

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

    return run
