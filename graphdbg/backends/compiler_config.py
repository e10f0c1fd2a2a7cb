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

A dump is someone else's file, so replay restores a recorded setting only through an
allow-list (``restorable``): the settings ``RESTORABLE`` names, each with the reason restoring
it cannot stop compilation, hide an error, or write or run anything, with a value of its type.
Every other one (``dynamo.disable``, ``dynamo.suppress_errors``, ``dynamo.cprofile``, every
free string such as ``inductor.cpp.march``, which reaches the C++ compiler's command line) is
listed as a stand-in and skipped unless ``--trust-config``; ``NEVER`` (``inductor.save_args``,
``dynamo.cprofile``, machine paths) is skipped even then.

Replay overrides travel through the environment, so isolated children see them:
``GRAPHDBG_CONFIG`` (a JSON object of key -> value), ``GRAPHDBG_NO_CONFIG=1`` and
``GRAPHDBG_TRUST_CONFIG=1``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import types
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
                if _patched_to_default(entries[name], value):
                    continue
            except Exception:
                continue
            if name in ignore:  # custom passes and the like: torch itself never saves them
                skipped[key] = f"{type(value).__name__}, which torch does not save"
                continue
            _record(key, value, values, skipped)
    for name, value in (extra or {}).items():
        _record(name if name.split(".", 1)[0] in CONFIGS else f"inductor.{name}", value, values, skipped)
    return {"values": values, "skipped": skipped}


def _patched_to_default(entry: Any, value: Any) -> bool:
    """A setting torch itself patches to its default value while it compiles (Dynamo sets
    ``capture_scalar_outputs=False`` under ``dynamic=True``): no difference to record. Restored,
    it would pin a value the replay must be free to choose (``.item()`` kept in a re-trace)."""
    nothing = object()
    default = getattr(entry, "default", nothing)
    env = (getattr(entry, "env_value_force", nothing), getattr(entry, "env_value_default", nothing))
    # an environment variable may set another default; a sentinel (not a value) means none did
    env_set = any(v is not nothing and type(v).__name__ != "object" for v in env)
    return default is not nothing and not env_set and type(value) is type(default) and value == default


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
    """What ``--config``/``--no-config``/``--trust-config`` ask for, in the environment
    (children inherit it)."""
    if trust_config:
        os.environ[ENV_TRUST_CONFIG] = "1"
    else:
        os.environ.pop(ENV_TRUST_CONFIG, None)
    if no_config:
        os.environ[ENV_NO_CONFIG] = "1"
    else:
        os.environ.pop(ENV_NO_CONFIG, None)
    if overrides:
        os.environ[ENV_OVERRIDES] = json.dumps(dict(parse_override(o) for o in overrides))
    else:
        os.environ.pop(ENV_OVERRIDES, None)


ENV_TRUST_CONFIG = "GRAPHDBG_TRUST_CONFIG"


class Settings(dict):
    """The settings a replay runs under (key -> value), and ``skipped``: recorded ones left out
    (key -> why), which the Outcome lists as stand-ins."""

    skipped: dict[str, str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skipped = {}

    def shown(self) -> list[str]:
        return [f"setting {key}: recorded, not restored ({why})" for key, why in self.skipped.items()]


def replay_settings(manifest: dict[str, Any] | None) -> Settings:
    """The settings a replay of a dump runs under: the recorded ones unless ``--no-config``,
    each through the allow-list (``restorable``) unless ``--trust-config``, then the
    ``--config`` overrides (the user's own command line, not checked)."""
    settings = Settings()
    if not os.environ.get(ENV_NO_CONFIG):
        config = manifest.get("config") if isinstance(manifest, dict) else None
        recorded = config.get("values") if isinstance(config, dict) else None
        recorded = recorded if isinstance(recorded, dict) else {}
        trust = bool(os.environ.get(ENV_TRUST_CONFIG))
        for key, value in recorded.items():
            why = restorable(key, value, trust)
            if why is None:
                settings[key] = value
            else:
                settings.skipped[str(key)[:120]] = why
    try:
        overrides = json.loads(os.environ.get(ENV_OVERRIDES) or "{}")
    except ValueError:
        overrides = {}
    if isinstance(overrides, dict):
        settings.update(overrides)
        for key in overrides:
            settings.skipped.pop(key, None)
    return settings


def not_restored(unknown: list[str]) -> list[str]:
    """The stand-in lines for recorded settings ``applied_config`` could not set."""
    return [f"setting {key}: not in this torch, not restored" for key in unknown]


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


CPUS = "cpus"  # a bound sized to the replaying machine: os.cpu_count()


class Bound(typing.NamedTuple):
    """The values a restored setting or variable may take: numbers from ``low`` to ``high``
    (``CPUS``: this machine's CPU count), or one of ``values``. A variable's value is text: a
    number in the range written in decimal, or one of the words."""

    low: float | None = None
    high: float | str | None = None
    values: frozenset[Any] | None = None

    def top(self) -> float | None:
        return (os.cpu_count() or 1) if self.high == CPUS else typing.cast("float | None", self.high)

    def why_not(self, value: Any) -> str | None:
        """None if ``value`` (a setting's value, or a variable's text) is within the bound, else why not."""
        if self.values is not None:
            ok = any(type(value) is type(v) and value == v for v in self.values)  # 1 is not True
            return None if ok else f"{_short(value)} is not one of {self.shown()}"
        number: Any = value
        if isinstance(value, str):
            if not re.fullmatch(r"-?[0-9]{1,12}(\.[0-9]{1,12})?", value):
                return f"{_short(value)} is not a number"
            number = float(value) if "." in value else int(value)
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            return f"{_short(value)} is not a number"
        top = self.top()
        if (self.low is not None and number < self.low) or (top is not None and number > top):
            return f"{_short(value)} is outside {self.shown()}"
        return None

    def shown(self, here: bool = True) -> str:
        """``{off, on, fast}``, ``1 to 3``, ``1 to this machine's CPU count (16)`` (the count ``here`` only)."""
        if self.values is not None:
            return "{" + ", ".join(sorted(repr(v) if not isinstance(v, str) else v for v in self.values)) + "}"
        high = (f"this machine's CPU count ({self.top()})" if here else "this machine's CPU count") if self.high == CPUS else self.high
        return f"{self.low} to {high}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def Range(low: float, high: float | str) -> Bound:  # noqa: N802 - reads as the bound it makes
    return Bound(low=low, high=high)


def Words(*words: Any) -> Bound:  # noqa: N802 - reads as the bound it makes
    return Bound(values=frozenset(words))


FLAG = Words("0", "1")  # a variable torch reads as a boolean


class Rule(typing.NamedTuple):
    reason: str  # why restoring it cannot stop compilation, hide an error, or write or run anything
    bound: Bound | None = None  # the values it is restored with: a range sized to the machine, or a fixed set


_CODEGEN = ("chooses how Inductor lowers, fuses, lays out or tunes the graph: the code is still generated, "
            "compiled and run, and its errors raised")
_CHECKS = "adds checks or fallbacks to the generated code: more errors are raised, none is hidden"
_TRACING = ("chooses how Dynamo or AOTAutograd trace and partition the graph (shapes, captured ops, recomputation): "
            "the result is still compiled")
_RUNTIME = "chooses how the compiled kernels are launched (CUDA graphs, threads): it is still the compiled code that runs"
_LIMIT = "a recompile limit, restored only at 1 or more (0 would skip compiling): the replay compiles once"
_TESTING = "Inductor's own bug injection for its tests: makes compilation fail or miscompute, never pass"

# The recorded settings a replay restores from someone else's dump: each named, with the reason
# restoring it cannot stop compilation, hide an error, or write or run anything. Every other
# setting (``dynamo.disable``, ``dynamo.suppress_errors``, ``dynamo.cprofile``, a cache, a log, a
# compiler flag, a hook, one added by a newer torch) is not restored, and the replay's stand-ins
# say so; ``--trust-config`` restores those too, but ``NEVER``.
RESTORABLE: dict[str, Rule] = {
    **dict.fromkeys([f"inductor.{n}" for n in (
        "max_autotune", "max_autotune_gemm", "max_autotune_pointwise", "coordinate_descent_tuning", "epilogue_fusion",
        "epilogue_fusion_first", "pattern_matcher", "freezing", "cpp_wrapper", "split_reductions", "aggressive_fusion",
        "permute_fusion", "layout_optimization", "force_layout_optimization", "layout_opt_default", "keep_output_stride",
        "emulate_precision_casts", "comprehensive_padding", "padding_alignment_bytes", "shape_padding", "force_shape_pad",
        "combo_kernels", "reorder_for_locality", "dce", "memory_planning", "realize_opcount_threshold",
        "realize_reads_threshold", "realize_acc_reads_threshold", "max_fusion_size", "unroll_reductions_threshold",
        "cpu_backend", "cuda_backend", "split_cat_fx_passes", "group_fusion", "use_mixed_mm", "force_fuse_int_mm_with_mul",
        "b2b_gemm_pass", "benchmark_fusion", "loop_ordering_after_fusion", "score_fusion_memory_threshold",
        "max_pointwise_cat_inputs", "online_softmax", "joint_graph_constant_folding", "reorder_for_compute_comm_overlap",
        "allow_buffer_reuse", "inplace_buffers", "decompose_mem_bound_mm", "assume_aligned_inputs", "conv_1x1_as_mm",
        "force_disable_caches", "triton.unique_kernel_names", "triton.persistent_reductions", "triton.divisible_by_16",
        "triton.use_block_ptr", "triton.autotune_pointwise", "triton.max_tiles", "triton.prefer_nd_tiling",
        "triton.tiling_prevents_pointwise_fusion", "triton.multi_kernel", "cpp.simdlen", "cpp.vec_isa_ok",
        "cpp.enable_tiling_heuristics", "cpp.enable_unsafe_math_opt_flag", "cpp.enable_floating_point_contract_flag",
        "cpp.max_horizontal_fusion_size", "cpp.min_chunk_size", "cpp.use_decompose_tanh", "cpp.enable_loop_tail_vec",
        "cpp.fallback_scatter_reduce_sum")], Rule(_CODEGEN)),
    **dict.fromkeys([f"inductor.{n}" for n in ("fallback_random", "implicit_fallbacks", "size_asserts", "nan_asserts",
                                                 "debug_index_asserts")], Rule(_CHECKS)),
    **dict.fromkeys([f"inductor.{n}" for n in ("triton.cudagraphs", "triton.cudagraph_trees", "cpp.threads",
                                                 "cpp.dynamic_threads")], Rule(_RUNTIME)),
    **dict.fromkeys([f"inductor.{n}" for n in ("cpp.inject_relu_bug_TESTING_ONLY", "cpp.inject_log1p_bug_TESTING_ONLY",
                                                 "triton.inject_relu_bug_TESTING_ONLY")], Rule(_TESTING)),
    **dict.fromkeys([f"dynamo.{n}" for n in (
        "dynamic_shapes", "assume_static_by_default", "automatic_dynamic_shapes", "specialize_int", "specialize_float",
        "capture_scalar_outputs", "capture_dynamic_output_shape_ops", "inline_inbuilt_nn_modules", "guard_nn_modules",
        "allow_unspec_int_on_nn_module", "prefer_deferred_runtime_asserts_over_guards", "error_on_recompile",
        "optimize_ddp", "numpy_default_float", "numpy_default_int", "numpy_default_complex", "use_numpy_random_stream",
        "capture_autograd_function", "capture_func_transforms", "force_parameter_static_shapes",
        "force_nn_module_property_static_shapes", "allow_rnn", "trace_numpy")], Rule(_TRACING)),
    **dict.fromkeys([f"dynamo.{n}" for n in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                                               "accumulated_recompile_limit")], Rule(_LIMIT, Range(1, 1 << 16))),
    **dict.fromkeys([f"functorch.{n}" for n in (
        "activation_memory_budget", "activation_memory_budget_solver", "activation_memory_budget_runtime_estimator", "cse",
        "recompute_views", "donated_buffer", "view_replay_for_aliased_outputs", "treat_parameters_as_free_to_save",
        "ban_recompute_used_far_apart", "ban_recompute_long_fusible_chains", "ban_recompute_materialized_backward",
        "ban_recompute_not_in_allowlist", "ban_recompute_reductions", "functionalize_rng_ops", "fake_tensor_allow_meta",
        "max_dist_from_bw", "aggressive_recomputation", "unlift_effect_tokens", "graphsafe_rng_functionalization",
        "fake_tensor_allow_unsafe_data_ptr_access")],
        Rule(_TRACING)),
}
# The bounds of the settings whose value reaches a resource (threads, padding, code size, compile
# time) or turns a check off: a number in a range, sized to this machine where it counts threads,
# or the one value that adds checks. A range holds under --trust-config too: it is this machine's.
_BOUNDS: dict[str, Bound] = {
    "inductor.cpp.threads": Range(-1, CPUS), "inductor.padding_alignment_bytes": Range(1, 4096),
    "inductor.realize_opcount_threshold": Range(0, 4096), "inductor.realize_reads_threshold": Range(0, 4096),
    "inductor.realize_acc_reads_threshold": Range(0, 4096), "inductor.max_fusion_size": Range(1, 4096),
    "inductor.unroll_reductions_threshold": Range(0, 1024), "inductor.score_fusion_memory_threshold": Range(0, 1 << 20),
    "inductor.max_pointwise_cat_inputs": Range(0, 1024), "inductor.triton.max_tiles": Range(1, 3),
    "inductor.cpp.simdlen": Range(0, 2048), "inductor.cpp.max_horizontal_fusion_size": Range(0, 1024),
    "inductor.cpp.min_chunk_size": Range(1, 1 << 24), "functorch.activation_memory_budget": Range(0, 1),
    "functorch.max_dist_from_bw": Range(0, 1 << 20),
    **dict.fromkeys(("inductor.size_asserts", "inductor.nan_asserts", "inductor.debug_index_asserts"), Words(True)),
}
RESTORABLE.update({key: RESTORABLE[key]._replace(bound=bound) for key, bound in _BOUNDS.items() if key in RESTORABLE})
# ... and these not even with --trust-config: they write files (where the dump says, or a
# profile and its rendering by ``gprof2dot``/``dot``), or name a place of the capturing machine.
NEVER_KEYS = frozenset({"dynamo.cprofile", "inductor.trace.enabled", "inductor.trace.save_real_tensors",
                        "inductor.benchmark_kernel", "inductor.cpp.enable_kernel_profile"})
NEVER = re.compile(r"(save_args|(^|[._])(base_dir|debug_dir|debug_dir_root|global_cache_dir|output_path)$|log_?path|logpath"
                   r"|upload|proton_output_dir|pareto_dir|profile_path|profile_bandwidth_output)", re.I)
# String settings torch types as plain ``str`` whose values form a known, fixed set.
ENUMS: dict[str, frozenset[str]] = {
    "inductor.cpp.inject_relu_bug_TESTING_ONLY": frozenset({"compile_error", "runtime_error", "accuracy"}),
    "inductor.cpp.inject_log1p_bug_TESTING_ONLY": frozenset({"accuracy"}),
    "inductor.triton.inject_relu_bug_TESTING_ONLY": frozenset({"compile_error", "runtime_error", "accuracy"}),
    "inductor.cpp.enable_floating_point_contract_flag": frozenset({"off", "on", "fast"}),
    "functorch.activation_memory_budget_solver": frozenset({"dp", "greedy", "ilp"}),
    "functorch.activation_memory_budget_runtime_estimator": frozenset({"flops", "profile", "testing"}),
    "dynamo.numpy_default_float": frozenset({"float16", "float32", "float64"}),
    "dynamo.numpy_default_int": frozenset({"int32", "int64"}),
    "dynamo.numpy_default_complex": frozenset({"complex64", "complex128"}),
    "inductor.layout_opt_default": frozenset({"0", "1"}),
}
INT_BOUND = 1 << 31


def _value_type(key: str) -> Any:
    short, _, name = key.partition(".")
    try:
        return _module(short)._config[name].value_type
    except Exception:
        return None


def _allowed_type(value_type: Any, value: Any) -> str | None:
    """None if ``value`` fits ``value_type`` as a bool, a bounded int or float, or a member of a
    ``Literal``; else why not."""

    origin = typing.get_origin(value_type)
    args = typing.get_args(value_type)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        whys = [_allowed_type(a, value) for a in args if a is not type(None)]
        return None if any(w is None for w in whys) else (whys[0] if whys else "not a typed setting")
    if origin is typing.Literal:
        return None if value in args and not isinstance(value, (list, dict)) else "a value outside its fixed set"
    if value_type is bool:
        return None if isinstance(value, bool) else "not a bool"
    if value_type is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and -INT_BOUND < value < INT_BOUND
        return None if ok else "not an int in range"
    if value_type is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) < INT_BOUND
        return None if ok else "not a finite float in range"
    if value_type is str:
        return "a string setting"
    return "not a bool, int, float or fixed choice"


def restorable(key: Any, value: Any, trust: bool = False) -> str | None:
    """None if the recorded setting ``key = value`` may be restored from someone else's dump,
    else why not. Without ``trust``, only the settings ``RESTORABLE`` names (each with its
    reason), with a value of the setting's type (a bool, a bounded int or float, one of a
    fixed set of strings: torch's ``Literal`` types and ``ENUMS``) and not below the rule's
    minimum, and within the rule's ``Bound``. ``trust`` (``--trust-config``) restores any known
    setting but ``NEVER``, a listed one still within its range."""
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        return "not a setting name"
    short, _, name = key.partition(".")
    if key in NEVER_KEYS or NEVER.search(name):
        return "writes files or names a place of the capturing machine (never restored)"
    value_type = _value_type(key)
    if value_type is None:
        return "not in this torch"
    rule = RESTORABLE.get(key)
    if rule is not None and rule.bound is not None and value is not None and (not trust or rule.bound.values is None):
        why = rule.bound.why_not(value)  # a range is this machine's limit: it holds under --trust-config too
        if why is not None:
            return why + (", which would skip compiling" if rule.reason == _LIMIT else "")
    if trust:
        return None
    hint = " (--trust-config restores it)"
    if rule is None:
        return "not among the settings known not to stop compilation, hide an error, or write or run anything" + hint
    if key in ENUMS:
        why = None if value is None or isinstance(value, str) and value in ENUMS[key] else "a value outside its fixed set"
    else:
        why = _allowed_type(value_type, value)
    return None if why is None else why + hint


def safe_recorded_key(key: Any) -> bool:
    """A recorded setting name that may be restored from someone else's dump at all (its value
    is checked by ``restorable``)."""
    return isinstance(key, str) and key in RESTORABLE


def python_lines(settings: dict[str, Any]) -> list[str]:
    """The settings as statements for a standalone repro.py (keys checked, values through repr)."""
    return [f"torch.{'_' + key.partition('.')[0]}.config.{key.partition('.')[2]} = {value!r}"
            for key, value in sorted(settings.items()) if isinstance(key, str) and _KEY.fullmatch(key)]
