"""Run by tests/test_security_sandbox.py in a fresh process: apply the replay child's sandbox,
then try every way out and print one JSON object, {probe: what happened}.

    python sandbox_probe.py MODE OWN_FOLDER OUTSIDE_FILE OUTSIDE_PID

MODE ``full`` applies ``apply_sandbox`` as a CPU replay's child does, ``gpu`` as a GPU
replay's (``AF_UNIX`` sockets allowed: CUDA's driver needs one); ``seccomp`` only the seccomp
filter with signals scoped by it (what a kernel without Landlock ABI 6 gets); ``none`` nothing
(the probe's own check that each attack works where nothing stops it).
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import platform
import signal
import socket
import sys
import threading
from pathlib import Path

from graphdbg.execution import sandbox

mode, own, outside, victim_pid = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
machine = platform.machine()
NR = sandbox._NR[machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
results: dict[str, str] = {}


def attempt(name: str, fn) -> None:
    try:
        out = fn()
    except OSError as e:
        results[name] = f"blocked: {errno.errorcode.get(e.errno, e.errno)}" + (f" ({e.strerror})" if e.strerror and
                                                                                 e.strerror.startswith("killed") else "")
    except Exception as e:
        results[name] = f"blocked: {type(e).__name__}"
    else:
        results[name] = f"done: {out}"


def syscall(name: str, *args: int) -> int:
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


if mode in ("full", "gpu"):
    status = sandbox.apply_sandbox([own], unix=mode == "gpu")
elif mode == "seccomp":
    sandbox.no_new_privs()
    sandbox.install_seccomp(scope_signals=True)
    status = "seccomp only"
else:
    status = "none"
results["status"] = status

for family, kind in (("AF_INET", socket.SOCK_DGRAM), ("AF_INET6", socket.SOCK_STREAM), ("AF_NETLINK", socket.SOCK_RAW),
                     ("AF_PACKET", socket.SOCK_RAW), ("AF_UNIX", socket.SOCK_STREAM)):
    attempt(f"socket {family}", lambda f=family, k=kind: socket.socket(getattr(socket, f), k).fileno())


def i386_socket() -> str:
    """``socket(AF_INET, SOCK_DGRAM)`` through the i386 entry (``int 0x80``, call 359), from
    machine code in an executable page; run in a forked child, which the filter may kill."""
    if machine != "x86_64":
        return "n/a (not x86_64)"
    code = bytes([0x53, 0xB8, 0x67, 0x01, 0x00, 0x00, 0xBB, 0x02, 0x00, 0x00, 0x00, 0xB9, 0x02, 0x00, 0x00, 0x00,
                  0x31, 0xD2, 0xCD, 0x80, 0x5B, 0xC3])  # push rbx; mov eax,359; mov ebx,2; mov ecx,2; xor edx,edx; int 0x80; pop rbx; ret
    pid = os.fork()
    if pid == 0:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
        fd = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
        os._exit(0 if fd >= 0 else 3)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        raise OSError(errno.EPERM, f"killed by {signal.Signals(os.WTERMSIG(st)).name}")
    if os.WEXITSTATUS(st) == 3:
        raise OSError(errno.EACCES, "refused")
    return "a socket through the i386 entry"


attempt("i386 int 0x80 socket", i386_socket)
attempt("kill outside", lambda: os.kill(victim_pid, signal.SIGTERM))
attempt("ptrace attach outside", lambda: syscall("ptrace", 16, victim_pid, 0, 0))


def read_mem() -> int:
    start = int(Path(f"/proc/{victim_pid}/maps").read_text().split("-", 1)[0], 16)  # its first mapped address
    with open(f"/proc/{victim_pid}/mem", "rb") as f:
        f.seek(start)
        return len(f.read(16))


attempt("read /proc/pid/mem outside", read_mem)
attempt("process_vm_readv outside", lambda: syscall("process_vm_readv", victim_pid, 0, 0, 0, 0, 0))
PARAMS = ctypes.create_string_buffer(120)  # struct io_uring_params, kept alive while the kernel fills it
attempt("io_uring_setup", lambda: syscall("io_uring_setup", 8, ctypes.addressof(PARAMS)))
attempt("userfaultfd", lambda: syscall("userfaultfd", 0))
attempt("memfd_create", lambda: os.memfd_create("x"))


def in_fork(fn) -> str:
    """Run ``fn`` in a forked child (what it changes stays there); its errno, else "done"."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except OSError as e:
            os._exit(e.errno or 1)
        os._exit(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        raise OSError(code, os.strerror(code) if code > 0 else f"killed by {signal.Signals(-code).name}")
    return "done"


TRUE = ctypes.create_string_buffer(b"/bin/true")
ARGV = (ctypes.c_char_p * 2)(b"/bin/true", None)
attempt("execveat", lambda: in_fork(lambda: syscall("execveat", -100, ctypes.addressof(TRUE), ctypes.addressof(ARGV), 0, 0)))
attempt("unshare user namespace", lambda: in_fork(lambda: syscall("unshare", 0x10000000)))
attempt("hard link outside file", lambda: os.link(outside, own / "linked"))
attempt("append through hard link", lambda: open(own / "linked", "r+b").seek(0, 2))  # noqa: SIM115
attempt("rename outside file in", lambda: os.rename(outside, own / "moved"))
attempt("write through a link in its folder", lambda: open(own / "lent", "ab").write(b"changed"))  # noqa: SIM115
attempt("write outside", lambda: (outside.parent / "new.txt").write_text("x"))
attempt("write /dev/shm", lambda: Path(f"/dev/shm/graphdbg-probe-{own.parent.name}").write_text("x"))
# what a replay needs still works
attempt("write own folder", lambda: (own / "mine.txt").write_text("ok"))
attempt("write /dev/null", lambda: Path("/dev/null").write_text("ok"))
attempt("socketpair AF_UNIX", lambda: len(socket.socketpair()))
attempt("signal itself", lambda: os.kill(os.getpid(), 0))
attempt("thread", lambda: (lambda t: (t.start(), t.join()))(threading.Thread(target=lambda: None)))
attempt("run a program", lambda: os.waitpid(os.spawnv(os.P_NOWAIT, "/bin/true", ["/bin/true"]), 0)[1])
print(json.dumps(results))
