"""The user's program must not change under ``graphdbg capture`` (issue 27), on model families
not used elsewhere in the tests (OPT here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "helpers" / "real_programs.py"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["forward", "backward_compile", "backward_run", "nested"])
def test_traceback_under_capture_is_frame_for_frame_the_users(tmp_path, scenario):
    pytest.importorskip("transformers")
    plain = _run([sys.executable, str(PROGRAMS), scenario], tmp_path)
    captured = _run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "-o", str(tmp_path / "dumps"), "--",
                     sys.executable, str(PROGRAMS), scenario], tmp_path)
    assert plain.returncode == 0 and captured.returncode == 0, (plain.stderr[-2000:], captured.stderr[-2000:])
    want = json.loads(plain.stdout.strip().splitlines()[-1])
    got = json.loads(captured.stdout.strip().splitlines()[-1])
    assert want, "the scenario must fail"
    assert got == want
    assert list((tmp_path / "dumps").glob("rank*/*")), captured.stderr[-2000:]  # and graphdbg did capture it


@pytest.mark.slow
def test_a_segfault_under_capture_dies_by_the_same_signal_and_its_dump_replays(tmp_path, cli):
    """Qwen2 whose compiled code segfaults, with the backend defined in the user's script."""
    pytest.importorskip("transformers")
    plain = _run([sys.executable, str(PROGRAMS), "segfault"], tmp_path)
    dumps = tmp_path / "dumps"
    captured = _run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "-o", str(dumps), "--",
                     sys.executable, str(PROGRAMS), "segfault"], tmp_path)
    assert plain.returncode == -signal.SIGSEGV, plain.stderr[-2000:]
    assert captured.returncode == plain.returncode, captured.stderr[-2000:]  # not 139: the same death
    [dump] = sorted(p for p in dumps.glob("rank*/*") if p.is_dir())
    manifest = json.loads((dump / "manifest.json").read_text())
    assert manifest["backend"] == "__main__:segfaults_when_called"
    assert manifest["backend_source"]["script"] == str(PROGRAMS)  # the armed crash dump knows the script
    r = cli("ls", dumps, "--json")
    assert r.code == 0 and json.loads(r.out)["groups"][0]["signature"] == "Signal SIGSEGV", r
    r = cli("ls", dumps)
    assert "Signal SIGSEGV" in r.out, r
    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == "Signal SIGSEGV", r


@pytest.mark.slow
def test_forward_replayed_with_backward_reaches_the_backward_dumps_failure(tmp_path, cli):
    """ViT training step whose backward compiler (defined in the script, inside aot_autograd) has no
    kernel for gelu_backward: the backward dump and its forward, replayed with --backward, give the
    same failure."""
    pytest.importorskip("transformers")
    dumps = tmp_path / "dumps"
    captured = _run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "-o", str(dumps), "--",
                     sys.executable, str(PROGRAMS), "vit_training_step"], tmp_path)
    assert captured.returncode == 1 and "no kernel for aten.gelu_backward" in captured.stderr, captured.stderr[-2000:]
    [dump] = sorted(p for p in dumps.glob("rank*/*") if p.is_dir())
    assert "backward-compile_error" in dump.name
    want = "NotImplementedError: no kernel for aten.gelu_backward"
    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == want, r
    r = cli("replay", dump / "forward", "--backward", "--trust-backend", "--json")
    assert r.code == 1, r
    out = json.loads(r.out)
    assert (out["signature"], out["stage"], out["reproduces"]) == (want, "backward", True), out


@pytest.mark.slow
def test_repro_and_exported_test_of_a_boxed_backward_from_the_users_script(tmp_path, cli):
    """GPT-NeoX training step whose backward compiler (defined in the script) returns boxed code
    that fails when it runs: minify's repro.py loads the backend from the script's file (its
    definitions only) and calls the compiled backward with one list, from any folder; the
    exported test fails while the bug is there."""
    pytest.importorskip("transformers")
    dumps = tmp_path / "dumps"
    captured = _run([sys.executable, "-m", "graphdbg.ui.cli", "capture", "-o", str(dumps), "--",
                     sys.executable, str(PROGRAMS), "neox_training_step"], tmp_path)
    want = "RuntimeError: gelu_backward kernel: invalid configuration argument"
    assert captured.returncode == 1 and want in captured.stderr, captured.stderr[-2000:]
    [dump] = sorted(p for p in dumps.glob("rank*/*") if p.is_dir())
    assert "backward-runtime_error" in dump.name
    r = cli("replay", dump, "--trust-backend", "--json")
    assert r.code == 1 and json.loads(r.out)["signature"] == want, r
    r = cli("minify", "--no-self-check", dump, "--trust-backend", "--out", tmp_path / "min", "--json")
    assert r.code == 0 and json.loads(r.out)["final_nodes"] < json.loads(r.out)["start_nodes"], r
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # torch only: no graphdbg, no tests/ on the path
    run = subprocess.run([sys.executable, str(tmp_path / "min" / "repro.py")], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stdout.startswith("REPRODUCED: " + want), (run.stdout, run.stderr[-2000:])
    r = cli("export-test", "--no-self-check", dump, "--out", tmp_path / "et" / "test_neox.py", "--trust-backend")
    assert r.code == 0, r
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "et" / "test_neox.py")],
                          cwd=elsewhere, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert test.returncode == 1 and "gelu_backward kernel" in test.stdout, test.stdout[-3000:]
