"""Repros that check themselves: minify and export-test run what they wrote once in a fresh
interpreter, and exit 4 (keeping the file) when it does not show the captured failure."""

from __future__ import annotations

import socket
import time

import psutil
import pytest
from conftest import FIXTURES, run_graphdbg

from graphdbg.execution.sandbox import landlock_abi

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
    if landlock_abi():  # the sandbox held whole: nothing to add to the line
        assert "its sandbox on this machine" not in r.err, r.err


@pytest.mark.slow
def test_a_repro_that_fails_differently_on_its_own_exits_4_and_is_kept(tmp_path, cli, monkeypatch):
    (tmp_path / "team_backend.py").write_text(GRAPHDBG_BACKEND)
    monkeypatch.chdir(tmp_path)
    r = cli("minify", FIXTURES / "block_compile_error", "-o", "min", "--backend", "team_backend:refuses_gelu")
    assert r.code == 4, r
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("graphdbg: error: wrote min/repro.py, but run on its own in a fresh interpreter it does not show "
                           "the captured failure (NotImplementedError: no lowering for gelu): "
                           "ModuleNotFoundError: No module named 'graphdbg' (a repro graphdbg writes must run without it)"), line
    assert line.endswith("the file is kept")
    assert (tmp_path / "min" / "repro.py").is_file() and (tmp_path / "min" / "repro_inputs.pt").is_file()
    assert "Traceback" not in r.err


@pytest.mark.slow
def test_a_self_check_without_the_sandbox_says_so_on_its_line(tmp_path, cli, monkeypatch):
    """As a replay's ``sandbox`` says what a kernel without Landlock leaves open, the check's
    line does (here the sandbox is turned off, which no kernel needs)."""
    monkeypatch.setenv("GRAPHDBG_SANDBOX", "0")
    test_file = tmp_path / "test_gelu_unsandboxed.py"
    r = cli("export-test", FIXTURES / "block_compile_error", "-o", test_file, "--trust-backend")
    assert r.code == 0, r
    assert (f"checked: {test_file} run on its own: crash: NotImplementedError: no lowering for gelu "
            "(its sandbox on this machine: none (GRAPHDBG_SANDBOX=0") in r.err, r.err


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


# The self-check runs a dump's graph (untrusted): in the sandbox of a replay child. A file of
# our own that tries to get out, from its own process and from the interpreter it starts (as a
# repro starts its backend's), under pytest too; without the sandbox (GRAPHDBG_SANDBOX=0)
# each attack works, so "blocked" is the sandbox's doing.
ATTACK = '''
import os, socket, subprocess, sys


def attack(tag):
    try:
        with open({outside!r} + "/" + tag + ".txt", "w") as f:
            f.write("written from the self-check")
    except OSError:
        pass
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(tag.encode())
    except OSError:
        pass
'''
HOSTILE_REPRO = ATTACK + '''

if "--child" in sys.argv:  # the interpreter it starts (whatever flags the check passed to it)
    attack("repro_child")
    sys.exit(0)
attack("repro")
subprocess.call([sys.executable, __file__, "--child"])
print("FIXED: the attacks ran")
'''
HOSTILE_TEST = ATTACK + '''

def test_gets_out():
    attack("test")
    subprocess.call([sys.executable, "-c", {child!r}])
    assert False, "crash: RuntimeError: boom (the captured failure: RuntimeError: boom)"
'''


@pytest.fixture
def listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.setblocking(False)
        yield s


def _connections(listener) -> int:
    n = 0
    while True:
        try:
            listener.accept()[0].close()
        except BlockingIOError:
            return n
        n += 1


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "GRAPHDBG_SANDBOX=0"])
def test_a_hostile_repro_is_contained_by_the_self_check(tmp_path, listener, monkeypatch, sandboxed):
    from graphdbg.minify.self_check import check_repro

    outside = tmp_path / "outside"
    outside.mkdir()
    repro = tmp_path / "min" / "repro.py"
    repro.parent.mkdir()
    repro.write_text(HOSTILE_REPRO.format(outside=str(outside), port=listener.getsockname()[1]))
    if not sandboxed:
        monkeypatch.setenv("GRAPHDBG_SANDBOX", "0")
    check = check_repro(repro, timeout=120, device="cpu")
    assert check.line == "FIXED: the attacks ran" and check.exit_code == 0, check
    written = sorted(p.name for p in outside.iterdir())
    if not sandboxed:  # the attacks work where nothing stops them
        assert written == ["repro.txt", "repro_child.txt"] and _connections(listener) == 2, (written, check)
        assert check.sandbox.startswith("none (GRAPHDBG_SANDBOX=0") and check.weaker == check.sandbox, check
        return
    assert _connections(listener) == 0, check  # seccomp: no socket() at all, on any kernel with it
    if landlock_abi() == 0:
        assert check.sandbox.startswith("none (no Landlock") and check.weaker, check
        return
    assert written == [], check  # neither the repro nor the interpreter it started
    assert check.sandbox.startswith("landlock (") and "no sockets" in check.sandbox and check.weaker is None, check
    assert sorted(p.name for p in repro.parent.iterdir()) == ["repro.py"]  # its own folder: read, not written


def test_minify_s_check_compiles_in_the_dump_s_compile_cache_and_nowhere_else(tmp_path, fixture_copy):
    """Given the dump a repro was minified from, the check's compiler caches are that dump's, kept
    for what a self-check trusts (a file graphdbg wrote, run: apart from the dump's untrusted
    replays'), writable as for its replays; the rest stays shut."""
    from graphdbg.execution.sandbox import dump_compile_cache
    from graphdbg.minify.self_check import SELF_CHECK_TRUST, check_repro

    dump = fixture_copy("block_compile_error")
    outside = tmp_path / "outside"
    outside.mkdir()
    repro = tmp_path / "min" / "repro.py"
    repro.parent.mkdir()
    repro.write_text("import os, pathlib\n"
                     "kept = pathlib.Path(os.environ['TORCHINDUCTOR_CACHE_DIR'], 'kernel.txt')\n"
                     "kept.parent.mkdir(parents=True, exist_ok=True)\n"
                     "kept.write_text('compiled')\n"
                     "try:\n"
                     f"    open({str(outside / 'pwned.txt')!r}, 'w')\n"
                     "except OSError as e:\n"
                     "    print('REPRODUCED: ' + type(e).__name__)\n"
                     "    raise SystemExit(1)\n")
    check = check_repro(repro, timeout=120, device="cpu", dump=dump)
    assert (dump_compile_cache(str(dump), SELF_CHECK_TRUST) / "inductor" / "kernel.txt").read_text() == "compiled", check
    assert not (dump_compile_cache(str(dump)) / "inductor" / "kernel.txt").exists()  # the untrusted replays' cache
    if landlock_abi():
        assert check.same and check.line == "REPRODUCED: PermissionError" and list(outside.iterdir()) == [], check


def test_a_hostile_exported_test_is_contained_by_the_self_check(tmp_path, listener):
    from graphdbg.minify.self_check import check_exported_test

    outside = tmp_path / "outside"
    outside.mkdir()
    port = listener.getsockname()[1]
    child = ATTACK.format(outside=str(outside), port=port) + "\nattack('test_child')\n"
    test_file = tmp_path / "tests" / "test_hostile.py"
    test_file.parent.mkdir()
    test_file.write_text(HOSTILE_TEST.format(outside=str(outside), port=port, child=child))
    check = check_exported_test(test_file, kind="crash", captured="RuntimeError: boom", timeout=120, device="cpu")
    assert check.same and check.line == "crash: RuntimeError: boom", check  # pytest ran it, in the sandbox
    assert _connections(listener) == 0, check
    if landlock_abi():
        assert list(outside.iterdir()) == [] and check.sandbox.startswith("landlock ("), check
    assert sorted(p.name for p in test_file.parent.iterdir()) == ["test_hostile.py"]


@pytest.mark.slow
def test_a_self_check_ends_with_everything_the_file_started_past_its_timeout(tmp_path):
    """A repro whose backend child is stuck in a C loop (SIGTERM can't stop it, and it holds
    the output open): the check still ends at its timeout, and the child is gone."""
    from graphdbg.minify.self_check import check_repro

    repro = tmp_path / "stuck" / "repro.py"
    repro.parent.mkdir()
    repro.write_text("import subprocess, sys\n"
                     "if '--in-process' in sys.argv:\n    max(range(10**18))\n"
                     "subprocess.call([sys.executable, __file__, '--in-process'])\n")
    start = time.monotonic()
    check = check_repro(repro, timeout=3, device="cpu")
    assert time.monotonic() - start < 30 and check.line == "timed out after 3s" and check.exit_code is None, check
    left = [p for p in psutil.process_iter(["cmdline"]) if str(repro) in (p.info["cmdline"] or [])]
    assert left == [], left


def test_a_self_check_has_the_memory_cap_of_a_replay(tmp_path, monkeypatch):
    from graphdbg.minify.self_check import check_repro

    monkeypatch.setenv("GRAPHDBG_MEMORY_LIMIT_GB", "2")
    repro = tmp_path / "big" / "repro.py"
    repro.parent.mkdir()
    repro.write_text("import sys\nblock = bytearray(4 << 30)\nprint('FIXED: allocated 4 GiB')\n")
    check = check_repro(repro, timeout=120, device="cpu")
    assert check.line == "MemoryError" and check.exit_code == 1, check
    assert "memory limit 2.0 GiB" in check.sandbox, check


@pytest.mark.gpu
def test_a_gpu_self_check_runs_cuda_in_the_sandbox_of_a_gpu_replay(tmp_path, listener):
    """On a GPU machine (the device not given: this process's torch has one) the check gets a GPU
    replay's sandbox: CUDA initialises (its driver's UNIX socket, no address-space cap), and the
    file still can't write outside or reach the network."""
    from graphdbg.minify.self_check import check_repro

    outside = tmp_path / "outside"
    outside.mkdir()
    repro = tmp_path / "gpu" / "repro.py"
    repro.parent.mkdir()
    repro.write_text(ATTACK.format(outside=str(outside), port=listener.getsockname()[1]) +
                     "\nimport torch\nattack('gpu')\nx = torch.ones(4, device='cuda') * 2\n"
                     "print(f'FIXED: {x.sum().item():.0f} on cuda')\n")
    check = check_repro(repro, timeout=300)
    assert check.line == "FIXED: 8 on cuda" and check.exit_code == 0, check
    assert "no sockets but unix ones" in check.sandbox and "no memory limit" in check.sandbox, check
    assert _connections(listener) == 0, check
    if landlock_abi():
        assert list(outside.iterdir()) == [], check


RECORDS_HOW_IT_RAN = '''
import sys
print("REPRODUCED: started " + ("in-process" if "--in-process" in sys.argv else "as the user starts it"))
sys.exit(1)
'''


def test_the_repro_runs_its_backend_in_the_sandboxed_process_unless_a_signal_was_captured(tmp_path):
    """On a GPU, CUDA's driver may write only the launcher's own /proc entries under the sandbox: a
    child the repro started would see no GPU. A captured signal or timeout keeps the child, whose
    death is the answer."""
    from graphdbg.minify.self_check import check_repro

    repro = tmp_path / "repro.py"
    repro.write_text(RECORDS_HOW_IT_RAN)
    for device in ("cuda:0", "cpu"):
        assert check_repro(repro, device=device, captured="RuntimeError: x").line == "REPRODUCED: started in-process"
        for captured in ("Signal SIGSEGV", "Timeout after 5s"):
            assert check_repro(repro, device=device, captured=captured).line == "REPRODUCED: started as the user starts it"


RECORDS_WHERE_IT_REPLAYS = '''
from graphdbg.execution.executor import InProcess, executor_for
from graphdbg.replay.options import ReplayOptions


def test_where():
    where = "in the launcher" if isinstance(executor_for(ReplayOptions(isolate=True)), InProcess) else "in a child"
    message = "crash: RuntimeError: replayed " + where + " (the captured" + " failure: x)"  # split: pytest shows this line too
    assert False, message
'''


def test_an_exported_tests_replay_runs_in_the_sandboxed_launcher_unless_a_signal_was_captured(tmp_path):
    """The exported test's isolated replay runs in the self-check's sandboxed launcher (one
    interpreter and torch import fewer), as a repro's backend does; a captured signal or
    timeout keeps its child, whose death is the answer."""
    from graphdbg.minify.self_check import check_exported_test

    test_file = tmp_path / "test_where.py"
    test_file.write_text(RECORDS_WHERE_IT_REPLAYS)
    check = check_exported_test(test_file, kind="crash", captured="RuntimeError: x", timeout=120, device="cpu")
    assert check.line == "crash: RuntimeError: replayed in the launcher", check
    for captured in ("Signal SIGSEGV", "Timeout after 5s"):
        check = check_exported_test(test_file, kind="crash", captured=captured, timeout=120, device="cpu")
        assert check.line == "crash: RuntimeError: replayed in a child", check


# A captured signal is the captured failure however the process that dies of it ends on this
# torch: killed by it (-11), through a shell (128 + 11), or exiting 1 after a handler reported it.
DIES = {"killed": "import ctypes\nctypes.string_at(0)\n",
        "shell": "import sys\nsys.exit(139)\n",
        "reported": "import sys\nsys.stderr.write('Fatal Python error: Segmentation fault\\n\\nCurrent thread 0x00007f:\\n')\nsys.exit(1)\n"}


def test_the_three_ends_of_a_process_that_died_of_a_signal_read_as_that_signal():
    from graphdbg.judge.fatal_signal import died_of

    assert died_of(-11) == died_of(139) == died_of(1, "Fatal Python error: Segmentation fault\n\nStack:") == "SIGSEGV"
    assert died_of(1, "...\n*** received signal SIGBUS\n") == "SIGBUS" and died_of(-6) == died_of(134) == "SIGABRT"
    for not_a_signal in ((0, ""), (1, ""), (2, "RuntimeError: boom"), (1, "FAILED DIFFERENTLY: RuntimeError: x"), (None, ""), (200, "")):
        assert died_of(*not_a_signal) is None, not_a_signal


@pytest.mark.parametrize("how", sorted(DIES))
def test_a_repro_that_dies_of_the_captured_signal_shows_the_captured_failure(tmp_path, how):
    from graphdbg.minify.self_check import check_repro

    repro = tmp_path / "repro.py"
    repro.write_text(DIES[how])
    check = check_repro(repro, captured="Signal SIGSEGV", timeout=120, device="cpu")
    assert check.same and check.line.startswith("REPRODUCED: Signal SIGSEGV"), check
    check = check_repro(repro, captured="Signal SIGABRT", timeout=120, device="cpu")
    assert not check.same and check.line.startswith("FAILED DIFFERENTLY: Signal SIGSEGV"), check
    check = check_repro(repro, captured="RuntimeError: x", timeout=120, device="cpu")  # runs it --in-process: the same death
    assert not check.same and check.line.startswith("FAILED DIFFERENTLY: Signal SIGSEGV"), check


def test_an_exported_test_that_dies_of_the_captured_signal_shows_the_captured_failure(tmp_path):
    from graphdbg.minify.self_check import check_exported_test

    test_file = tmp_path / "test_dies.py"
    test_file.write_text("def test_dies():\n    import ctypes\n    ctypes.string_at(0)\n")
    check = check_exported_test(test_file, kind="crash", captured="Signal SIGSEGV", timeout=120, device="cpu")
    assert check.same and check.line.startswith("crash: Signal SIGSEGV"), check


SEGFAULTING_BACKEND = '''
import ctypes


def compile_fn(gm, example_inputs):
    """A backend whose compiled code dies of SIGSEGV when it runs."""
    def run(*args):
        ctypes.string_at(0)
        return gm.forward(*args)
    return run
'''


@pytest.mark.slow
def test_minify_s_self_check_of_a_segfaulting_backend_counts_the_signal_as_the_captured_failure(tmp_path, monkeypatch):
    (tmp_path / "segv_backend.py").write_text(SEGFAULTING_BACKEND)
    r = run_graphdbg("minify", FIXTURES / "block_compile_error", "--backend", "segv_backend:compile_fn", "--any-failure",
                     "-o", "min", "--max-queries", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "crash: Signal SIGSEGV" in r.stdout, r.stdout
    assert "checked: min/repro.py run on its own: REPRODUCED: Signal SIGSEGV" in r.stderr, r.stderr[-3000:]
