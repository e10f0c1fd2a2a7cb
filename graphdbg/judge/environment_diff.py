"""What differs between the environment a dump was captured in and the replay's, most likely
cause of a different outcome first.

A replay that passes where the capture failed is rarely a fixed bug: another backend version, a
compiler setting not restored, TF32 off, another thread count. ``differences(manifest)`` names
each difference with the recorded and the current value:

    >>> differences(dump.manifest_data, environment(backend), replay_settings(dump.manifest_data))
    [Difference(kind='setting', name='float32_matmul_precision', captured='medium', now='highest', restorable=True), ...]

Order (``RANK``): the code Inductor generated (known after the replay: ``code_differences``, a
consequence of what follows but the plainest sign that the compiler did something else), the
backend's version and settings, then torch's and triton's versions,
Python, CUDA and the driver, the device, ``torch.backends`` flags and precision, environment
variables, thread counts; before all of them, a variable the backend itself read while it
compiled and first ran (``read_by_backend``: ``os.environ["MYKERNEL_MODE"]``), the most direct
cause. ``restorable`` says whether ``--as-captured`` can bring it back (``replay.as_captured``
decides it, by the allow-lists); a version or a device it cannot.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Any

# kind -> rank; within a kind, the order below
RANK = {"generated code": -1, "backend": 0, "compiler setting": 1, "version": 2, "device": 3, "setting": 4, "env var": 5, "threads": 6}
VERSIONS = ("torch", "triton", "python", "cuda", "driver")
THREADS = ("num_threads", "num_interop_threads")
# environment variables of the compiler itself before those of the libraries under it
# Variables Inductor sets itself while it compiles (its cache folders, the ptxas it found): unset
# before a replay compiles, they are no difference; set by the user, they are compared.
SET_BY_TORCH = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "TRITON_LIBDEVICE_PATH",
                          "TORCH_WARM_POOL"})
_VAR_ORDER = ("TORCHINDUCTOR", "TORCHDYNAMO", "TORCH", "PYTORCH", "TRITON", "CUDA", "CUBLAS", "CUDNN", "NVIDIA", "NCCL")
# The environment variables a dump records, by prefix (``store.environment``): those torch and the
# libraries under it read; GRAPHDBG_* are graphdbg's own and decide nothing about the graph.
# Any other recorded variable is one the backend read while it compiled and first ran (the
# manifest's ``env.read`` names those, unset ones too).
ENV_PREFIXES = ("TORCH", "PYTORCH", "TRITON", "CUDA", "CUBLAS", "CUDNN", "NCCL", "NVIDIA_TF32", "OMP", "KMP", "MKL")


@dataclass(frozen=True)
class Difference:
    kind: str
    name: str
    captured: Any
    now: Any
    restorable: bool
    read_by_backend: bool = False  # an env var the backend read while it compiled and first ran: ranked first

    def line(self) -> str:
        """``setting float32_matmul_precision: 'medium' at capture, 'highest' now``; a variable
        the backend read says so, and how to give it the captured value."""
        return f"{self.head()}: {self.values()}"

    def head(self) -> str:
        return f"{self.kind} {self.name}" + (", read by the backend" if self.read_by_backend else "")

    def values(self) -> str:
        text = f"{_shown(self.captured)} at capture, {_shown(self.now)} now"
        if self.read_by_backend and not self.restorable and self.captured != "<redacted>":
            text += f"; to replay as captured: {set_line(self.name, self.captured)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def set_line(name: str, value: Any) -> str:
    """The shell line that gives variable ``name`` its captured ``value`` (None: unset), quoted."""
    return f"unset {shlex.quote(name)}" if value is None else f"export {shlex.quote(name)}={shlex.quote(str(value))}"


def read_by_backend(env: dict[str, Any]) -> set[str]:
    """The variables a dump's ``env`` says its backend read: ``env.read``, and any recorded
    variable outside ``ENV_PREFIXES`` (capture records no other; ``read`` may be gone from a
    dump rewritten by another tool)."""
    read = env.get("read")
    names = {n for n in read if isinstance(n, str)} if isinstance(read, list) else set()
    recorded_vars = env.get("vars")
    if isinstance(recorded_vars, dict):
        names |= {n for n in recorded_vars if isinstance(n, str) and not n.startswith(ENV_PREFIXES)}
    return names


def ranked(found: list[Difference]) -> list[Difference]:
    """Most likely cause first: a variable the backend itself read, then by kind (``RANK``);
    stable, so each kind keeps its own order."""
    return sorted(found, key=lambda d: (not d.read_by_backend, RANK.get(d.kind, len(RANK))))


def _var_rank(name: str) -> int:
    return next((i for i, p in enumerate(_VAR_ORDER) if name.startswith(p)), len(_VAR_ORDER))


def recorded(manifest: dict[str, Any] | None) -> bool:
    """Whether the dump recorded an environment to compare (dumps from before graphdbg did not):
    without one there is nothing to compare, and an isolated replay's parent needn't import torch."""
    env = manifest.get("env") if isinstance(manifest, dict) else None
    return isinstance(env, dict) and any(env.get(k) for k in ("settings", "vars", "device"))


def differences(manifest: dict[str, Any] | None, now: dict[str, Any], replayed: dict[str, Any]) -> list[Difference]:
    """The differences between the manifest's ``env`` and ``now`` (``store.environment.environment()``
    of the replaying process), and between its recorded compiler settings (``config``) and those
    the replay runs under (``replayed``: ``backends.compiler_config.replay_settings``), most
    likely cause first. What the dump did not record is not compared (a dump from before
    graphdbg recorded it)."""
    if not isinstance(manifest, dict):
        return []
    env = manifest.get("env") if isinstance(manifest.get("env"), dict) else {}
    found: list[Difference] = []

    if env.get("backend_package") is not None and (env.get("backend_package"), env.get("backend_version")) != (
            now.get("backend_package"), now.get("backend_version")):
        name = str(env.get("backend_package"))
        found.append(Difference("backend", f"{name} version", env.get("backend_version"),
                                now.get("backend_version") if now.get("backend_package") == name else None, False))
    found += _compiler_settings(manifest, replayed)
    for key in VERSIONS:
        if env.get(key) is not None and env.get(key) != now.get(key):  # None: not recorded (an older dump)
            found.append(Difference("version", key, env.get(key), now.get(key), False))
    captured_device, device_now = env.get("device"), now.get("device") or {}
    if isinstance(captured_device, dict):
        for key, value in captured_device.items():
            if value != device_now.get(key):
                found.append(Difference("device", key, value, device_now.get(key), False))
    captured_settings, settings_now = env.get("settings"), now.get("settings") or {}
    if isinstance(captured_settings, dict):
        for key, value in captured_settings.items():
            if value != settings_now.get(key):
                found.append(Difference("threads" if key in THREADS else "setting", key, value, settings_now.get(key), True))
    captured_vars, vars_now = env.get("vars"), now.get("vars") or {}
    if isinstance(captured_vars, dict):
        read = read_by_backend(env)
        for key in sorted(set(captured_vars) | set(vars_now) | read, key=lambda k: (_var_rank(k), k)):
            if key in SET_BY_TORCH and key not in vars_now:
                continue  # the replay's compile sets it as the capture's did
            if captured_vars.get(key) != vars_now.get(key) and captured_vars.get(key) != "<redacted>":
                found.append(Difference("env var", key, captured_vars.get(key), vars_now.get(key), True, key in read))
    return ranked(found)


def _compiler_settings(manifest: dict[str, Any], replayed: dict[str, Any]) -> list[Difference]:
    """Recorded compiler settings the replay will not run under (not restorable, ``--no-config``,
    or overridden by ``--config``), and ``--config`` settings the capture did not have."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    recorded = config.get("values") if isinstance(config.get("values"), dict) else {}
    found = []
    for key in sorted(set(recorded) | set(replayed)):
        if recorded.get(key) != replayed.get(key):
            found.append(Difference("compiler setting", str(key), recorded.get(key), replayed.get(key), False))
    return found


def code_differences(manifest: dict[str, Any] | None, generated: dict[str, Any] | None) -> list[Difference]:
    """Where what Inductor generated in the replay (the Outcome's ``generated_code``) differs from
    what it generated at capture (the manifest's): the output code's hash, then each autotune
    choice both made. Nothing when either side has none (another backend, an older dump, a
    compile that failed before it generated code)."""
    captured = manifest.get("generated_code") if isinstance(manifest, dict) else None
    if not isinstance(captured, dict) or not isinstance(generated, dict) or not captured.get("hash") or not generated.get("hash"):
        return []
    found = []
    if captured["hash"] != generated["hash"]:
        found.append(Difference("generated code", "inductor output code hash", captured["hash"], generated["hash"], False))
    before, now = captured.get("autotune") or {}, generated.get("autotune") or {}
    for name in sorted(set(before) & set(now)):
        if before[name] != now[name]:
            found.append(Difference("generated code", f"autotune choice of {name}", before[name], now[name], False))
    return found


def suspects(found: list[Difference], limit: int = 3) -> str:
    """The first differences, as the verdict names them: ``setting float32_matmul_precision
    ('medium' at capture, 'highest' now)``."""
    shown = [f"{d.head()} ({d.values()})" for d in found[:limit]]
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return ", ".join(shown) + more
