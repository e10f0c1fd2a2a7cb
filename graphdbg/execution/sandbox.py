"""The sandbox an isolated replay child runs in: what an escape from the op allow-list can still do.

    >>> status = apply_sandbox([Path("/tmp/graphdbg-child-x")])   # in the child, before the replay
    >>> status
    'landlock (abi 7; tcp bind/connect blocked; signals and abstract sockets scoped; writes: /tmp/graphdbg-child-x, ...)'

Three layers, each through the kernel with ctypes (no dependency), each applied when the kernel
has it and reported otherwise (docs/security.md, "Sandbox", lists what each blocks):

- **no new privileges** (``prctl(PR_SET_NO_NEW_PRIVS)``): no setuid program run by the child
  gains rights; required by the two below;
- **Landlock** (Linux 5.13+): the child may read everything but create, write, truncate,
  link, rename or remove files only under the folders it is given (its own temporary folder,
  which holds its compiler caches too), write to character devices (``/dev/null``, GPUs; not
  ``/dev/shm``) and to its own ``/proc`` entry; with ABI 4+ it may neither bind nor connect
  TCP ports; with ABI 6+ it can't signal, or reach an abstract UNIX socket of, a process
  outside its sandbox. Landlock also keeps it from ptrace or ``/proc/<pid>/mem`` of any
  process outside;
- **seccomp** (a BPF filter, ``seccomp_program``): any architecture but the native one is
  killed (i386 ``int 0x80``, x32); ``socket()`` is refused for every family (but
  ``AF_UNIX`` on a GPU replay, which CUDA's driver needs at init); hard links,
  ptrace, another process's memory, io_uring, userfaultfd, ``memfd_create``, ``execveat``,
  namespaces, mounts, BPF and kernel keys are refused; where Landlock can't scope signals,
  ``kill`` and its kin reach only the child itself and its process group.

The result is one line, ``landlock (...)`` or ``none (why)``, that the Outcome records as
``sandbox``. ``GRAPHDBG_SANDBOX=0`` turns it off (``none (GRAPHDBG_SANDBOX=0)``);
``GRAPHDBG_SANDBOX_WRITABLE`` names more folders the child may write (a backend of the user's
that writes logs or notes).
"""

from __future__ import annotations

import ctypes
import errno
import getpass
import json
import os
import platform
import re
import stat
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from graphdbg.store.cache_folder import cache_dir, content_key

ENV = "GRAPHDBG_SANDBOX"
# Set by the sandboxed launcher of export-test's self-check (``sandboxed_file --replays-here``) in
# its own environment: that process is a replay child's sandbox already, so an isolated replay (the
# exported test's) runs in it, not in a child of its own: one interpreter and torch import fewer.
# Not when the captured failure was a signal or a timeout: there the child's death is the answer.
# ``executor.executor_for`` reads it only where ``FOLDER_ENV`` is set too (a sandboxed process).
HERE_ENV = "GRAPHDBG_REPLAY_HERE"

# <linux/landlock.h>; syscall numbers are the same on x86_64 and the generic table (aarch64).
_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_O_PATH = getattr(os, "O_PATH", 0o10000000)


# How every child interpreter graphdbg starts (a replay child, torchrun and its ranks, a
# self-check): ``python -I``, so neither the folder it runs in (a dump's, when the user ran
# ``cd DUMP && graphdbg replay .``) nor the script's folder is on ``sys.path``, and no
# ``PYTHON*`` variable is read; a ``json.py``, ``site.py`` or ``graphdbg/`` there never runs.
# graphdbg comes from the folder this process imported it from; torch and the rest from the
# interpreter's own site-packages, as ``-I`` leaves them. What the child needs besides is given
# explicitly by the lines below (``$GRAPHDBG_CHILD_PATH``, see ``child_path``): folders put first
# on ``sys.path`` (the user's ``PYTHONPATH``), the rest of this process's ``sys.path`` after the
# interpreter's own (what this process could import, the child can), and single modules of the
# user's trusted code by name, found last (after everything installed, so they shadow nothing,
# and no other file of their folder is found: not a ``triton/`` that torch would try to import).
CHILD_PATH_ENV = "GRAPHDBG_CHILD_PATH"
# A child's import path from ``$GRAPHDBG_CHILD_PATH`` (``child_path``): its head before the
# interpreter's own path, its tail after; ``p`` stays for the named modules below.
CHILD_PATH_SETUP = (
    "import json, os, sys\n"
    "p = json.loads(os.environ.get('GRAPHDBG_CHILD_PATH') or '{}')\n"
    "sys.path[:0] = p.get('head', [])\n"
    "sys.path += [e for e in p.get('tail', []) if e not in sys.path]\n"
)
# what the boot runs with is imported before the path grows (a user's folder on it may hold a runpy.py)
_BOOT = "import importlib.machinery, runpy\n" + CHILD_PATH_SETUP + (
    "class Named:\n"
    "    def __init__(self, key):\n"
    "        self.key = key\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        where = p.get(self.key, {}).get(name)\n"
    "        return importlib.machinery.PathFinder.find_spec(name, [where]) if where else None\n"
    "sys.meta_path.insert(0, Named('first'))\n"
    "sys.meta_path.append(Named('modules'))\n"
    "what, sys.argv = sys.argv[1], sys.argv[2:]\n"
    "if what == '--script':\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "else:\n"
    "    sys.argv.insert(0, what)\n"
    "    runpy.run_module(what, run_name='__main__', alter_sys=True)\n"
)
GRAPHDBG_ROOT = str(Path(__file__).resolve().parents[2])  # the folder this graphdbg was imported from


def python_command(module: str | None = None, *args: str, script: str | None = None, python: str | None = None) -> list[str]:
    """The command line of an isolated child interpreter that runs ``module`` (as ``python -m``)
    or the file ``script`` (as ``python FILE``) with ``args``; what it may import besides the
    interpreter's own comes from ``child_path`` in its environment.

        >>> python_command("graphdbg.execution.child", "req.json", "out.json")[:3]
        ['/usr/bin/python3', '-I', '-X']

    ``python``: another interpreter than this one (``bisect envs``: another environment).
    """
    start = [python or sys.executable, "-I", "-X", "faulthandler", "-c", _BOOT]
    if script is not None:
        return [*start, "--script", script, *args]
    assert module is not None
    return [*start, module, *args]


_SPEC_MODULE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_]")


def child_path(specs: Iterable[str | None] = (), first: Iterable[str | Path] = ()) -> dict[str, str]:
    """``$GRAPHDBG_CHILD_PATH`` for a child of ``python_command``:

    - ``first``: graphdbg itself, by name, from the folder this process imported it from (not
      another copy the interpreter has installed);
    - ``head``, put before the interpreter's own path: ``first`` and the user's ``PYTHONPATH``
      folders, except the current folder (a ``PYTHONPATH`` of ``.`` is no reason to import a
      dump's files);
    - ``tail``, put after the interpreter's own path: the rest of this process's ``sys.path``
      beyond the interpreter's own folders (a ``pip install --target`` folder a job script or
      notebook put there, the user's site-packages, which ``-I`` leaves out, where graphdbg's
      needs such as pydantic may lie), but the script's folder and the current folder (``-I``
      leaves both out on purpose) and the folders whose modules go by name (below): the child
      imports what this process could, and these shadow nothing;
    - ``modules``, by name: the top-level modules from the current folder or from the folders of
      the trusted modules ``specs``
      name (``module:callable`` in a backend, recipe or passes) and of the ``--ops`` modules
      (``$GRAPHDBG_OPS``): the backend and the siblings it imported, never another file of
      its folder (this process imports only trusted code: loading a dump runs none of it). One
      this process has imported is found first, where this process found it (the child imports
      the module the parent did); one it has not is found after everything else."""
    here = os.path.realpath(os.getcwd())
    head: list[str] = [str(p) for p in first]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.realpath(entry) != here:
            head.append(os.path.abspath(entry))
    names = [m for s in specs if s for m in _SPEC_MODULE.findall(s)]
    names += [m.strip().split(".")[0] for m in os.environ.get("GRAPHDBG_OPS", "").split(",") if m.strip()]
    # and the current folder's modules this process imported: it imports only trusted code
    # (loading a dump runs none of it), such as a backend given as ``module:callable`` from here
    roots = {os.path.realpath(root) for root in map(_module_root, names) if root} | {here}
    # folders whose modules go by name only: those above, the script's, a backend script's (backends.resolve)
    scripts = [getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n == "__main__" or n.startswith("graphdbg_script_")]
    skip = roots | {os.path.realpath(os.path.dirname(f)) for f in scripts if isinstance(f, str) and f}
    # the interpreter's own folders (its standard library, its site-packages) it finds itself
    own = tuple(os.path.join(os.path.realpath(p), "") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    tail = [os.path.abspath(e) for e in sys.path
            if e and os.path.realpath(e) not in skip and os.path.abspath(e) not in head and os.path.isdir(e)
            and not os.path.join(os.path.realpath(e), "").startswith(own)]
    modules, first_found = {}, {"graphdbg": GRAPHDBG_ROOT}
    for name in dict.fromkeys([*names, *(n for n in list(sys.modules) if "." not in n)]):
        root = _module_root(name)
        if root is not None and os.path.realpath(root) in roots and root not in head and name != "graphdbg":
            # one this process already imported comes from where this process got it, first (a copy
            # of it elsewhere on the path, such as an exported test's frozen one, never wins over the
            # user's own); one it has not imported yet is found last, shadowing nothing
            (first_found if name in sys.modules else modules)[name] = root
    value = {"first": first_found, "head": list(dict.fromkeys(head)), "tail": list(dict.fromkeys(tail)),
             "modules": modules}
    return {CHILD_PATH_ENV: json.dumps(value)}


def with_module(value: str, name: str, root: str | Path) -> str:
    """``$GRAPHDBG_CHILD_PATH``'s ``value`` for another interpreter (``bisect envs``): top-level
    module ``name`` found in ``root``, last (its own copy of it, when it has one, comes first),
    and nothing else of this interpreter's path but the user's ``PYTHONPATH``."""
    data = json.loads(value)
    data.pop("tail", None)
    # what this process imported says nothing of another interpreter's own copies: found last there
    data["modules"] = {**{k: v for k, v in data.pop("first", {}).items() if k != name}, **data.get("modules", {}),
                       name: str(root)}
    return json.dumps(data)


def _module_root(name: str) -> str | None:
    """The ``sys.path`` folder this process imported top-level module ``name`` from, or would
    (found, not imported); None for a built-in one or one it can't find."""
    file = getattr(sys.modules.get(name), "__file__", None)
    if name not in sys.modules:
        try:
            import importlib.util  # here: only a module not imported yet needs it

            spec = importlib.util.find_spec(name)  # a top-level name: found, not run
        except (ImportError, ValueError):
            spec = None
        file = spec.origin if spec is not None else None
    if not isinstance(file, str) or not file or not os.path.isabs(file):
        return None
    here = os.path.dirname(os.path.abspath(file))
    return os.path.dirname(here) if os.path.basename(file) == "__init__.py" else here


def _default_inductor_dir() -> str:
    """``$TMPDIR/torchinductor_<user>`` as torch computes it, without importing Inductor."""
    try:
        user = getpass.getuser()
    except Exception:
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def lend_headers(folder: Path) -> int:
    """Inductor keeps its precompiled C++ headers (about 150 MB each, a minute of CPU to build
    here) under ``$TMPDIR/torchinductor_<user>/precompiled_headers``, and a child's ``$TMPDIR`` is
    its own folder. Lend it this user's headers read-only: a folder of its own (where it may
    build a missing one, and take its locks) holding a link to each of this user's header
    files, whose targets the sandbox keeps it from writing. A header the child builds is never
    given back (it could be anything). Returns how many were lent."""
    shared = os.path.join(_default_inductor_dir(), "precompiled_headers")
    mine = Path(folder) / os.path.relpath(shared, tempfile.gettempdir())
    lent = 0
    try:
        (mine / "locks").mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(shared):
            if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                (mine / entry.name).symlink_to(entry.path)
                lent += 1
    except (OSError, ValueError):
        pass
    return lent


def child_env(folder: Path, device: str | None = None, dump: str | None = None, trust: str = "") -> dict[str, str]:
    """The environment of a sandboxed child whose own folder is ``folder``: temporary files
    (a C++ compiler's) go there; every compiler cache (Inductor's, its precompiled headers,
    Triton's, CUDA's) goes there too or, for the replays of one dump on disk (``dump``), to a
    folder of graphdbg's cache kept for that dump alone (``dump_compile_cache``), so that its
    second replay and a minify's runs compile warm. Never to the caches this user's own runs
    load: a kernel or header a hostile graph put there would run in them; what it puts in its
    own dump's folder reaches only that dump's replays, which are its own. On a CPU replay, the
    address space it may take (``memory_limit``). ``trust``: what the child trusts (``trust_level``),
    part of the dump's cache's key."""
    caches = dump_compile_cache(dump, trust) if dump else None
    base = caches or folder
    env = {"TMPDIR": str(folder), "TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), FOLDER_ENV: str(folder),
           "TRITON_CACHE_DIR": str(base / "triton"), "CUDA_CACHE_PATH": str(base / "nv")}
    if caches is not None:
        env[WRITABLE_ENV] = os.pathsep.join(p for p in (os.environ.get(WRITABLE_ENV, ""), str(caches)) if p)
    lend_headers(folder)
    on_cpu = str(device or "cpu").startswith("cpu")
    limit = memory_limit() if on_cpu else None
    if limit:
        env[MEMORY_ENV] = limit
    if not on_cpu:
        env[UNIX_ENV] = "1"  # CUDA's driver opens a UNIX socket at init (without it: "Error 304")
    return env


def dump_compile_cache(dump: str, trust: str = "") -> Path | None:
    """``<graphdbg's cache>/compile/<key>``: the compiler caches of one dump's replays, keyed by
    the content of every file under it and by what the replay trusted (``trust_level``): a dump
    changed anywhere, or replayed with other trust, gets another folder, so nothing an untrusted
    replay's compiler left there is loaded by a trusted one (``store/cache_folder.content_key``).
    None where it can't be made (replays then compile in the child's own folder)."""
    key = content_key(Path(dump), trust)
    if key is None:
        return None
    try:
        folder = cache_dir() / "compile" / key
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    except (OSError, ValueError):
        return None


def trust_level(specs: Iterable[Any] = (), trust_kernels: bool = False) -> str:
    """What a replay child trusts, as text for its compile cache's key: the code it runs (each
    backend or pass that names code rather than a registered backend), the dump's kernels
    (``--trust-kernels``), every recorded setting (``--trust-config``) and the variables
    ``--as-captured`` restored; "" for none."""
    code = sorted({str(s) for s in specs if s is not None and not (isinstance(s, str) and _REGISTERED.fullmatch(s))})
    parts = [*(f"code {c}" for c in code), *(["kernels"] if trust_kernels else []),
             *(["config"] if os.environ.get("GRAPHDBG_TRUST_CONFIG") else [])]  # compiler_config.ENV_TRUST_CONFIG
    restored = os.environ.get("GRAPHDBG_AS_CAPTURED")  # as_captured.ENV_AS_CAPTURED: what --as-captured brought back
    if restored:
        parts.append(f"as captured {restored}")
    return "\n".join(parts)


_REGISTERED = re.compile(r"[A-Za-z_][\w.-]*")  # a registered backend's name (eager, inductor, aot_eager): no code of anyone's


UNIX_ENV = "GRAPHDBG_SANDBOX_UNIX"  # set for a GPU replay: socket(AF_UNIX) allowed


MEMORY_ENV = "GRAPHDBG_MEMORY_LIMIT"  # bytes of address space (RLIMIT_AS) for a CPU replay's child; "+N": N above torch's
_BASELINE = 3 << 30  # what Python, torch and Inductor map before the graph allocates anything


def memory_limit() -> str | None:
    """The address space a CPU replay child may use (``$GRAPHDBG_MEMORY_LIMIT``): with
    ``GRAPHDBG_MEMORY_LIMIT_GB`` set, that much *above* what the child maps once torch is loaded
    (``+N``: a CUDA build of torch maps about 3 GiB of libraries before anything runs, a CPU build
    under 1 GiB; a limit below that would keep torch from loading at all), else the memory
    available now plus what torch itself maps, so a graph that allocates more than the machine
    has fails with an out-of-memory error in the child instead of swapping or waking the OOM
    killer. (Not for CUDA: its driver reserves huge address space.)"""
    given = os.environ.get("GRAPHDBG_MEMORY_LIMIT_GB")
    if given:
        try:
            return f"+{int(float(given) * (1 << 30))}"
        except ValueError:
            return None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f.read(8192).decode().splitlines():
                if line.startswith("MemAvailable:"):
                    return str(int(line.split()[1]) * 1024 + _BASELINE)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _mapped_with_torch() -> int:
    """The address space this process maps once torch is loaded (``VmSize``), in bytes."""
    try:
        import torch  # noqa: F401  # loaded before the limit, which counts only what comes after it
    except ImportError:
        pass
    with open("/proc/self/status", "rb") as f:
        for line in f.read(16384).decode().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def limit_memory() -> str:
    """Apply ``$GRAPHDBG_MEMORY_LIMIT`` as RLIMIT_AS; what was applied, for the status line."""
    raw = os.environ.get(MEMORY_ENV)
    if not raw:
        return "no memory limit"
    try:
        import resource  # POSIX only: a failed import lands in the except below

        above = raw.startswith("+")
        wanted = int(raw.removeprefix("+"))
        mapped = _mapped_with_torch() if above else 0
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = mapped + wanted if hard == resource.RLIM_INFINITY else min(mapped + wanted, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # the hard limit too: code in the child can't raise it
    except (ValueError, OSError, ImportError) as e:
        return f"no memory limit ({e})"
    if above:
        return f"memory limit {wanted / (1 << 30):.1f} GiB above the {mapped / (1 << 30):.1f} GiB torch maps"
    return f"memory limit {limit / (1 << 30):.1f} GiB"


FOLDER_ENV = "GRAPHDBG_SANDBOX_DIR"
WRITABLE_ENV = "GRAPHDBG_SANDBOX_WRITABLE"  # the user's own folders a backend of theirs writes to (os.pathsep-separated)
SANDBOX_NOTE = "sandbox.txt"  # beside the child's folder: what it applied, for an outcome it never wrote


def sandbox_child(own_parent: bool = True) -> str | None:
    """In an isolated child: apply the sandbox around ``$GRAPHDBG_SANDBOX_DIR`` (its folder, and
    with ``own_parent`` the folder that holds its request and outcome files: a long-lived
    worker's parent writes its jobs there, so a worker gets its own folder alone), note what was
    applied beside them; None when this process is not such a child."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        return None
    own = Path(folder)
    extra = [Path(p) for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p.strip()]
    status = apply_sandbox([own, *([own.parent] if own_parent else []), *extra], unix=os.environ.get(UNIX_ENV) == "1")
    status = f"{status[:-1]}; {limit_memory()})" if status.endswith(")") else f"{status}; {limit_memory()}"
    try:
        ((own.parent if own_parent else own) / SANDBOX_NOTE).write_text(status)
    except OSError:
        pass
    return status


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


def _devices() -> list[Path]:
    """The character devices under ``/dev`` (two levels: ``/dev/null``, ``/dev/nvidia0``,
    ``/dev/dri/renderD128``): a child may write to a device, never create or change a file
    there (``/dev/shm``, ``/dev/mqueue`` are folders of files, not devices)."""
    found: list[Path] = []
    todo, depth = [Path("/dev")], 0
    while todo and depth < 2:
        nxt = []
        for folder in todo:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISCHR(st.st_mode):
                    found.append(Path(e.path))
                elif stat.S_ISDIR(st.st_mode):
                    nxt.append(Path(e.path))
        todo, depth = nxt, depth + 1
    return found


def landlock(writable: Iterable[Path], devices: Iterable[Path] = ()) -> str:
    """Restrict this process (and what it starts) to creating, changing and removing files only
    under ``writable``, and writing to ``devices``; with ABI 4+ no TCP bind or connect; with
    ABI 6+ no signal to, and no abstract UNIX socket of, a process outside this sandbox.
    Returns what was applied, or raises OSError."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "the kernel has no Landlock")
    create, add_rule, restrict = _SYS[platform.machine()]
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE
    handled |= _FS_REFER if abi >= 2 else 0
    handled |= _FS_TRUNCATE if abi >= 3 else 0
    on_files = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)  # the rights a rule on a file (a device) may hold
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    else:
        attr = struct.pack("=QQ", handled, net) if abi >= 4 else struct.pack("=Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(create), buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for path, rights in [*((Path(f), handled) for f in writable), *((Path(d), on_files) for d in devices)]:
            try:
                if rights == handled:
                    path.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", rights, fd)  # landlock_path_beneath_attr is packed
                rbuf = ctypes.create_string_buffer(rule, len(rule))
                if libc.syscall(ctypes.c_long(add_rule), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), rbuf,
                                ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    parts = [f"abi {abi}", "tcp bind/connect blocked" if net else "tcp not covered (abi < 4)",
             "signals and abstract sockets scoped" if scoped else "signals and abstract sockets not scoped (abi < 6)"]
    return "; ".join(parts)


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


# seccomp: per native architecture, its AUDIT_ARCH value and the numbers of the calls the filter judges
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NR = {
    "x86_64": dict(socket=41, socketpair=53, link=86, linkat=265, ptrace=101, process_vm_readv=310,
                   process_vm_writev=311, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                   userfaultfd=323, memfd_create=319, execveat=322, kill=62, tkill=200, tgkill=234,
                   rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, pidfd_send_signal=424, unshare=272, setns=308,
                   mount=165, umount2=166, pivot_root=155, chroot=161, clone=56, clone3=435, bpf=321,
                   perf_event_open=298, keyctl=250, add_key=248, request_key=249, fsopen=430, fsmount=432,
                   open_tree=428, move_mount=429, mount_setattr=442, kexec_load=246, init_module=175,
                   finit_module=313, delete_module=176),
    "aarch64": dict(socket=198, socketpair=199, linkat=37, ptrace=117, process_vm_readv=270,
                    process_vm_writev=271, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                    userfaultfd=282, memfd_create=279, execveat=281, kill=129, tkill=130, tgkill=131,
                    rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, pidfd_send_signal=424, unshare=97, setns=268,
                    mount=40, umount2=39, pivot_root=41, chroot=51, clone=220, clone3=435, bpf=280,
                    perf_event_open=241, keyctl=219, add_key=217, request_key=218, fsopen=430, fsmount=432,
                    open_tree=428, move_mount=429, mount_setattr=442, kexec_load=104, init_module=105,
                    finit_module=273, delete_module=106),
}
# Refused outright (EPERM): hard links (an outside file linked into the child's folder and
# written there changes it), another process's memory, calls whose work seccomp can't see
# (io_uring runs socket and file operations behind it), running code from memory, new
# namespaces and mounts (where Landlock would not follow), kernel keys, BPF, modules.
DENIED_CALLS = ("link", "linkat", "ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter",
                "io_uring_register", "userfaultfd", "memfd_create", "execveat", "unshare", "setns", "mount", "umount2",
                "pivot_root", "chroot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "fsopen",
                "fsmount", "open_tree", "move_mount", "mount_setattr", "kexec_load", "init_module", "finit_module",
                "delete_module")
# Signals: where Landlock can't scope them (ABI < 6), only to this process or its own group.
SIGNAL_CALLS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal")
_AF_UNIX = 1
_CLONE_NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_X32_BIT = 0x40000000
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_EPERM, _EACCES, _ENOSYS = (0x00050000 | errno.EPERM), (0x00050000 | errno.EACCES), (0x00050000 | errno.ENOSYS)


def _arg0(i: int = 0) -> bytes:
    return _bpf(_LD_W_ABS, 0, 0, 16 + 8 * i)  # low 32 bits of args[i] (little endian)


def seccomp_program(machine: str, own_pid: int, scope_signals: bool, unix: bool = False) -> list[bytes]:
    """The BPF program: the architecture first (any other, such as i386's ``int 0x80`` or
    x32 on x86_64, kills the process), then per call: ``socket`` refused for every family
    (EACCES; a CPU replay needs no socket: pipes and ``socketpair(AF_UNIX)`` are enough) but
    ``AF_UNIX`` when ``unix`` (a GPU replay: CUDA's driver opens one),
    ``DENIED_CALLS`` refused (EPERM), ``clone`` into new namespaces refused and ``clone3``
    ENOSYS (its flags are out of reach: libc falls back to ``clone``), signals only to this
    process or its group when ``scope_signals`` (Landlock can't), the rest allowed."""
    nr = _NR[machine]
    prog = [_bpf(_LD_W_ABS, 0, 0, 4), _bpf(_JEQ, 1, 0, _AUDIT_ARCH[machine]), _bpf(_RET, 0, 0, _KILL_PROCESS),
            _bpf(_LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":
        prog += [_bpf(_JGE, 0, 1, _X32_BIT), _bpf(_RET, 0, 0, _KILL_PROCESS)]

    def block(call: str, body: list[bytes]) -> None:
        # body always returns, so the accumulator still holds the call's number past it
        if call in nr:
            prog.extend([_bpf(_JEQ, 0, len(body), nr[call]), *body])

    if unix:
        block("socket", [_arg0(), _bpf(_JEQ, 0, 1, _AF_UNIX), _bpf(_RET, 0, 0, _ALLOW), _bpf(_RET, 0, 0, _EACCES)])
    else:
        block("socket", [_bpf(_RET, 0, 0, _EACCES)])
    block("socketpair", [_arg0(), _bpf(_JEQ, 0, 1, _AF_UNIX), _bpf(_RET, 0, 0, _ALLOW), _bpf(_RET, 0, 0, _EACCES)])
    for call in DENIED_CALLS:
        block(call, [_bpf(_RET, 0, 0, _EPERM)])
    block("clone", [_arg0(), _bpf(_JSET, 0, 1, _CLONE_NEW_NAMESPACES), _bpf(_RET, 0, 0, _EPERM), _bpf(_RET, 0, 0, _ALLOW)])
    block("clone3", [_bpf(_RET, 0, 0, _ENOSYS)])
    if scope_signals:
        me, group = own_pid & 0xFFFFFFFF, (-own_pid) & 0xFFFFFFFF
        to_me = [_arg0(), _bpf(_JEQ, 2, 0, me), _bpf(_JEQ, 1, 0, 0), _bpf(_JEQ, 0, 1, group), _bpf(_RET, 0, 0, _ALLOW),
                 _bpf(_RET, 0, 0, _EPERM)]
        block("kill", to_me)  # itself, its group (0, -pid): the child leads its own group
        block("rt_sigqueueinfo", to_me)
        for call in ("tgkill", "rt_tgsigqueueinfo"):  # a thread of this process
            block(call, [_arg0(), _bpf(_JEQ, 0, 1, me), _bpf(_RET, 0, 0, _ALLOW), _bpf(_RET, 0, 0, _EPERM)])
        block("tkill", [_bpf(_RET, 0, 0, _EPERM)])
        block("pidfd_send_signal", [_bpf(_RET, 0, 0, _EPERM)])
    prog.append(_bpf(_RET, 0, 0, _ALLOW))
    return prog


def install_seccomp(scope_signals: bool, unix: bool = False) -> None:
    """Install ``seccomp_program`` for this machine on this process (and what it starts); OSError if it can't."""
    machine = platform.machine()
    if machine not in _NR:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    prog = seccomp_program(machine, os.getpid(), scope_signals, unix)
    code = b"".join(prog)
    filt = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(filt, ctypes.c_void_p))
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")


def apply_sandbox(writable: Iterable[Path], unix: bool = False) -> str:
    """Apply what this kernel allows (see the module docstring); one line saying what, and
    what this kernel can't hold (``weaker: ...``)."""
    if os.environ.get(ENV) == "0":
        return f"none ({ENV}=0)"
    if not sys.platform.startswith("linux"):
        return f"none (not Linux: {sys.platform})"
    folders = [Path(p) for p in writable]
    why = no_new_privs()
    if why:
        return f"none ({why})"
    abi = landlock_abi()
    try:
        # CUDA's driver writes to this process's own /proc entries (without them: "Error 304" at
        # cuInit); only those, never /proc itself, whose /proc/sys a root process could escape through
        own_proc = Path(f"/proc/{os.getpid()}")
        done = landlock([*folders, own_proc], _devices())
    except OSError as e:
        landlock_part = None
        reason = e.strerror or str(e)
    else:
        landlock_part = done
    scope_signals = landlock_part is None or abi < 6
    try:
        install_seccomp(scope_signals, unix)
        calls = "seccomp: other architectures killed, " + ("no sockets but unix ones" if unix else "no sockets") + \
                ", no links, ptrace, io_uring, userfaultfd, memfd, namespaces" + \
                (", signals only to itself" if scope_signals else "")
    except OSError as e:
        calls = f"no seccomp ({e.strerror or e})"
    # what this kernel leaves open (docs/security.md, "Sandbox")
    weaker = ["files outside writable, other processes' memory readable through /proc"] if landlock_part is None else []
    if unix:
        weaker.append("UNIX sockets by path reachable" + ("" if landlock_part and abi >= 6 else ", abstract ones too"))
    tail = f"; weaker: {'; '.join(weaker)}" if weaker else ""
    shown = ", ".join(str(f) for f in folders)
    if landlock_part is None:
        return f"none (no Landlock: {reason}; no new privileges; {calls}{tail})"
    return f"landlock ({landlock_part}; writes: {shown}, character devices, its own /proc entry; {calls}{tail})"
