"""The torch versions graphdbg is tested on are declared once (``graphdbg._version.TESTED_TORCH``);
on any other torch graphdbg says so once, in one line, and goes on (issue 53)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import child_env

from graphdbg._version import TESTED_TORCH


def _graphdbg_with_torch_metadata(tmp_path, version: str) -> subprocess.CompletedProcess[str]:
    """``graphdbg ls`` where the installed torch's metadata says ``version``."""
    meta = tmp_path / "meta" / f"torch-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (tmp_path / "empty").mkdir()
    env = child_env(tmp_path / "meta", GRAPHDBG_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("GRAPHDBG_TORCH_SAID", None)
    return subprocess.run([sys.executable, "-m", "graphdbg", "ls", str(tmp_path / "empty")], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_an_untested_torch_is_named_once_in_one_line(tmp_path):
    r = _graphdbg_with_torch_metadata(tmp_path, "2.9.1")
    said = [line for line in r.stderr.splitlines() if "untested" in line]
    assert said == [f"graphdbg: torch 2.9.1 is untested (tested: {', '.join(TESTED_TORCH)}); "
                    "if something fails, say which torch you ran"], r.stderr
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_a_tested_torch_says_nothing(tmp_path):
    r = _graphdbg_with_torch_metadata(tmp_path, f"{TESTED_TORCH[0]}.0+cu130")
    assert "untested" not in r.stderr and r.returncode == 0, r.stderr
