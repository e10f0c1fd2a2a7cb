"""Repros that check themselves: minify and export-test run what they wrote once in a fresh
interpreter, and exit 4 (keeping the file) when it does not show the captured failure."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

GRAPHDBG_BACKEND = '''
import graphdbg  # a team's backend that wraps itself for capture: its repro would need graphdbg


def refuses_gelu(gm, example_inputs):
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "__name__", "") == "gelu":
            raise NotImplementedError("no lowering for gelu")
    return gm.forward
'''


@pytest.mark.slow
def test_minify_checks_its_repro_in_a_fresh_interpreter(tmp_path, cli):
    out = tmp_path / "min"
    r = cli("minify", FIXTURES / "block_compile_error", "-o", out, "--trust-backend")
    assert r.code == 0, r
    assert f"checked: {out / 'repro.py'} run on its own: REPRODUCED: NotImplementedError: no lowering for gelu" in r.err


@pytest.mark.slow
def test_a_repro_that_fails_differently_on_its_own_exits_4_and_is_kept(tmp_path, cli, monkeypatch):
    (tmp_path / "team_backend.py").write_text(GRAPHDBG_BACKEND)
    monkeypatch.chdir(tmp_path)
    r = cli("minify", FIXTURES / "block_compile_error", "-o", "min", "--backend", "team_backend:refuses_gelu")
    assert r.code == 4, r
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("graphdbg: error: wrote min/repro.py, but run on its own in a fresh interpreter it does not show "
                           "the captured failure (NotImplementedError: no lowering for gelu): FAILED DIFFERENTLY: "
                           "ModuleNotFoundError: No module named 'graphdbg'"), line
    assert line.endswith("the file is kept")
    assert (tmp_path / "min" / "repro.py").is_file() and (tmp_path / "min" / "repro_inputs.pt").is_file()
    assert "Traceback" not in r.err


@pytest.mark.slow
def test_export_test_checks_the_test_fails_the_captured_way(tmp_path, cli):
    test_file = tmp_path / "test_gelu_regression.py"
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", test_file, "--trust-backend")
    assert r.code == 0, r
    assert f"checked: {test_file} run on its own: crash: NotImplementedError: no lowering for gelu" in r.err
    # a backend that does not have this bug: the exported test would pass from day one
    passing = tmp_path / "test_already_fixed.py"
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", passing, "--backend", "eager")
    assert r.code == 4, r
    assert "the exported test passes (the failure is not there); the file is kept" in r.err
    assert passing.is_file()
