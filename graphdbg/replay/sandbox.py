"""The sandbox an isolated replay child runs in: what an escape from the op allow-list can still do.

    >>> status = apply_sandbox([Path("/tmp/graphdbg-child-x")])   # in the child, before the replay
    >>> status
    'landlock (abi 6; writes: /tmp/graphdbg-child-x, compiler caches; network: tcp blocked by landlock, inet sockets by seccomp)'

Three layers, each through the kernel with ctypes (no dependency), each applied when the kernel
has it and reported otherwise:

- **no new privileges** (``prctl(PR_SET_NO_NEW_PRIVS)``): no setuid program run by the child
  gains rights; required by the two below;
- **Landlock** (Linux 5.13+): the child may read everything but create, write, truncate,
  rename or remove files only under the folders it is given (its own temporary folder and the
  compiler caches: Inductor's and Triton's) and ``/dev`` (devices: ``/dev/null``, GPUs);
  with ABI 4+ it may neither bind nor connect TCP ports;
- **seccomp** (a BPF filter): ``socket()`` for ``AF_INET``/``AF_INET6``/``AF_PACKET`` fails
  with EACCES, so no network at all (UDP included); local ``AF_UNIX`` sockets still work.

The result is one line, ``landlock (...)`` or ``none (why)``, that the Outcome records as
``sandbox``. ``GRAPHDBG_SANDBOX=0`` turns it off (``none (GRAPHDBG_SANDBOX=0)``);
``GRAPHDBG_SANDBOX_WRITABLE`` names more folders the child may write (a backend of the user's
that writes logs or notes).
"""

from __future__ import annotations

import ctypes
import errno
import getpass
import os
import platform
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Iterable

ENV = "GRAPHDBG_SANDBOX"

# <linux/landlock.h>; syscall numbers are the same on x86_64 and the generic table (aarch64).
_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_O_PATH = getattr(os, "O_PATH", 0o10000000)


def inductor_cache_dir() -> str:
    """Inductor's cache folder as torch computes it (``TORCHINDUCTOR_CACHE_DIR``, else
    ``$TMPDIR/torchinductor_<user>``), without importing Inductor."""

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    return _default_inductor_dir()


def _default_inductor_dir() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


HEADERS_ENV = "GRAPHDBG_INDUCTOR_HEADERS"  # the precompiled-header folder a child shares with its parent


def share_headers(folder: Path) -> str | None:
    """Inductor keeps its precompiled C++ header (about 150 MB, 10 s of CPU to build) under
    ``$TMPDIR/torchinductor_<user>/precompiled_headers`` whatever ``TORCHINDUCTOR_CACHE_DIR``
    says, and a child's ``$TMPDIR`` is its own new folder: every isolated CPU replay under
    Inductor built it again. Link the child's header folder to this process's; the header
    folder is then one of the compiler caches the sandbox leaves writable. None if it can't."""
    headers = os.path.join(_default_inductor_dir(), "precompiled_headers")
    try:
        os.makedirs(headers, exist_ok=True)
        link = Path(folder) / os.path.relpath(headers, tempfile.gettempdir())
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(headers, target_is_directory=True)
    except (OSError, ValueError):
        return None
    return headers


def child_env(folder: Path, device: str | None = None) -> dict[str, str]:
    """The environment of a sandboxed child whose own folder is ``folder``: temporary files
    (a C++ compiler's) go there, the compiler caches stay where this process has them (its
    precompiled headers too: ``share_headers``); on a CPU replay, the address space it may
    take (``memory_limit``)."""
    env = {"TMPDIR": str(folder), "TORCHINDUCTOR_CACHE_DIR": inductor_cache_dir(), FOLDER_ENV: str(folder)}
    headers = share_headers(folder)
    if headers:
        env[HEADERS_ENV] = headers
    limit = memory_limit() if str(device or "cpu").startswith("cpu") else None
    if limit:
        env[MEMORY_ENV] = str(limit)
    return env


MEMORY_ENV = "GRAPHDBG_MEMORY_LIMIT"  # bytes of address space (RLIMIT_AS) for a CPU replay's child
_BASELINE = 3 << 30  # what Python, torch and Inductor map before the graph allocates anything


def memory_limit() -> int | None:
    """Bytes of address space a CPU replay child may use: ``GRAPHDBG_MEMORY_LIMIT_GB`` if set,
    else the memory available now plus what torch itself maps, so a graph that allocates
    more than the machine has fails with an out-of-memory error in the child instead of
    swapping or waking the OOM killer. (Not for CUDA: its driver reserves huge address space.)"""
    given = os.environ.get("GRAPHDBG_MEMORY_LIMIT_GB")
    if given:
        try:
            return int(float(given) * (1 << 30))
        except ValueError:
            return None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f.read(8192).decode().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 + _BASELINE
    except (OSError, ValueError, IndexError):
        return None
    return None


def limit_memory() -> str:
    """Apply ``$GRAPHDBG_MEMORY_LIMIT`` as RLIMIT_AS; what was applied, for the status line."""
    raw = os.environ.get(MEMORY_ENV)
    if not raw:
        return "no memory limit"
    try:
        import resource  # POSIX only: a failed import lands in the except below

        limit = int(raw)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ValueError, OSError, ImportError) as e:
        return f"no memory limit ({e})"
    return f"memory limit {limit / (1 << 30):.1f} GiB"


FOLDER_ENV = "GRAPHDBG_SANDBOX_DIR"
WRITABLE_ENV = "GRAPHDBG_SANDBOX_WRITABLE"  # the user's own folders a backend of theirs writes to (os.pathsep-separated)
SANDBOX_NOTE = "sandbox.txt"  # beside the child's folder: what it applied, for an outcome it never wrote


def sandbox_child() -> str | None:
    """In an isolated child: apply the sandbox around ``$GRAPHDBG_SANDBOX_DIR`` (its folder, and
    the folder that holds its request and outcome files), note what was applied there; None
    when this process is not such a child."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        return None
    own = Path(folder)
    extra = [Path(p) for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p.strip()]
    status = apply_sandbox([own, own.parent, *extra])
    status = f"{status[:-1]}; {limit_memory()})" if status.endswith(")") else f"{status}; {limit_memory()}"
    try:
        (own.parent / SANDBOX_NOTE).write_text(status)
    except OSError:
        pass
    return status


def compiler_caches() -> list[Path]:
    """The folders Inductor and Triton write their caches to (they must stay writable)."""
    inductor = inductor_cache_dir()
    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton")
    headers = [Path(os.environ[HEADERS_ENV])] if os.environ.get(HEADERS_ENV) else []  # share_headers
    return [Path(inductor), Path(triton), *headers]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def no_new_privs() -> str | None:
    """None when set, else why not."""
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when there is none (old kernel, LSM off, not Linux)."""
    nums = _SYS.get(platform.machine())
    if not sys.platform.startswith("linux") or nums is None:
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(nums[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(abi) if abi > 0 else 0


def landlock(writable: Iterable[Path]) -> str:
    """Restrict this process (and what it starts) to writing under ``writable``; returns what
    was applied, or raises OSError."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "the kernel has no Landlock")
    create, add_rule, restrict = _SYS[platform.machine()]
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE
    handled |= _FS_REFER if abi >= 2 else 0
    handled |= _FS_TRUNCATE if abi >= 3 else 0
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    attr = struct.pack("=QQ", handled, net) if abi >= 4 else struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(create), buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    allowed_here: list[str] = []
    try:
        for folder in writable:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(folder, _O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", handled, fd)  # landlock_path_beneath_attr is packed
                rbuf = ctypes.create_string_buffer(rule, len(rule))
                if libc.syscall(ctypes.c_long(add_rule), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rbuf,
                                ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {folder}: {os.strerror(ctypes.get_errno())}")
                allowed_here.append(str(folder))
            finally:
                os.close(fd)
        if libc.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return f"abi {abi}" + ("; tcp bind/connect blocked" if net else "; tcp not covered (abi < 4)")


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


# seccomp: audit arch values and socket() numbers.
_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_AF_BLOCKED = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET


def block_inet_sockets() -> None:
    """A seccomp filter: ``socket(AF_INET|AF_INET6|AF_PACKET, ...)`` fails with EACCES."""
    arch = _ARCH.get(platform.machine())
    if arch is None:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {platform.machine()}")
    audit_arch, nr_socket = arch
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EACCES  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    n = len(_AF_BLOCKED)
    prog = [
        _bpf(ld_w_abs, 0, 0, 4),                 # seccomp_data.arch
        _bpf(jeq_k, 1, 0, audit_arch),
        _bpf(ret_k, 0, 0, allow),                # another arch (x32 ...): leave it
        _bpf(ld_w_abs, 0, 0, 0),                 # seccomp_data.nr
        _bpf(jeq_k, 0, n + 1, nr_socket),        # not socket(): allow
        _bpf(ld_w_abs, 0, 0, 16),                # args[0] low 32 bits: the family
        *[_bpf(jeq_k, n - i, 0, fam) for i, fam in enumerate(_AF_BLOCKED)],
        _bpf(ret_k, 0, 0, allow),
        _bpf(ret_k, 0, 0, deny),
    ]
    code = b"".join(prog)
    filt = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(filt, ctypes.c_void_p))
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")


def apply_sandbox(writable: Iterable[Path]) -> str:
    """Apply what this kernel allows (see the module docstring); one line saying what."""
    if os.environ.get(ENV) == "0":
        return f"none ({ENV}=0)"
    if not sys.platform.startswith("linux"):
        return f"none (not Linux: {sys.platform})"
    folders = [Path(p) for p in writable]
    why = no_new_privs()
    if why:
        return f"none ({why})"
    try:
        # CUDA's driver writes to this process's own /proc entries (without them: "Error 304" at
        # cuInit); only those, never /proc itself, whose /proc/sys a root process could escape through
        own_proc = Path(f"/proc/{os.getpid()}")
        done = landlock([*folders, *compiler_caches(), Path("/dev"), own_proc])
    except OSError as e:
        landlock_part = None
        reason = e.strerror or str(e)
    else:
        landlock_part = done
    try:
        block_inet_sockets()
        net = "inet sockets blocked by seccomp"
    except OSError as e:
        net = f"no seccomp ({e.strerror or e})"
    shown = ", ".join(str(f) for f in folders)
    if landlock_part is None:
        return f"none (no Landlock: {reason}; no new privileges; {net})"
    return f"landlock ({landlock_part}; writes: {shown}, compiler caches, /dev, its own /proc entry; {net})"
