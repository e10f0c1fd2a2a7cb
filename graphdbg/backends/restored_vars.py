"""The environment variables a replay restores from a dump: an allow-list, beside the compiler
settings' (``compiler_config.RESTORABLE``) and in its form, one ``Rule`` each: the reason
restoring it cannot stop compilation, hide an error, or write or run anything, and the
``Bound`` its value must keep (``"0"``/``"1"``, a fixed set of words, a number in a range sized
to this machine).

``--as-captured`` (replay, compare, minify), ``bisect envs`` and minify's ``repro.py`` restore
through ``var_restorable`` alone:

    >>> var_restorable("TORCHINDUCTOR_MAX_AUTOTUNE", "1")      # on the list, within its bound
    >>> var_restorable("OMP_NUM_THREADS", "4096")
    "'4096' is outside 1 to this machine's CPU count (16)"
    >>> var_restorable("TORCH_COMPILE_DISABLE", "1")
    'not on the allow-list of variables known not to ... (--trust-config restores it)'

Everything else a dump recorded is reported "recorded, not restored" with that reason. A
variable of the backend's own (one it read while it compiled and first ran, recorded by
capture) can't be on a static list: it is never restored, and the report gives the line that
sets it. ``--trust-config`` restores the other recorded variables of torch's, Triton's and
CUDA's prefixes too, and lifts the fixed sets of words, but never one naming a place of the
capturing machine, and a number only within its range (this machine's).
"""

from __future__ import annotations

from typing import Any

from graphdbg.backends.compiler_config import _CHECKS, _CODEGEN, _RUNTIME, _TRACING, CPUS, FLAG, RESTORABLE, Range, Rule, Words
from graphdbg.judge.environment_diff import set_line
from graphdbg.store.capture_environment import ENV_PREFIXES, MAX_VAR

NOT_RESTORED = "recorded, not restored"
_THREADS = ("a thread count, at most this machine's CPUs: the same work, spread over other threads (a count past them "
            "only exhausts memory)")
_PRECISION = ("chooses the precision or the library a math op runs with (TF32, cuBLASLt, cuSOLVER, Triton's f32 dot): "
              "the op still runs, its numbers change")
_LOADING = "chooses how CUDA loads modules or queues kernels: the same kernels run"
_WORKSPACE = "cuBLAS's workspace for deterministic results, one of the two sizes CUDA documents"

# name -> its rule: the reason, and the bound of its value
ENV_RESTORABLE: dict[str, Rule] = {
    **dict.fromkeys([f"TORCHINDUCTOR_{n}" for n in (
        "MAX_AUTOTUNE", "MAX_AUTOTUNE_GEMM", "MAX_AUTOTUNE_POINTWISE", "COORDINATE_DESCENT_TUNING", "FREEZING",
        "CPP_WRAPPER", "LAYOUT_OPTIMIZATION", "FORCE_LAYOUT_OPT", "KEEP_OUTPUT_STRIDE", "EMULATE_PRECISION_CASTS",
        "COMPREHENSIVE_PADDING", "SHAPE_PADDING", "PERMUTE_FUSION", "SPLIT_REDUCTIONS", "MEMORY_PLANNING",
        "LOOP_ORDERING_AFTER_FUSION", "ONLINE_SOFTMAX", "BENCHMARK_FUSION", "UNIQUE_KERNEL_NAMES", "PERSISTENT_REDUCTIONS",
        "DIVISIBLE_BY_16", "GRAPH_PARTITION", "PROLOGUE_FUSION", "COOPERATIVE_REDUCTIONS", "DETERMINISTIC",
        "CPP_ENABLE_TILING_HEURISTIC", "CPP_ENABLE_UNSAFE_MATH_OPT_FLAG", "CPP_FALLBACK_SCATTER_REDUCE_SUM",
        "CPP_USE_DECOMPOSE_TANH")], Rule(_CODEGEN, FLAG)),
    "TORCHINDUCTOR_MULTI_KERNEL": Rule(_CODEGEN, Range(0, 3)),
    "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_SEARCH_SPACE": Rule(_CODEGEN, Words("DEFAULT", "EXHAUSTIVE")),
    # reaches g++'s command line as -ffp-contract=VALUE: one of the three values g++ takes, never free text
    "TORCHINDUCTOR_CPP_ENABLE_FLOATING_POINT_CONTRACT_FLAG": Rule(_CODEGEN, Words("off", "on", "fast")),
    "TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE": Rule(_CODEGEN, Range(1, 1 << 24)),
    "TORCHINDUCTOR_CPP_MAX_HORIZONTAL_FUSION_SIZE": Rule(_CODEGEN, Range(0, 1024)),
    # on only: "0" would take the checks out, and a failing check pass
    **dict.fromkeys([f"TORCHINDUCTOR_{n}_ASSERTS" for n in ("SIZE", "NAN", "SCALAR", "ALIGNMENT")], Rule(_CHECKS, Words("1"))),
    **dict.fromkeys(["TORCHINDUCTOR_CUDAGRAPHS", "TORCHINDUCTOR_CPP_DYNAMIC_THREADS"], Rule(_RUNTIME, FLAG)),
    **dict.fromkeys(["TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", "TORCHDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS",
                     "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES"], Rule(_TRACING, FLAG)),
    **dict.fromkeys(["TORCHINDUCTOR_COMPILE_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"], Rule(_THREADS, Range(1, CPUS))),
    **dict.fromkeys(["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE", "TORCH_BLAS_PREFER_CUBLASLT",
                     "TORCH_LINALG_PREFER_CUSOLVER", "TRITON_DEFAULT_FP_FUSION"], Rule(_PRECISION, FLAG)),
    "TRITON_F32_DEFAULT": Rule(_PRECISION, Words("ieee", "tf32", "tf32x3")),
    "CUBLAS_WORKSPACE_CONFIG": Rule(_WORKSPACE, Words(":4096:8", ":16:8")),
    "CUDA_MODULE_LOADING": Rule(_LOADING, Words("LAZY", "EAGER")),
    "CUDA_DEVICE_MAX_CONNECTIONS": Rule(_LOADING, Range(1, 32)),
}
if not all(rule.bound is not None for rule in ENV_RESTORABLE.values()):
    raise ImportError("backends.restored_vars: every variable on the allow-list needs a bound for its value")

# Words of a variable's name (split at "_") saying it can name a program, a path, a host, a hook,
# a log or a cache (TRITON_PTXAS_PATH, TORCHINDUCTOR_CACHE_DIR, TORCH_LOGS): under --trust-config
# restored only when its value names no place of the capturing machine.
_STEERING_WORDS = frozenset(
    "cxx cc compiler cmd command exe binary bin path paths dir root file files filename cache caches log logs logging hook "
    "hooks script custom pass passes launcher plugin profile profiler profiling trace tracing debug nvcc ptxas ld link save "
    "repro dump upload remote output package lib libs shim worker subprocess start method home url uri host addr redis "
    "extensions".split())


def may_name_a_place(name: str) -> bool:
    return any(word.lower() in _STEERING_WORDS for word in name.split("_"))


def well_formed(name: Any, value: Any) -> bool:
    """A recorded variable graphdbg could have written: a name and a text value, of bounded length."""
    return (isinstance(name, str) and isinstance(value, str) and 0 < len(name) <= 256 and len(value) <= MAX_VAR
            and "\0" not in name + value and "=" not in name)


def var_restorable(name: Any, value: Any, trust: bool = False, place: bool = False) -> str | None:
    """None if the recorded variable ``name=value`` may be set for a replay, else why not.
    ``place``: its value names a place of the capturing machine (``store.redact``)."""
    if not well_formed(name, value):
        return "not a variable graphdbg records"
    if place or value == "<redacted>":
        return "names a place of the capturing machine"
    rule = ENV_RESTORABLE.get(name)
    if rule is not None and rule.bound is not None and (not trust or rule.bound.values is None):
        return rule.bound.why_not(value)  # a range is this machine's limit: it holds under --trust-config too
    if rule is not None:
        return None
    if not name.startswith(ENV_PREFIXES):
        return f"not torch's, Triton's or CUDA's: to replay with it, set it yourself: {set_line(name, value)}"
    if not trust:
        return "not on the allow-list of variables known not to stop compiling, hide an error, or write or run anything" \
               " (--trust-config restores it)"
    return None


def markdown() -> str:
    """The two allow-lists as docs/security.md states them (``tests/test_environment.py`` checks
    that the docs hold this text): by reason, each name with the bound of its value."""
    def grouped(rules: dict[str, Rule]) -> list[str]:
        by_reason: dict[str, list[str]] = {}
        for name, rule in rules.items():
            by_reason.setdefault(rule.reason, []).append(f"`{name}`" + (f" {rule.bound.shown(here=False)}" if rule.bound else ""))
        return [f"- {reason}: {', '.join(names)}" for reason, names in by_reason.items()]

    return "\n".join(["Environment variables (`backends/restored_vars.py`, `ENV_RESTORABLE`):", "", *grouped(ENV_RESTORABLE), "",
                      "Compiler settings (`backends/compiler_config.py`, `RESTORABLE`; a setting without a bound takes"
                      " any value of its type):", "", *grouped(RESTORABLE)]) + "\n"
