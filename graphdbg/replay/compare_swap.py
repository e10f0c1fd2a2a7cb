"""A graph as captured against the same graph with ops swapped for their references.

``compare --swap OP=REFERENCE`` runs a dump's graph twice on the same inputs, eagerly (a kernel
is judged as it is, not as a compiler rewrote it): once as captured, once with every call of
OP replaced (``rebuild/op_swaps.py``), and says per output how far the kernel is from its reference
(``judge/measures.py``: the reference is the graph with the swaps) and whether that is close: at
the output dtype's tolerance, or within the user's bounds (``--within cosine>=0.9999``).

    >>> report = compare_swap(case, parse_swaps(["kt_attn::int8_attention=attention"], case.gm))
    >>> report.rows[0]
    {'output': 0, 'shape': [2, 16, 128], 'dtype': 'float32', 'max_abs_error': 0.227, 'mean_abs_error': 0.021,
     'cosine': 0.998, 'rel_l1': 0.052, 'rel_l2': 0.061, 'rel_error': 0.061, 'ulps': 3.1e5, 'compared': 4096, ..., 'close': False}
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphdbg.case import Case
from graphdbg.errors import GraphdbgError
from graphdbg.graph.allow_list import check_graph_module, register_ops
from graphdbg.judge import dtypes
from graphdbg.judge.accuracy import BIT_FOR_BIT, BY_DTYPE, EXACT, compare_value
from graphdbg.judge.measures import Bound, measure, parse_within, within
from graphdbg.rebuild.inputs import StandIn
from graphdbg.rebuild.kernel_source import kernels_ran
from graphdbg.rebuild.op_swaps import Swap, kernel_constants, kernel_names, parse_swaps, swap_ops
from graphdbg.replay.float64 import ReferenceUnavailable, float64_reference
from graphdbg.replay.mutation import mutated_inputs
from graphdbg.replay.options import ReplayOptions
from graphdbg.replay.run import fresh_inputs


def run_graph(gm: fx.GraphModule, inputs: list[Any], swaps: list[Swap] | None = None) -> list[Any]:
    """``gm``'s output leaves, eagerly, on fresh copies of the inputs it writes. A graph with
    ``swaps`` that fails is the user's reference's error (GraphdbgError, one line), named."""
    check_graph_module(gm, inputs)
    try:  # torch.fx prints a failing graph's traceback on stderr before raising: the error says it in one line
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            return pytree.tree_leaves(gm(*fresh_inputs(inputs, mutated_inputs(gm))))
    except Exception as e:
        if not swaps:
            raise
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise GraphdbgError(f"the graph with {', '.join(f'{s.op}={s.reference}' for s in swaps)} fails: "
                            f"{type(e).__name__}: {first}") from None


def reference64(gm: fx.GraphModule, inputs: list[Any], device: torch.device | None = None) -> tuple[list[Any] | None, str | None]:
    """``gm``'s outputs in float64 (replay/float64.py), or None and why not."""
    try:
        result = float64_reference(gm, inputs, device=device)
    except (ReferenceUnavailable, torch.OutOfMemoryError) as e:
        return None, str(e)
    return [result.values[i] for i in sorted(result.values)], None


def distance(expected: Any, actual: Any, bounds: list[Bound] | None = None) -> dict[str, Any] | None:
    """How far ``actual`` is from its reference ``expected``: every measure of
    ``judge/measures.py`` (``max_abs`` as ``max_abs_error``, ``mean_abs`` as ``mean_abs_error``;
    ``rel_error`` is ``rel_l2``, its older name), and whether it is close: within every one of
    ``bounds`` where there are any (``within``: each bound, its value, whether it holds), else
    at the output dtype's tolerance. Each dtype as ``judge.dtypes.kind`` says: floats by those
    measures; complex, integers, bools and the dtypes with no arithmetic (bits, packed float4)
    by the judge's own comparison (``judge.accuracy.compare_value``: complex within the dtype's
    tolerance, the rest exactly or bit for bit, whatever the bounds), the row saying which
    (``measure``) and how many elements differ. None for a pair that isn't two tensors of one
    shape and dtype kind."""
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)) or expected.shape != actual.shape:
        return None
    kind = dtypes.kind(actual.dtype)
    if dtypes.kind(expected.dtype) != kind:
        return None
    if kind != dtypes.FLOAT:
        return _compared(expected, actual, kind, bounds)
    m = measure(expected, actual)
    row = {"shape": list(expected.shape), "dtype": str(actual.dtype).removeprefix("torch."),
           "max_abs_error": m["max_abs"], "mean_abs_error": m["mean_abs"], "cosine": m["cosine"], "rel_l1": m["rel_l1"],
           "rel_l2": m["rel_l2"], "rel_error": m["rel_l2"], "ulps": m["ulps"], "compared": m["compared"],
           "nonfinite": int(expected.numel() - m["compared"]), "nonfinite_mismatch": m["nonfinite_mismatch"]}
    if bounds:
        checks = within(bounds, {**m, **row})
        return {**row, "within": checks, "close": all(c["holds"] for c in checks)}
    rtol, atol = BY_DTYPE.of(actual.dtype)
    e, a = expected.detach().double(), actual.detach().double()
    return {**row, "close": bool(torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True))}


_MEASURE = {dtypes.COMPLEX: "by value", dtypes.EXACT: EXACT, dtypes.BITS: BIT_FOR_BIT}  # judge.accuracy's names
_HOW = {dtypes.COMPLEX: "by value", dtypes.EXACT: "exactly", dtypes.BITS: BIT_FOR_BIT}


def _compared(expected: torch.Tensor, actual: torch.Tensor, kind: str, bounds: list[Bound] | None) -> dict[str, Any]:
    """``distance``'s row of an output the measures don't apply to: the judge's comparison of
    it (complex within the dtype's tolerance, the rest exactly or bit for bit)."""
    how = _HOW[kind]
    if kind == dtypes.COMPLEX and expected.dtype != actual.dtype:  # a complex128 reference of a complex64 output
        expected = expected.to(actual.dtype)
    bad = compare_value(0, expected, actual)
    n = expected.numel()
    differing = 0 if bad is None else (bad.differing if bad.differing is not None else (bad.off or n))
    largest = bad.max_abs_error if bad is not None else (0.0 if kind == dtypes.EXACT else None)
    said = f"{differing} of {n} elements differ" if differing else "every element equal" if kind != dtypes.COMPLEX \
        else "every element within the dtype's tolerance"
    row = {"shape": list(expected.shape), "dtype": str(actual.dtype).removeprefix("torch."), "measure": _MEASURE[kind],
           "max_abs_error": largest, "mean_abs_error": None, "cosine": None, "rel_l1": None, "rel_l2": None,
           "rel_error": None, "ulps": None, "compared": n, "differing": differing, "nonfinite": 0, "nonfinite_mismatch": 0,
           "close": bad is None, "note": f"compared {how}: {said}"}
    if bounds:  # a measure's bound is not for integers or bytes: judged as the judge does, and said so
        row["within"] = [{"bound": f"compared {how}", "value": differing, "holds": bad is None}]
    return row


def distances(expected: list[Any], actual: list[Any], bounds: list[Bound] | None = None) -> list[dict[str, Any]]:
    """``distance`` of each output of ``actual`` from its reference in ``expected``."""
    return [{"output": i, **d} for i, (e, a) in enumerate(zip(expected, actual)) if (d := distance(e, a, bounds)) is not None]


def error(expected: list[Any], actual: list[Any]) -> float:
    """One number for how far ``actual`` is: the largest relative error over the outputs."""
    rows = distances(expected, actual)
    return max((r["rel_error"] for r in rows if r["rel_error"] is not None), default=0.0)  # floats' (the rest: exact)


def case_kernels(case: Case) -> list[dict[str, Any]]:
    """How each of the case's kernels runs as captured: real, from the dump, or a stand-in."""
    return kernels_ran(case.gm, case.dump.manifest if case.dump is not None else None)


def case_kernel_names(case: Case) -> dict[int, str]:
    """The Triton kernels' names the case's dump recorded, by ``kernel_idx``."""
    return kernel_names(case.dump.manifest if case.dump is not None else None)


def swapped_graph(case: Case, swaps: list[Swap]) -> tuple[fx.GraphModule, list[StandIn]]:
    """``case``'s graph with ``swaps``, with what its dump recorded of its Triton kernels."""
    manifest = case.dump.manifest if case.dump is not None else None
    return swap_ops(case.gm, swaps, kernel_names(manifest), kernel_constants(manifest))


@dataclass
class SwapReport:
    """``compare --swap``: per output, the graph as captured against the graph with the swaps."""

    swaps: list[dict[str, Any]]  # op, reference, assumptions (a built-in's choices and where each came from)
    rows: list[dict[str, Any]]
    replaced: list[str] = field(default_factory=list)  # the swapped nodes
    stand_ins: list[str] = field(default_factory=list)  # the case's own (ops this machine lacks)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # how each kernel ran as captured (rebuild/kernel_source.py)
    within: list[str] = field(default_factory=list)  # the bounds every output was judged by; none: the dtype's tolerance

    @property
    def moved(self) -> bool:
        return not all(r["close"] for r in self.rows)

    @property
    def exit_code(self) -> int:
        """``compare --swap``'s exit code (and the pytest plugin's failure): 1 when an output moves, else 0."""
        return 1 if self.moved else 0

    def judged_by(self) -> str:
        """What ``close`` means here: the bounds, or the dtype's tolerance."""
        return f"within {', '.join(self.within)}" if self.within else "at the output dtype's tolerance"

    def assumed(self) -> list[str]:
        """Per swap, what its built-in reference assumed where the op's schema doesn't say, in a few words."""
        out = []
        for s in self.swaps:
            assumed = [a for a in s.get("assumptions") or [] if a["source"] == "assumed"]
            if assumed:
                name = s["reference"].partition("(")[0]
                out.append(f"{s['op']}={s['reference']} assumed {', '.join(a.get('spelled') or a['choice'] for a in assumed)}: "
                           f"the op's schema doesn't say; spell them out as {name}({', '.join(a['choice'] + '=...' for a in assumed)})")
        return out

    def moves(self) -> str:
        """One line: the swaps and each output beyond tolerance or a bound, with what the
        references assumed ("" when none moves)."""
        moved = [r for r in self.rows if not r["close"]]
        if not moved:
            return ""
        swaps = ", ".join(f"{s['op']}={s['reference']}" for s in self.swaps)
        line = f"with {swaps}: " + "; ".join(_moved(r) for r in moved)
        assumed = self.assumed()
        return line + (f" ({'; '.join(assumed)})" if assumed else "")

    def to_dict(self) -> dict[str, Any]:
        return {"swaps": self.swaps, "moved": self.moved, "judged_by": self.judged_by(), "within": self.within,
                "rows": self.rows, "replaced": self.replaced, "stand_ins": self.stand_ins, "kernels": self.kernels}


def _moved(row: dict[str, Any]) -> str:
    """One output beyond tolerance or a bound: the bounds it breaks, else its max and cosine."""
    broken = [c for c in row.get("within") or [] if not c["holds"]]
    if broken:
        return f"output {row['output']} is not within " + ", ".join(f"{c['bound']} ({_value(c['value'])})" for c in broken)
    return f"output {row['output']} moves by max {row['max_abs_error']:.3g}, cosine {row['cosine']:.6f}"


def _value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else "inf" if value is None else str(value)


def compare_swap(case: Case, swaps: list[Swap], bounds: list[Bound] | None = None) -> SwapReport:
    """Run ``case`` as captured and with ``swaps``; per output, how far the kernel is from the
    graph with its reference, judged within ``bounds`` where given, else at the dtype's tolerance."""
    spelled = [str(b) for b in bounds or []]
    if not swaps:
        return SwapReport([], [], [], [s.describe() for s in case.stand_ins], case_kernels(case), spelled)
    swapped, used = swapped_graph(case, swaps)
    captured = run_graph(case.gm, case.inputs)
    with_refs = run_graph(swapped, case.inputs, swaps)
    return SwapReport([s.to_dict() for s in swaps], distances(with_refs, captured, bounds),
                      [s.describe() for s in used], [s.describe() for s in case.stand_ins], case_kernels(case), spelled)


def swap_dump(dump: Any, specs: list[str], *, ops: list[str] | None = None, device: Any = None,
              trust_kernels: bool = False, timeout: float | None = None, only_called: bool = False,
              isolate: bool | None = None, within: list[Bound] | list[str] | None = None) -> SwapReport:
    """``compare --swap`` on a Dump: ``ops`` (the user's modules defining the custom ops) are
    imported first, so the graph "as captured" calls the real kernels. Both runs happen in the
    sandboxed replay child, bounded by ``timeout``, as every run of a dump's graph does;
    ``isolate=False``: in this process, for a graph you trust (not with ``trust_kernels``: its
    user Triton kernels run from the dump's source, ``rebuild/kernel_source.py``). ``only_called``:
    swaps of ops the graph doesn't call are left out (none left: a report with no swaps and no
    rows), not an error. ``within``: the bounds each output is judged by (``--within``, Bounds
    or their spelling), instead of the dtype's tolerance."""
    bounds = as_bounds(within)
    if ops:
        register_ops(ops)
    if in_child_unless(isolate, trust_kernels):
        result = in_child(dump, {"kind": "swap", "swaps": list(specs), "only_called": only_called,
                                 "within": [str(b) for b in bounds]}, device, timeout, trust_kernels)
        return SwapReport(**{k: result[k] for k in ("swaps", "rows", "replaced", "stand_ins", "kernels", "within")})
    case = dump.case(device)
    return compare_swap(case, parse_swaps(specs, case.gm, case_kernel_names(case), only_called=only_called), bounds)


def as_bounds(within: list[Bound] | list[str] | None) -> list[Bound]:
    """``--within`` as Bounds, whether given as Bounds or as their spelling (a job's JSON)."""
    return [b for b in within or [] if isinstance(b, Bound)] + parse_within([b for b in within or [] if not isinstance(b, Bound)])


def in_child_unless(isolate: bool | None, trust_kernels: bool) -> bool:
    """Whether a swap's or bisect ops' runs go to the sandboxed replay child: unless the user
    asked for this process (``--no-isolate``), which kernels from the dump never run in."""
    if isolate is False and trust_kernels:
        raise GraphdbgError("--trust-kernels runs the dump's kernels in the sandboxed child only: drop --no-isolate")
    return isolate is not False


def in_child(dump: Any, job: dict[str, Any], device: Any, timeout: float | None, trust_kernels: bool = False) -> dict[str, Any]:
    """``job`` (``{"kind": ..., ...}``, a kind of ``execution.jobs.JOB_KINDS``) on ``dump`` in a fresh sandboxed replay child: its result."""
    from graphdbg.execution.executor import FreshChild, Job  # upward, declared in pyproject's layers contract

    references = tuple(s.partition("=")[2] for s in job.get("swaps") or [] if ":" in s.partition("=")[2])
    kind, payload = job["kind"], {k: v for k, v in job.items() if k != "kind"}
    opts = ReplayOptions(device=device, timeout=timeout, trust_kernels=trust_kernels)
    return FreshChild().submit(Job(kind, dump, opts=opts, payload=payload, references=references))


def swap_job(case: Case, job: dict[str, Any]) -> dict[str, Any]:
    swaps = parse_swaps(job.get("swaps") or [], case.gm, case_kernel_names(case), only_called=bool(job.get("only_called")))
    return compare_swap(case, swaps, as_bounds(job.get("within"))).to_dict()


__all__ = ["SwapReport", "as_bounds", "case_kernels", "in_child", "in_child_unless", "swap_dump", "swapped_graph", "case_kernel_names", "compare_swap", "distance", "distances", "error", "reference64", "run_graph"]
