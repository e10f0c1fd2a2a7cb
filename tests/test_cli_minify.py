"""The minify, bisect and export-test commands, driven through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, child_env

import graphdbg


@pytest.mark.slow
def test_minify_writes_a_small_dump_and_a_standalone_repro(tmp_path, cli):
    out = tmp_path / "min"
    r = cli("minify", FIXTURES / "block_compile_error", "-o", out, "--trust-backend", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["start_nodes"] == 50 and data["final_nodes"] <= 3
    assert data["signature"] == "NotImplementedError: no lowering for gelu"
    assert data["oracle_queries"] < 20 and [s["pass_name"] for s in data["steps"]]
    small = graphdbg.load(data["out"])
    assert "gelu" in small.source and small.node_count == data["final_nodes"]
    repro = next(out.rglob("repro.py"))
    # the repro runs with torch alone: graphdbg is not importable from where it runs
    done = subprocess.run([sys.executable, str(repro)], cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-2000:]


def test_bisect_passes_names_the_breaking_pass(cli):
    r = cli("bisect", "passes", FIXTURES / "block_compile_error", "--backend", "eager",
            "--passes", "passes_for_tests:clone_output,passes_for_tests:gelu_to_relu", "--json")
    assert r.code == 4, r  # a mismatch, where the dump captured a crash: it fails differently
    found = json.loads(r.out)
    assert found["culprit"] == "passes_for_tests:gelu_to_relu" and found["fails_differently"] and found["captured"]


def test_bisect_nodes_names_the_first_diverging_node_with_its_source(cli):
    r = cli("bisect", "nodes", FIXTURES / "block_accuracy", "--backend", "fixtures.programs:bad_rewrite_backend", "--json")
    assert r.code == 1, r
    data = json.loads(r.out)
    assert data["source"].endswith("programs.py:31") and data["module"] == "norm1"
    assert "x * torch.rsqrt(var + self.eps) * self.weight" in data["code"]


@pytest.mark.slow
def test_export_test(tmp_path, cli):
    test_file = tmp_path / "test_gelu_regression.py"
    r = cli("export-test", "--no-self-check", FIXTURES / "block_compile_error", "-o", test_file, "--trust-backend")
    assert r.code == 0 and test_file.exists(), r
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-2000:]


@pytest.mark.slow
def test_minify_a_stream_failure_to_the_wait(tmp_path, cli):
    """The captured Thunder stream failure (a real CUDA dump), with a CPU backend that fails the same way."""
    out = tmp_path / "min"
    r = cli("minify", "--no-self-check", FIXTURES / "cuda_streams_thunder", "--backend", "backends_for_tests:refuses_wait_stream", "-o", out, "--json")
    assert r.code == 0, r
    assert "checked:" not in r.err and "checking" not in r.err, r.err  # the repro is run below, not by minify
    data = json.loads(r.out)
    assert data["final_nodes"] <= 4 and data["signature"] == "AssertionError: Failed to find method wait_stream"
    small = graphdbg.load(data["out"])
    assert "wait_stream" in small.source and "linear" not in small.source
    done = subprocess.run([sys.executable, str(out / "repro.py")], cwd=tmp_path,
                          env=child_env(graphdbg=False, tests=True), capture_output=True, text=True, timeout=240)
    assert done.returncode == 1 and "REPRODUCED" in done.stdout + done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_minify_keeps_the_captured_bug_under_another_backend(tmp_path, cli):
    # The dump recorded "no lowering for gelu"; this backend breaks the graph another way.
    other = "fixtures.programs:broken_transpose_backend"
    r = cli("minify", "--no-self-check", FIXTURES / "block_compile_error", "--backend", other, "-o", tmp_path / "a", "--json")
    assert r.code == 2, r
    assert "fails differently from the captured failure" in r.err and "--any-failure" in r.err
    assert not (tmp_path / "a").exists()
    r = cli("minify", "--no-self-check", FIXTURES / "block_compile_error", "--backend", other, "--any-failure", "-o", tmp_path / "b", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["final_nodes"] < data["start_nodes"] and "gelu" not in (data["signature"] or "")


@pytest.mark.slow
def test_a_saved_backward_dump_keeps_backward_in_its_name(tmp_path):
    """minify saves its smallest graph with Case.save: a training failure's stage stays in the
    dump's id (g0-backward-compile_error-<hash>), as capture named it, for the backward graph and
    for the forward whose failure was in its backward."""
    from fixtures.training import BackwardLoweringError, gelu_refusing_backend, mlp, train_steps

    model, x = mlp()
    with pytest.raises(BackwardLoweringError):
        train_steps(model, x, backend=graphdbg.capture(gelu_refusing_backend, tmp_path / "dumps"))
    (dump,) = [p.parent for p in (tmp_path / "dumps").glob("rank*/*/manifest.json")]
    assert "-backward-" in dump.name
    for which, source in (("backward", dump), ("forward", dump / "forward")):
        saved = graphdbg.load(source).case().save(tmp_path / which)
        assert saved.name.startswith("g0-backward-compile_error-"), (which, saved.name)
    saved = graphdbg.load(FIXTURES / "block_compile_error").case().save(tmp_path / "plain")
    assert saved.name.startswith("g0-compile_error-"), saved.name
