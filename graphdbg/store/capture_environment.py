"""Where a graph was captured: versions, device, the settings that decide compiled code, and the
process's place in a distributed job.

``environment(backend)`` is the manifest's ``env``: besides versions and the device, ``settings``
(``torch.backends`` flags, matmul precision, determinism, default dtype, thread counts, keyed as
``SETTINGS`` names them) and ``vars`` (the environment variables torch, Inductor, Triton, CUDA,
NCCL, OpenMP and MKL read, by ``ENV_PREFIXES``). The compiler's own settings are the manifest's
``config`` (``backends.compiler_config``), recorded once, there. ``judge.environment`` compares
a recorded ``env`` with ``environment()`` now.

A backend may read variables of its own (``os.environ["MYKERNEL_MODE"]``): capture observes
every read of ``os.environ`` while the backend compiles and first runs (``observing_env``), and
``environment(backend, read)`` records them: ``env.read`` names each variable read (set or not),
``env.vars`` holds the values of those set, beside the prefixed ones, so that ``store.redact``
treats them as the rest.

    >>> with observing_env() as read:
    ...     compiled = backend(gm, example_inputs)
    >>> read
    {'MYKERNEL_MODE': 'fast', 'MYKERNEL_DEBUG': None}
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import os
import platform
import re
import socket
import sys
import threading
from importlib.metadata import packages_distributions, version
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from graphdbg._version import __version__
from graphdbg.errors import GraphdbgError
from graphdbg.judge.environment_diff import ENV_PREFIXES
from graphdbg.store.safe_files import read_regular


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except Exception:
        return None


MAX_VAR = 4096
MAX_READ = 1024  # variables of the backend's own recorded at most


def _sdp(name: str) -> Any:
    return getattr(torch.backends.cuda, name)()


# name -> how to read it now; the names are what a dump records and `--as-captured` restores.
SETTINGS: dict[str, Any] = {
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "default_dtype": lambda: str(torch.get_default_dtype()).removeprefix("torch."),
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    "cudnn.enabled": lambda: torch.backends.cudnn.enabled,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
    "sdp.flash": lambda: _sdp("flash_sdp_enabled"),
    "sdp.mem_efficient": lambda: _sdp("mem_efficient_sdp_enabled"),
    "sdp.math": lambda: _sdp("math_sdp_enabled"),
    "sdp.cudnn": lambda: _sdp("cudnn_sdp_enabled"),
    "mkldnn.enabled": lambda: torch.backends.mkldnn.enabled,
    "num_threads": torch.get_num_threads,
    "num_interop_threads": torch.get_num_interop_threads,
}


def settings() -> dict[str, Any]:
    """The ``SETTINGS`` now (a flag this torch lacks is left out)."""
    out: dict[str, Any] = {}
    for name, read in SETTINGS.items():
        try:
            out[name] = read()
        except Exception:
            continue
    return out


def env_vars(read: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment variables of ``ENV_PREFIXES``, with their values (cut at ``MAX_VAR``), and
    those of ``read`` that were set when read."""
    found = {k: v[:MAX_VAR] for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    found.update({k: v[:MAX_VAR] for k, v in (read or {}).items() if isinstance(v, str)})
    return dict(sorted(found.items()))


# Variables of the process and the session, not of the backend: read by Python's own modules
# while anything compiles (tempfile, getpass, shutil.which, the terminal's size), they say where
# and who rather than how, and are not recorded when the backend reads them.
_NOT_OBSERVED = re.compile(r"(PATH|HOME|USER|LOGNAME|USERNAME|LNAME|PWD|OLDPWD|SHELL|TERM|HOSTNAME|TMPDIR|TEMP|TMP|TZ"
                           r"|LANG|LANGUAGE|DISPLAY|COLUMNS|LINES|NO_COLOR|FORCE_COLOR|CLICOLOR|VIRTUAL_ENV"
                           r"|(LC|XDG|SSH|PYTHON|PYTEST|GRAPHDBG|LD|DYLD|CONDA)_\w*|PYTHON\w*)")
# A variable whose name says it holds a secret: recorded as read, its value never.
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|CREDENTIAL|AUTH", re.I)

_observers: list[dict[str, str | None]] = []
_observers_lock = threading.Lock()
_originals: dict[str, Any] = {}
_NOTHING = object()


def _note(mapping: Any, key: Any, value: Any) -> None:
    if mapping is not os.environ or not isinstance(key, str) or _NOT_OBSERVED.fullmatch(key):
        return
    shown = "<redacted>" if isinstance(value, str) and _SECRET.search(key) else value if isinstance(value, str) else None
    for reads in list(_observers):
        if key not in reads and len(reads) < MAX_READ:
            reads[key] = shown


def _observed(original: Callable[..., Any], getitem: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a lookup method of ``os.environ``'s class), noting the variable it looks up
    and its value (through ``getitem``, the class's own ``__getitem__``)."""
    def noted(self: Any, key: Any, *args: Any) -> Any:
        try:
            value = getitem(self, key)
        except Exception:  # unset (KeyError), or a key of another type: noted as unset or not at all
            value = None
        _note(self, key, value)
        return original(self, key, *args)

    return noted


@contextlib.contextmanager
def observing_env(reads: dict[str, str | None] | None = None) -> Iterator[dict[str, str | None]]:
    """Within, every variable looked up in ``os.environ`` (``[]``, ``get``, ``in``;
    ``os.getenv`` is ``get``), by any thread, is noted in ``reads`` with its value then (None:
    unset). ``os.environ``'s class is patched while at least one window is open, and put back
    after the last; the windows of concurrent compiles each see every read."""
    reads = {} if reads is None else reads
    cls = type(os.environ)
    with _observers_lock:
        if not _observers:
            getitem = cls.__getitem__
            for name in ("__getitem__", "get", "__contains__"):
                _originals[name] = cls.__dict__.get(name, _NOTHING)
                setattr(cls, name, _observed(getattr(cls, name), getitem))
        _observers.append(reads)
    try:
        yield reads
    finally:
        with _observers_lock:
            _observers[:] = [r for r in _observers if r is not reads]
            if not _observers:
                for name, original in _originals.items():
                    if original is _NOTHING:
                        delattr(cls, name)
                    else:
                        setattr(cls, name, original)
                _originals.clear()


def backend_package(backend: str | None) -> tuple[str | None, str | None]:
    """(the distribution a backend comes from, its version): torch for its own backends
    (inductor, aot_eager, ...), else the distribution of the backend's top-level module."""
    if not backend:
        return None, None
    module = backend.partition(":")[0] if ":" in backend else ""
    top = module.split(".", 1)[0]
    if not top or top == "torch":
        return "torch", torch.__version__
    try:
        dists = _distributions().get(top) or []
    except Exception:
        dists = []
    for dist in dists or [top]:  # not in the table made once (installed since): a distribution of the module's name
        found = package_version(dist)
        if found:
            return dist, found
    return top, None  # a module of the user's own, no distribution: its name is still worth comparing


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    """Which distributions provide each top-level module: a walk of every installed package's
    file list (a second here), the same for the life of this process: asked once."""
    return dict(packages_distributions())


def _driver_version() -> str | None:
    """The CUDA driver's version (``12.4``), from libcuda itself: torch does not say."""
    try:
        import ctypes  # inside the try: a machine without libcuda answers None

        out = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(out)) != 0:
            return None
        return f"{out.value // 1000}.{out.value % 1000 // 10}"
    except Exception:
        return None


def device() -> dict[str, Any]:
    """The device a graph compiles for: the current CUDA device's name, compute capability and
    memory, else the CPU."""
    try:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return {"name": props.name, "capability": f"{props.major}.{props.minor}", "memory_bytes": int(props.total_memory)}
    except Exception:
        pass
    return {"name": _cpu_name() or platform.machine() or "cpu", "capability": None, "memory_bytes": None}


def _cpu_name() -> str | None:
    """The CPU's model name from /proc/cpuinfo (not ``platform.processor()``: on Linux it runs
    ``uname -p`` in a subprocess, which a replay must not start)."""
    try:
        text = read_regular(Path("/proc/cpuinfo"), max_bytes=1 << 20, text=True)
    except (OSError, GraphdbgError, UnicodeDecodeError):
        return None
    for line in str(text).splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip() or None
    return None


def captured_by() -> dict[str, Any]:
    """The host, user and home folder of the capturing process (``hostname``, ``user``, ``home``):
    what identifies a person, recorded so that ``graphdbg redact`` can find each in any text of the
    dump (a traceback, a log, a path) and remove it, on any machine; redact drops the fields
    themselves. The host name is ``gethostname()``'s, with no DNS query (``redact`` removes its
    short form and any domain after it)."""
    out: dict[str, Any] = {"hostname": socket.gethostname(), "user": None, "home": None}
    try:
        out["user"] = getpass.getuser()
    except Exception:  # no name for this uid (a container's): nothing to record
        pass
    try:
        out["home"] = str(Path.home())
    except Exception:
        pass
    return out


def environment(backend: str | None = None, read: dict[str, str | None] | None = None) -> dict[str, Any]:
    """The manifest's ``env``; ``read``: the variables the backend read (``observing_env``), recorded
    as ``env.read`` (their names) and in ``env.vars`` (the values of those set)."""
    package, package_ver = backend_package(backend)
    env: dict[str, Any] = {
        "graphdbg": __version__,
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "backend_package": package,
        "backend_version": package_ver,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **captured_by(),  # who and where: for redact to find and remove, never compared or restored
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "cuda": torch.version.cuda,
        "driver": _driver_version() if torch.version.cuda else None,
        "device_name": "cpu",
        "cuda_devices": 0,
        "device": device(),
        "settings": settings(),
        "vars": env_vars(read),
        **({"read": sorted(read)} if read else {}),
    }
    try:
        if torch.cuda.is_available():
            env["cuda_devices"] = torch.cuda.device_count()
            env["device_name"] = torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:
        pass
    return env


def distributed_info() -> dict[str, Any]:
    """Rank, local rank, world size and process-group backend, from torch.distributed or the env."""
    env = os.environ
    info: dict[str, Any] = {
        "rank": int(env.get("RANK", 0)),
        "local_rank": int(env.get("LOCAL_RANK", env.get("RANK", 0))),
        "world_size": int(env.get("WORLD_SIZE", 1)),
        "source": "env" if "RANK" in env or "WORLD_SIZE" in env else "default",
        "backend": None,
    }
    try:
        import torch.distributed as dist  # a torch build may lack torch.distributed: the try answers without it

        if dist.is_available() and dist.is_initialized():
            info["rank"] = dist.get_rank()
            info["world_size"] = dist.get_world_size()
            info["backend"] = str(dist.get_backend())
            info["source"] = "torch.distributed"
    except Exception:
        pass
    return info
