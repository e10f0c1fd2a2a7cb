"""``--as-captured``: run a replay under the captured settings, flags, environment variables and
thread counts (the manifest's ``env.settings`` and ``env.vars``, ``store.environment``).

The CLI calls ``restore(manifest)`` before anything compiles and puts the recorded settings in
``GRAPHDBG_AS_CAPTURED``, so an isolated replay child (``execution.child``) restores the same in its
own process; environment variables reach children by inheritance. What can't be restored (versions, the device) is what
``judge.environment`` still lists afterwards.

A dump is someone else's file, so only what is on an allow-list comes back, within its bound: a
flag of ``SETTINGS`` with a value of its type (thread counts up to this machine's CPUs), and an
environment variable of ``backends.restored_vars.ENV_RESTORABLE`` (``var_restorable``: the one
decision for ``--as-captured``, ``bisect envs`` and ``repro.py``). Every other recorded item is
reported, "recorded, not restored", with the reason; a variable the backend itself read, with
the line that sets it. ``--trust-config`` restores the other variables of torch's prefixes too,
but never one naming a place of the capturing machine.

    >>> restore(dump.manifest_data)
    ["env var TORCH_COMPILE_DISABLE: recorded, not restored (not on the allow-list ...)"]
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from typing import Any

import torch

from graphdbg.backends.compiler_config import CONFIGS, CPUS, ENV_TRUST_CONFIG, Range, replay_settings
from graphdbg.backends.restored_vars import ENV_RESTORABLE, NOT_RESTORED, var_restorable
from graphdbg.judge.environment_diff import SET_BY_TORCH, Difference, differences, read_by_backend
from graphdbg.store.capture_environment import SETTINGS, environment
from graphdbg.store.redact import redacted_vars

ENV_AS_CAPTURED = "GRAPHDBG_AS_CAPTURED"
_COMPILER_VARS = ("TORCH", "PYTORCH", "TRITON")
_PRECISIONS = ("highest", "high", "medium")
_DTYPES = ("float32", "float64", "float16", "bfloat16")
_THREADS = Range(1, CPUS)  # a thread count past this machine's CPUs only exhausts its memory (4096: std::bad_alloc)


def _set_sdp(name: str, on: bool) -> None:
    getattr(torch.backends.cuda, name)(on)


# name -> (check of a recorded value, how to set it)
_SETTERS: dict[str, tuple[Any, Any]] = {
    "float32_matmul_precision": (lambda v: v in _PRECISIONS, torch.set_float32_matmul_precision),
    "deterministic_algorithms": (lambda v: isinstance(v, bool), lambda v: torch.use_deterministic_algorithms(v, warn_only=True)),
    "default_dtype": (lambda v: v in _DTYPES, lambda v: torch.set_default_dtype(getattr(torch, v))),
    "cuda.matmul.allow_tf32": (None, lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
    "cuda.matmul.allow_fp16_reduced_precision_reduction": (
        None, lambda v: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", v)),
    "cuda.matmul.allow_bf16_reduced_precision_reduction": (
        None, lambda v: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", v)),
    "cudnn.enabled": (None, lambda v: setattr(torch.backends.cudnn, "enabled", v)),
    "cudnn.allow_tf32": (None, lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
    "cudnn.deterministic": (None, lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    "cudnn.benchmark": (None, lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    "sdp.flash": (None, lambda v: _set_sdp("enable_flash_sdp", v)),
    "sdp.mem_efficient": (None, lambda v: _set_sdp("enable_mem_efficient_sdp", v)),
    "sdp.math": (None, lambda v: _set_sdp("enable_math_sdp", v)),
    "sdp.cudnn": (None, lambda v: _set_sdp("enable_cudnn_sdp", v)),
    "mkldnn.enabled": (None, lambda v: setattr(torch.backends.mkldnn, "enabled", v)),
    "num_threads": (lambda v: isinstance(v, int) and _THREADS.why_not(v) is None, torch.set_num_threads),
    "num_interop_threads": (lambda v: isinstance(v, int) and _THREADS.why_not(v) is None, torch.set_num_interop_threads),
}
if set(_SETTERS) != set(SETTINGS):
    raise ImportError("replay.as_captured: every setting store.environment records needs a way back here")


def _env(manifest: Any) -> dict[str, Any]:
    env = manifest.get("env") if isinstance(manifest, dict) else None
    return env if isinstance(env, dict) else {}


def restore(manifest: Any) -> list[str]:
    """Restore in this process what the dump recorded and may be restored; returns a line for
    each recorded item left as it is, and why. Versions and the device are never restored."""
    env = _env(manifest)
    left: list[str] = []
    recorded = env.get("settings") if isinstance(env.get("settings"), dict) else {}
    for name, value in recorded.items():
        why = setting_restorable(name, value)
        if why is not None:
            left.append(f"setting {str(name)[:120]}: {NOT_RESTORED} ({why})")
            continue
        apply = _SETTERS[name][1]
        try:
            if SETTINGS[name]() == value:  # as captured already: torch refuses a mix of its old and new precision flags
                continue
            apply(value)
        except Exception as e:  # e.g. interop threads, settable only before parallel work started
            left.append(f"setting {name}: {NOT_RESTORED} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    left += restore_vars(env.get("vars"), read_by_backend(env))
    return left


def setting_restorable(name: Any, value: Any) -> str | None:
    """None if the recorded flag or thread count ``name = value`` may be restored here, else why not."""
    if name not in _SETTERS:
        return "not known here"
    check = _SETTERS[name][0]
    if check(value) if check else isinstance(value, bool):
        return None
    return f"{str(value)[:40]!r} is not a value it takes here" + (f" ({_THREADS.shown()})" if name in ("num_threads", "num_interop_threads") else "")


def restore_vars(recorded: Any, read: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Set the recorded environment variables that may be restored (``var_restorable``), unset
    those on the allow-list the capture did not have; returns a line for each recorded one left
    as it is, and why (``read``: the variables the backend itself read, said so)."""
    if not isinstance(recorded, dict):
        return []
    trust = bool(os.environ.get(ENV_TRUST_CONFIG))
    left = []
    for name, value, why in decisions(recorded, trust):
        if why is None:
            os.environ[name] = value
        else:
            whose = ", read by the backend" if name in read else ""
            left.append(f"env var {str(name)[:120]}{whose}: {NOT_RESTORED} ({why})")
    # set now, unset at capture: those the list restores go; with --trust-config the compiler's own
    # too, as before; the machine's (CUDA_VISIBLE_DEVICES, OMP_..., the user's own) stay
    for name in [k for k in os.environ if k not in recorded]:
        if var_can_return(name, None, trust):
            del os.environ[name]
    return left


def decisions(recorded: dict[Any, Any], trust: bool) -> list[tuple[Any, Any, str | None]]:
    """(name, value, why it is not restored or None) for each recorded variable but those the
    replay's compile sets itself (``SET_BY_TORCH``)."""
    _, places = redacted_vars({k: v for k, v in recorded.items() if isinstance(k, str) and isinstance(v, str)})
    return [(name, value, var_restorable(name, value, trust, place=f"vars.{name}" in places and name not in ENV_RESTORABLE))
            for name, value in recorded.items() if not (name in SET_BY_TORCH and name not in os.environ)]


def _marked(found: list[Difference]) -> list[Difference]:
    """``found`` with each variable's ``restorable`` as ``--as-captured`` decides it."""
    trust = bool(os.environ.get(ENV_TRUST_CONFIG))
    return [dataclasses.replace(d, restorable=var_can_return(d.name, d.captured, trust)) if d.kind == "env var" else d
            for d in found]


def var_can_return(name: str, captured: Any, trust: bool) -> bool:
    """Whether ``--as-captured`` gives variable ``name`` its captured value: sets it
    (``var_restorable``), or unsets it where the capture had none (those on the list, and
    under ``--trust-config`` the compiler's own)."""
    if captured is None:
        return name in ENV_RESTORABLE or (trust and name.startswith(_COMPILER_VARS) and name not in SET_BY_TORCH)
    return var_restorable(name, captured, trust) is None


def prepare(manifest: Any, as_captured: bool) -> tuple[list[Any], list[str]]:
    """What the CLI does before a replay: with ``as_captured``, restore here and ask the replay
    children to (``ENV_AS_CAPTURED``); then (the differences left, most likely cause first
    (``judge.environment``), the lines of what was not restored)."""
    left: list[str] = []
    if as_captured:
        left = restore(manifest)
        recorded = _env(manifest).get("settings")
        os.environ[ENV_AS_CAPTURED] = json.dumps(recorded if isinstance(recorded, dict) else {})
    else:
        os.environ.pop(ENV_AS_CAPTURED, None)
    backend = manifest.get("backend") if isinstance(manifest, dict) else None
    read = read_by_backend(_env(manifest))  # the backend's own variables: compared by their values now
    now = environment(backend if isinstance(backend, str) else None, {n: os.environ.get(n) for n in read})
    return _marked(differences(manifest, now, _replayed_config(manifest))), left


_UNSET = object()


def _replayed_config(manifest: Any) -> dict[str, Any]:
    """The compiler settings the replay runs under, for each one the dump recorded or the replay
    sets: the one restored or overridden, else this torch's value now (a recorded setting not
    restored differs only if torch's own value is another); a setting this torch lacks is left out."""
    settings = dict(replay_settings(manifest))
    config = manifest.get("config") if isinstance(manifest, dict) else None
    recorded = config.get("values") if isinstance(config, dict) and isinstance(config.get("values"), dict) else {}
    for key in recorded:
        if key in settings or not isinstance(key, str):
            continue
        short, _, name = key.partition(".")
        try:
            value: Any = importlib.import_module(CONFIGS[short])
            for part in name.split("."):
                value = getattr(value, part, _UNSET)
        except Exception:
            continue
        if value is not _UNSET:
            settings[key] = list(value) if isinstance(value, tuple) else value
    return settings


def restore_if_asked() -> list[str]:
    """In a replay child: the settings the CLI restored for ``--as-captured`` (``ENV_AS_CAPTURED``,
    whichever graph the child runs: a minify candidate is a dump of its own); the variables it
    set came with the child's environment."""
    try:
        recorded = json.loads(os.environ.get(ENV_AS_CAPTURED) or "null")
    except ValueError:
        return []
    return restore({"env": {"settings": recorded}}) if isinstance(recorded, dict) else []


# torch's defaults of the SETTINGS that a repro.py sets when they differ (thread counts are the
# machine's, left to it)
_DEFAULTS = {"float32_matmul_precision": "highest", "deterministic_algorithms": False, "default_dtype": "float32",
             "cuda.matmul.allow_tf32": False, "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
             "cuda.matmul.allow_bf16_reduced_precision_reduction": True, "cudnn.enabled": True, "cudnn.allow_tf32": True,
             "cudnn.deterministic": False, "cudnn.benchmark": False, "sdp.flash": True, "sdp.mem_efficient": True,
             "sdp.math": True, "sdp.cudnn": True, "mkldnn.enabled": True}
_STATEMENTS = {"float32_matmul_precision": "torch.set_float32_matmul_precision({!r})",
               "deterministic_algorithms": "torch.use_deterministic_algorithms({!r}, warn_only=True)",
               "default_dtype": "torch.set_default_dtype(getattr(torch, {!r}))",
               "sdp.flash": "torch.backends.cuda.enable_flash_sdp({!r})",
               "sdp.mem_efficient": "torch.backends.cuda.enable_mem_efficient_sdp({!r})",
               "sdp.math": "torch.backends.cuda.enable_math_sdp({!r})", "sdp.cudnn": "torch.backends.cuda.enable_cudnn_sdp({!r})"}


def python_lines(manifest: Any) -> list[str]:
    """With ``--as-captured``: statements for a standalone repro.py that set what the replay
    restored (settings off torch's defaults, environment variables that may be restored); else
    none. Values go through repr, names are checked here."""
    if not os.environ.get(ENV_AS_CAPTURED):
        return []
    env = _env(manifest)
    settings = env.get("settings") if isinstance(env.get("settings"), dict) else {}
    lines = []
    for name, value in settings.items():
        if name not in _DEFAULTS or value == _DEFAULTS[name]:
            continue
        if name == "cuda.matmul.allow_tf32" and value and settings.get("float32_matmul_precision") in ("high", "medium"):
            continue  # that precision turns it on, and torch refuses its old and new flags mixed
        check = _SETTERS[name][0]
        if not (check(value) if check else isinstance(value, bool)):
            continue
        lines.append(_STATEMENTS[name].format(value) if name in _STATEMENTS else f"torch.backends.{name} = {value!r}")
    recorded = env.get("vars") if isinstance(env.get("vars"), dict) else {}
    for name, value, why in sorted(decisions(recorded, bool(os.environ.get(ENV_TRUST_CONFIG))), key=lambda d: str(d[0])):
        if why is None:  # what restore_vars sets, decided the same way
            lines.append(f"os.environ[{name!r}] = {value!r}")
    if not lines:
        return []
    return ["# As captured (--as-captured): the settings and environment variables the failure needed", "import os",
            *lines]
