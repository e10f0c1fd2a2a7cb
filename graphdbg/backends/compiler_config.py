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

Replay overrides travel through the environment, so isolated children see them:
``GRAPHDBG_CONFIG`` (a JSON object of key -> value) and ``GRAPHDBG_NO_CONFIG=1``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
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


def set_replay_overrides(overrides: list[str] | None, no_config: bool) -> None:
    """What ``--config``/``--no-config`` ask for, in the environment (children inherit it)."""
    if no_config:
        os.environ[ENV_NO_CONFIG] = "1"
    else:
        os.environ.pop(ENV_NO_CONFIG, None)
    if overrides:
        os.environ[ENV_OVERRIDES] = json.dumps(dict(parse_override(o) for o in overrides))
    else:
        os.environ.pop(ENV_OVERRIDES, None)


def replay_settings(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The settings a replay of a dump runs under: the recorded ones unless ``--no-config``,
    then the ``--config`` overrides."""
    settings: dict[str, Any] = {}
    if not os.environ.get(ENV_NO_CONFIG):
        recorded = ((manifest or {}).get("config") or {}).get("values") or {}
        if isinstance(recorded, dict):
            # the dump is untrusted: only well-formed keys, and none that names a program, path or hook
            settings.update({k: v for k, v in recorded.items() if safe_recorded_key(k)})
    try:
        settings.update(json.loads(os.environ.get(ENV_OVERRIDES) or "{}"))
    except ValueError:
        pass
    return settings


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
# Settings a dump could use to make a replay run a program or read/write a place of its choosing
# (a C++ compiler, a CUDA toolchain, a cache or log folder, a hook): never taken from a dump.
_UNSAFE = re.compile(r"(cxx|cc|compiler|cmd|command|exe|binary|path|dir|root|file|cache|log|hook|script|custom|pass"
                     r"|launcher|plugin|profil|trace|debug|cutlass|ck_|rocm|nvcc|ld_|link)", re.I)


def safe_recorded_key(key: Any) -> bool:
    """A recorded setting that may be restored from someone else's dump (see ``_UNSAFE``)."""
    return isinstance(key, str) and _KEY.fullmatch(key) is not None and not _UNSAFE.search(key.partition(".")[2])


def python_lines(settings: dict[str, Any]) -> list[str]:
    """The settings as statements for a standalone repro.py (keys checked, values through repr)."""
    return [f"torch.{'_' + key.partition('.')[0]}.config.{key.partition('.')[2]} = {value!r}"
            for key, value in sorted(settings.items()) if isinstance(key, str) and _KEY.fullmatch(key)]
