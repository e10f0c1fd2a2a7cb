"""A replay child imports what graphdbg's own process could (issue 53): graphdbg from the folder
it was imported from, and modules found through the process's ``sys.path`` (a ``pip install
--target`` folder a job script or notebook put there, where graphdbg's needs may lie), not only
what ``python -I`` leaves and ``PYTHONPATH`` names."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_an_isolated_replay_child_imports_through_the_parents_sys_path(tmp_path, cli, fixture_copy, monkeypatch):
    target = tmp_path / "target"  # a folder only sys.path names: no PYTHONPATH entry, not the current folder
    target.mkdir()
    (target / "team_dep.py").write_text("WHERE = 'team_dep from the target folder'\n")
    backends = tmp_path / "backends"
    backends.mkdir()
    (backends / "child_imports_backend.py").write_text(textwrap.dedent("""
        def fails(gm, example_inputs):
            import graphdbg
            import team_dep  # imported only here, in the child: the parent never did
            raise RuntimeError(team_dep.WHERE + ' / graphdbg from ' + graphdbg.__file__)
    """))
    monkeypatch.syspath_prepend(str(backends))
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.chdir(ROOT)  # graphdbg's folder is the current one: PYTHONPATH's entry for it is left out
    r = cli("replay", fixture_copy("block_compile_error"), "--backend", "child_imports_backend:fails", "--json")
    out = json.loads(r.out)
    assert out["isolated"] and out["status"] == "crash", out
    assert "team_dep from the target folder" in out["message"], out
    assert f"graphdbg from {Path(ROOT) / 'graphdbg' / '__init__.py'}" in out["message"], out


@pytest.mark.slow
def test_a_self_check_still_runs_a_repro_without_graphdbg(tmp_path):
    """graphdbg found by name where the parent imported it must not reach a repro's self-check,
    which checks that the file runs where graphdbg is not installed."""
    from graphdbg.minify.self_check import check_repro

    repro = tmp_path / "repro.py"
    repro.write_text("import graphdbg\nprint('REPRODUCED: ran with graphdbg')\nraise SystemExit(1)\n")
    check = check_repro(repro, timeout=120, device="cpu")
    assert not check.same and "No module named 'graphdbg'" in check.line, check
