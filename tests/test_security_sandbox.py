"""The replay child's sandbox holds (issue 42): a probe (tests/helpers/sandbox_probe.py) applies it in
a fresh process and tries every way out; each is blocked, and what a replay needs still works.

The same probe without the sandbox shows each attack works where nothing stops it, so a
"blocked" here is the sandbox's doing. Runs on the CPU machine in CI, and on the GPU machine
(``tests/test_gpu.py`` replays under it too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, child_env

from graphdbg.execution.sandbox import landlock_abi

PROBE = Path(__file__).parent / "helpers" / "sandbox_probe.py"
ATTACKS = ("socket AF_INET", "socket AF_INET6", "socket AF_NETLINK", "socket AF_PACKET", "socket AF_UNIX",
           "i386 int 0x80 socket", "kill outside", "ptrace attach outside", "read /proc/pid/mem outside",
           "process_vm_readv outside", "io_uring_setup", "userfaultfd", "memfd_create", "execveat",
           "unshare user namespace", "hard link outside file", "append through hard link", "rename outside file in",
           "write through a link in its folder", "write outside", "write /dev/shm")
NEEDED = ("write own folder", "write /dev/null", "socketpair AF_UNIX", "signal itself", "thread", "run a program")
# what only Landlock stops: a kernel without it leaves these open (docs/security.md)
LANDLOCK_ONLY = ("read /proc/pid/mem outside", "rename outside file in", "write outside", "write /dev/shm",
                 "write through a link in its folder")


def probe(mode: str, tmp_path: Path) -> tuple[dict[str, str], Path, subprocess.Popen]:
    own, out = tmp_path / "own", tmp_path / "outside"
    own.mkdir()
    out.mkdir()
    (out / "victim.txt").write_text("original")
    (own / "lent").symlink_to(out / "lent.txt")  # as lend_headers lends the user's headers
    (out / "lent.txt").write_text("original")
    victim = subprocess.Popen(["sleep", "120"])
    try:
        r = subprocess.run([sys.executable, str(PROBE), mode, str(own), str(out / "victim.txt"), str(victim.pid)],
                           capture_output=True, text=True, timeout=120, env=child_env(inherit=True), cwd=ROOT)  # inherit: the GPU machine's wheels (.site)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1]), out, victim
    finally:
        shm = Path(f"/dev/shm/graphdbg-probe-{tmp_path.name}")
        if shm.exists():
            shm.unlink()


def test_every_attack_works_without_the_sandbox(tmp_path):
    got, _, victim = probe("none", tmp_path)
    victim.kill()
    # the i386 entry exists only where the kernel has IA-32 emulation; the mem read only where
    # ptrace rules (Yama) let a process read its sibling
    maybe = {"i386 int 0x80 socket", "read /proc/pid/mem outside", "ptrace attach outside", "process_vm_readv outside",
             "unshare user namespace", "io_uring_setup", "userfaultfd"}
    worked = [a for a in ATTACKS if got[a].startswith("done")]
    assert set(ATTACKS) - set(worked) <= maybe, got


def test_the_sandbox_blocks_every_attack_and_keeps_what_a_replay_needs(tmp_path):
    if landlock_abi() == 0:
        pytest.skip("this kernel has no Landlock (the seccomp-only test below covers it)")
    got, out, victim = probe("full", tmp_path)
    alive = victim.poll() is None
    victim.kill()
    assert got["status"].startswith("landlock ("), got
    blocked = {a: got[a] for a in ATTACKS if not got[a].startswith("blocked")}
    assert blocked == {}, got
    if os.uname().machine == "x86_64":
        assert "SIGSYS" in got["i386 int 0x80 socket"] or "SIGSEGV" in got["i386 int 0x80 socket"], got
    assert {n: got[n] for n in NEEDED if not got[n].startswith("done")} == {}, got
    assert alive, "the sandboxed probe killed a process outside it"
    assert sorted(p.name for p in out.iterdir()) == ["lent.txt", "victim.txt"], list(out.iterdir())
    assert (out / "victim.txt").read_text() == "original" and (out / "lent.txt").read_text() == "original"
    if landlock_abi() >= 6:
        assert "signals and abstract sockets scoped" in got["status"], got


def test_a_gpu_replays_sandbox_allows_unix_sockets_and_nothing_else(tmp_path):
    if landlock_abi() == 0:
        pytest.skip("this kernel has no Landlock")
    got, out, victim = probe("gpu", tmp_path)
    victim.kill()
    assert got["socket AF_UNIX"].startswith("done"), got
    assert {a: got[a] for a in ATTACKS if a != "socket AF_UNIX" and not got[a].startswith("blocked")} == {}, got
    assert "UNIX sockets by path reachable" in got["status"], got


def test_seccomp_alone_blocks_all_but_what_only_landlock_can(tmp_path):
    """What a kernel without Landlock ABI 6 (or without Landlock) still gets: the filter."""
    got, out, victim = probe("seccomp", tmp_path)
    alive = victim.poll() is None
    victim.kill()
    blocked = {a: got[a] for a in ATTACKS if a not in LANDLOCK_ONLY and not got[a].startswith("blocked")}
    assert blocked == {}, got
    assert alive and {n: got[n] for n in NEEDED if not got[n].startswith("done")} == {}, got


def swaps_its_files_for_fifos(gm, example_inputs):
    """A backend (standing for a graph that escaped) that replaces the files its parent reads
    after it (its stderr, its sandbox note) by FIFOs nobody writes, then dies."""
    import signal

    here = Path(os.environ["GRAPHDBG_SANDBOX_DIR"]).parent
    for name in ("stderr.txt", "sandbox.txt"):
        (here / name).unlink(missing_ok=True)
        os.mkfifo(here / name)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_child_that_leaves_fifos_for_its_parent_does_not_hang_it(fixture_copy, tmp_path):
    dump = fixture_copy("block_compile_error")
    env = child_env(Path(__file__).parent, inherit=True, GRAPHDBG_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "graphdbg", "replay", str(dump), "--backend",
                        "test_security_sandbox:swaps_its_files_for_fifos", "--json", "--timeout", "100"],
                       capture_output=True, text=True, timeout=200, env=env, cwd=tmp_path)
    out = json.loads(r.stdout)
    assert out["status"] == "crash" and out["signature"] == "Signal SIGKILL", out
    assert r.returncode not in (2, 3) and "Traceback" not in r.stderr, r.stderr[-2000:]  # 4: not the captured failure
