"""Compiler settings that travel with a dump: the non-default torch._inductor, torch._dynamo and
torch._functorch config values at capture, restored on replay.

    >>> torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"
    >>> recorded = config_diff()
    >>> recorded["values"]
    {'inductor.cpp.inject_relu_bug_TESTING_ONLY': 'compile_error'}
    >>> with applied_config(recorded["values"]):   # in another process, on replay
    ...     run_the_graph()

Keys are ``<config>.<name>`` with config one of ``inductor``, ``dynamo``, ``functorch``. Only
JSON values are kept (None, bool, int, float, str, lists and dicts of them; a tuple becomes a
list); a setting holding a callable, a class or a custom pass can't be brought back from JSON
and is listed under ``skipped`` with its type instead. A setting that names a path of the
capturing machine (a cache or debug folder) is skipped too: restored elsewhere it would point
nowhere.

A dump is someone else's file, so restoring is by allow-list (``restorable``): bools, bounded
ints and floats where the setting has that type, and strings only from ``ENUMS``; settings whose
name says program, path, file, cache, log, hook or flag never. What is skipped is shown with why,
and ``--trust-config`` (``GRAPHDBG_TRUST_CONFIG=1``) restores all of it.

Replay overrides travel through the environment, so isolated children see them:
``GRAPHDBG_CONFIG`` (a JSON object of key -> value) and ``GRAPHDBG_NO_CONFIG=1``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import typing
from typing import Any, Iterator

from graphdbg.errors import GraphdbgError

CONFIGS = {"inductor": "torch._inductor.config", "dynamo": "torch._dynamo.config", "functorch": "torch._functorch.config"}
ENV_OVERRIDES = "GRAPHDBG_CONFIG"
ENV_NO_CONFIG = "GRAPHDBG_NO_CONFIG"
# Machine-local paths and switches that only steer logging or caches of the capturing process.
_LOCAL_ONLY = {"dynamo.base_dir", "dynamo.debug_dir_root", "inductor.global_cache_dir", "inductor.worker_log_path",
               "inductor.torchinductor_worker_logpath", "inductor.autoheuristic_log_path"}


def _module(name: str) -> Any:
    return importlib.import_module(CONFIGS[name])


def _portable(value: Any) -> tuple[bool, Any]:
    """(ok, JSON form): tuples become lists; sets, callables and objects are not portable."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, (list, tuple)):
        items = [_portable(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items = {k: _portable(v) for k, v in value.items()}
        return all(ok for ok, _ in items.values()), {k: v for k, (_, v) in items.items()}
    return False, None


def config_diff(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings that differ from their defaults now: ``{"values": {key: value}, "skipped":
    {key: why}}``. ``extra`` (e.g. the ``config_patches`` a backend handed ``compile_fx``) is
    merged in as ``inductor.<name>`` settings."""
    values: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for short in CONFIGS:
        try:
            mod = _module(short)
            entries = getattr(mod, "_config")
            ignore = set(getattr(mod, "_save_config_ignore", ()) or ())
        except Exception:
            continue
        for name in entries:
            key = f"{short}.{name}"
            try:
                if name.startswith("_") or mod._is_default(name):
                    continue
                value = getattr(mod, name)
            except Exception:
                continue
            if name in ignore:  # custom passes and the like: torch itself never saves them
                skipped[key] = f"{type(value).__name__}, which torch does not save"
                continue
            _record(key, value, values, skipped)
    for name, value in (extra or {}).items():
        _record(name if name.split(".", 1)[0] in CONFIGS else f"inductor.{name}", value, values, skipped)
    return {"values": values, "skipped": skipped}


def _record(key: str, value: Any, values: dict[str, Any], skipped: dict[str, str]) -> None:
    if key in _LOCAL_ONLY:
        skipped[key] = "a path of the capturing machine"
        return
    ok, portable = _portable(value)
    if ok:
        values[key] = portable
        skipped.pop(key, None)
    else:
        values.pop(key, None)
        skipped[key] = f"{type(value).__name__} is not JSON"


def parse_override(text: str) -> tuple[str, Any]:
    """``inductor.max_autotune=true`` -> ("inductor.max_autotune", True); values are JSON, else text.
    A key without a known prefix is an Inductor setting."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise GraphdbgError(f"--config {text!r}: expected key=value, e.g. inductor.max_autotune=true")
    if key.split(".", 1)[0] not in CONFIGS:
        key = f"inductor.{key}"
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    short, _, name = key.partition(".")
    try:
        known = name in getattr(_module(short), "_config")
    except Exception:
        known = True
    if not known:
        raise GraphdbgError(f"--config {text!r}: torch.{'_' + short}.config has no setting {name!r}")
    return key, value


def set_replay_overrides(overrides: list[str] | None, no_config: bool, trust_config: bool = False) -> None:
    """What ``--config``/``--no-config``/``--trust-config`` ask for, in the environment (children inherit it)."""
    for name, on in ((ENV_NO_CONFIG, no_config), (ENV_TRUST_CONFIG, trust_config)):
        if on:
            os.environ[name] = "1"
        else:
            os.environ.pop(name, None)
    if overrides:
        os.environ[ENV_OVERRIDES] = json.dumps(dict(parse_override(o) for o in overrides))
    else:
        os.environ.pop(ENV_OVERRIDES, None)


ENV_TRUST_CONFIG = "GRAPHDBG_TRUST_CONFIG"


def replay_settings(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The settings a replay of a dump runs under: the recorded ones that pass the allow-list
    (``restorable``; all of them with ``--trust-config``) unless ``--no-config``, then the
    ``--config`` overrides."""
    return settings_and_skipped(manifest)[0]


def settings_and_skipped(manifest: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """(settings to apply, {recorded key: why it was not restored})."""
    settings: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    if not os.environ.get(ENV_NO_CONFIG):
        recorded = ((manifest or {}).get("config") or {}).get("values") or {}
        trusted = bool(os.environ.get(ENV_TRUST_CONFIG))
        if isinstance(recorded, dict):
            for key, value in recorded.items():
                why = "not a setting name" if not (isinstance(key, str) and _KEY.fullmatch(key)) else (
                    None if trusted else restorable(key, value))
                if why is None:
                    settings[key] = value
                else:
                    skipped[str(key)[:120]] = why
    try:
        overrides = json.loads(os.environ.get(ENV_OVERRIDES) or "{}")
        settings.update(overrides if isinstance(overrides, dict) else {})
    except ValueError:
        pass
    return settings, skipped


@contextlib.contextmanager
def applied_config(settings: dict[str, Any]) -> Iterator[list[str]]:
    """Run with ``settings`` patched into the configs; yields the keys it could not set (a
    setting this torch does not have), which the caller may report."""
    unknown: list[str] = []
    per_module: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        short, _, name = key.partition(".")
        if short not in CONFIGS:
            unknown.append(key)
            continue
        try:
            mod = _module(short)
            if name not in mod._config:
                unknown.append(key)
                continue
            if isinstance(getattr(mod, name), tuple) and isinstance(value, list):
                value = tuple(value)
        except Exception:
            unknown.append(key)
            continue
        per_module.setdefault(short, {})[name] = value
    with contextlib.ExitStack() as stack:
        for short, patch in per_module.items():
            stack.enter_context(_module(short).patch(patch))
        yield unknown


_KEY = re.compile(r"(inductor|dynamo|functorch)(\.[A-Za-z_][A-Za-z0-9_]*)+")
# Settings a dump could use to make a replay run a program, or read or write a place of its
# choosing (a C++ compiler, a CUDA toolchain, a cache, log or debug folder, a hook), whatever
# their type: never taken from someone else's dump (a bool such as ``save_args`` writes files).
# Judged by whole words of the name, so ``fallback_random`` or ``epilogue_fusion`` stay allowed.
_UNSAFE_SECTIONS = frozenset({"aot_inductor", "cutlass", "cuda", "xpu", "rocm", "trace", "lookup_table", "halide"})
_UNSAFE_WORDS = frozenset({
    "save", "trace", "debug", "log", "logs", "logpath", "profile", "profiler", "profiling", "cprofile", "cache",
    "remote", "upload", "dump", "hook", "hooks", "subproc", "worker", "cmd", "command", "path", "dir", "root",
    "file", "script", "custom", "compiler", "cxx", "cc", "nvcc", "ld", "link", "linkage", "march",
    "flag", "env", "exe", "plugin", "runner", "generate", "temps"})
_WORD = re.compile(r"[A-Za-z][a-z0-9]*|[A-Z0-9]+")


def _unsafe_name(key: str) -> bool:
    short, _, name = key.partition(".")
    parts = name.split(".")
    if len(parts) > 1 and parts[0] in _UNSAFE_SECTIONS:
        return True
    return any(w.lower() in _UNSAFE_WORDS for part in parts for w in part.split("_"))


# The string settings that may come from a dump, each with the values it may take. Every other
# string setting (march, compiler flags, backend lists that a new torch may grow) is shown and
# skipped unless --trust-config.
_INJECT = frozenset({"compile_error", "runtime_error", "accuracy"})
ENUMS: dict[str, frozenset[str]] = {
    "inductor.cpp.inject_relu_bug_TESTING_ONLY": _INJECT,
    "inductor.cpp.inject_log1p_bug_TESTING_ONLY": _INJECT,
    "inductor.triton.inject_relu_bug_TESTING_ONLY": _INJECT,
    "inductor.cpu_backend": frozenset({"cpp", "triton", "halide"}),
    "inductor.cuda_backend": frozenset({"triton", "halide"}),
    "inductor.max_autotune_gemm_search_space": frozenset({"DEFAULT", "EXHAUSTIVE"}),
    "inductor.max_autotune_flex_search_space": frozenset({"DEFAULT", "EXHAUSTIVE"}),
    "inductor.memory_pool": frozenset({"none", "intermediates", "outputs", "combined"}),
    "inductor.layout_opt_default": frozenset({"0", "1"}),
    "inductor.triton.descriptive_names": frozenset({"original_aten", "torch", "inductor_node"}),
    "inductor.cpp.descriptive_names": frozenset({"original_aten", "torch", "inductor_node"}),
    "dynamo.automatic_dynamic_shapes_mark_as": frozenset({"dynamic", "unbacked", "oblivious"}),
    "dynamo.numpy_default_float": frozenset({"float64", "float32"}),
    "dynamo.numpy_default_complex": frozenset({"complex128", "complex64"}),
    "dynamo.numpy_default_int": frozenset({"int64", "int32"}),
    "functorch.activation_memory_budget_solver": frozenset({"dp", "greedy", "ilp"}),
    "functorch.activation_memory_budget_runtime_estimator": frozenset({"flops", "profile"}),
}
# Comma-separated lists of these words only (no CUTLASS/CK: they call an outside toolchain).
_BACKEND_LISTS = {"inductor.max_autotune_gemm_backends", "inductor.max_autotune_conv_backends"}
_BACKEND_WORDS = frozenset({"ATEN", "TRITON", "CPP"})
_INT_BOUND = 1 << 20
_INT_BOUNDS = {"inductor.compile_threads": (1, 64)}  # each thread is a compile worker process


def _entry_types(short: str, name: str) -> tuple[bool, set[type]]:
    """(known here, the plain types the setting may hold: bool, int, float, str, type(None))."""
    try:
        entry = _module(short)._config[name]
    except Exception:
        return False, set()
    hint = getattr(entry, "value_type", None)
    args = typing.get_args(hint) if typing.get_args(hint) else (hint,)
    types = {a for a in args if a in (bool, int, float, str, type(None))}
    if not types and entry.default is not None:
        types = {type(entry.default)} & {bool, int, float, str}
    return True, types


def restorable(key: str, value: Any) -> str | None:
    """None when the recorded setting ``key = value`` may be restored from an untrusted dump;
    else why not. Allowed: bools, bounded ints and floats, and strings from ``ENUMS``, each
    only where this torch's setting has that type; never one whose name says program, path, file,
    cache, log or hook (``_unsafe_name``)."""
    if not (isinstance(key, str) and _KEY.fullmatch(key)):
        return "not a setting name"
    short, _, name = key.partition(".")
    if key not in ENUMS and key not in _BACKEND_LISTS and _unsafe_name(key):
        return "names a program, path, file, cache, log or hook"
    known, types = _entry_types(short, name)
    if not known:
        return None  # applied_config reports it as not in this torch and sets nothing
    if value is None:
        return None if type(None) in types else "None where the setting takes a value"
    if isinstance(value, bool):
        return None if bool in types else "a bool where the setting takes another type"
    if isinstance(value, int):
        lo, hi = _INT_BOUNDS.get(key, (-1, _INT_BOUND))
        if int not in types:
            return "an int where the setting takes another type"
        return None if lo <= value <= hi else f"{value} is outside [{lo}, {hi}]"
    if isinstance(value, float):
        ok = float in types and math.isfinite(value) and abs(value) <= _INT_BOUND
        return None if ok else "a float out of range or where the setting takes another type"
    if isinstance(value, str):
        if key in _BACKEND_LISTS and value and set(value.upper().split(",")) <= _BACKEND_WORDS:
            return None
        if value in ENUMS.get(key, ()):
            return None
        return "a string setting (restore it with --trust-config)"
    return f"a {type(value).__name__} setting (restore it with --trust-config)"


def python_lines(settings: dict[str, Any]) -> list[str]:
    """The settings as statements for a standalone repro.py (keys checked, values through repr)."""
    return [f"torch.{'_' + key.partition('.')[0]}.config.{key.partition('.')[2]} = {value!r}"
            for key, value in sorted(settings.items()) if isinstance(key, str) and _KEY.fullmatch(key)]
