"""``bisect ops``: which of a graph's own kernels makes its outputs wrong.

A kernel wrong in eager too is invisible to a compiled-against-eager check. Here each custom
op with a reference (a built-in matched by name and schema, or ``--swap OP=REFERENCE``) is
swapped alone, and its swap's effect is measured against the graph with every op swapped (the
all-reference graph) and, where the graph runs in float64, the float64 reference of that graph:
the op whose swap alone takes the outputs most of the way there is named, with the share of the
error it accounts for. Whether the captured graph differs from the all-reference graph at all is
judged at the outputs' dtype tolerance, or within the user's bounds (``--within``: an approximate
kernel within them is no culprit).

    >>> result = bisect_ops(case, builtin_swaps(case.gm))
    >>> result.culprits, result.ops[0]["accounts_for"]
    (['kt_attn::int8_attention'], 0.99)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphdbg.case import Case
from graphdbg.judge.accuracy import compare_outputs
from graphdbg.judge.measures import Bound
from graphdbg.rebuild.op_swaps import Swap, builtin_swaps, parse_swaps
from graphdbg.replay.compare_swap import (
    as_bounds,
    case_kernel_names,
    case_kernels,
    distances,
    error,
    in_child,
    in_child_unless,
    reference64,
    run_graph,
    swapped_graph,
)

# An op is named when its swap alone removes at least this share of the error, and a second
# one too when it removes at least this share of what the first does.
ACCOUNTS_FOR = 0.5
CLOSE_SECOND = 0.5


@dataclass
class BisectOpsResult:
    culprits: list[str]
    ops: list[dict[str, Any]]  # per swapped op: its reference, errors after its swap alone, share accounted for
    error: float  # the captured graph's relative error against the all-reference graph
    error_vs_float64: float | None
    all_reference_error_vs_float64: float | None
    float64_note: str | None = None
    stand_ins: list[str] = field(default_factory=list)
    note: str = ""
    kernels: list[dict[str, Any]] = field(default_factory=list)  # how each kernel ran as captured (rebuild/kernel_source.py)
    within: list[str] = field(default_factory=list)  # the bounds "differs" was judged by; none: the dtype's tolerance
    rows: list[dict[str, Any]] = field(default_factory=list)  # per output: the captured graph's measures against the all-reference graph's
    assumptions: list[dict[str, Any]] = field(default_factory=list)  # per swapped op: what its built-in reference assumed

    @property
    def exit_code(self) -> int:
        """``bisect ops``' exit code: 1 when an op is named, else 0."""
        return 1 if self.culprits else 0

    def to_dict(self) -> dict[str, Any]:
        return {"culprits": self.culprits, "culprit": self.culprits[0] if self.culprits else None, "ops": self.ops,
                "error": self.error, "error_vs_float64": self.error_vs_float64,
                "all_reference_error_vs_float64": self.all_reference_error_vs_float64, "float64_note": self.float64_note,
                "stand_ins": self.stand_ins, "note": self.note, "kernels": self.kernels, "within": self.within,
                "rows": self.rows, "assumptions": self.assumptions}


def bisect_ops(case: Case, swaps: list[Swap], bounds: list[Bound] | None = None) -> BisectOpsResult:
    """Swap each op of ``swaps`` alone; name the op(s) whose swap moves the outputs most toward
    the graph with all of them swapped, when the captured graph differs from that one (beyond
    the dtype's tolerance, or outside ``bounds`` where given)."""
    stand_ins, kernels, spelled = [s.describe() for s in case.stand_ins], case_kernels(case), [str(b) for b in bounds or []]
    if not swaps:
        return BisectOpsResult([], [], 0.0, None, None, stand_ins=stand_ins, kernels=kernels, within=spelled,
                               note="no custom op of this graph has a reference: give one with --swap OP=module:function")
    captured = run_graph(case.gm, case.inputs)
    all_ref_gm, _ = swapped_graph(case, swaps)
    all_ref = run_graph(all_ref_gm, case.inputs, swaps)
    ref64, why = reference64(all_ref_gm, case.inputs, case.device)
    total = error(all_ref, captured)
    total64 = error(ref64, captured) if ref64 is not None else None
    rows = []
    for swap in swaps:
        alone = run_graph(swapped_graph(case, [swap])[0], case.inputs, [swap])
        after = error(all_ref, alone)
        row = {"op": swap.op, "reference": swap.reference, "error_after": after,
               "accounts_for": (total - after) / total if total > 0 else 0.0}
        if ref64 is not None and total64:
            after64 = error(ref64, alone)
            row.update(error_vs_float64_after=after64, accounts_for_vs_float64=(total64 - after64) / total64)
        rows.append(row)
    rows.sort(key=lambda r: -r["accounts_for"])
    outputs = distances(all_ref, captured, bounds)
    differs = not all(r["close"] for r in outputs) if bounds else bool(compare_outputs(all_ref, captured))
    culprits = []
    if differs and rows[0]["accounts_for"] >= ACCOUNTS_FOR:
        culprits = [r["op"] for r in rows if r["accounts_for"] >= CLOSE_SECOND * rows[0]["accounts_for"]]
    judged = f" within {', '.join(spelled)}" if spelled else ""
    note = (f"{culprits[0]}'s swap alone accounts for {rows[0]['accounts_for']:.0%} of the outputs' error" if culprits
            else f"the captured graph agrees with the all-reference graph{judged}" if not differs
            else "no single op's swap accounts for most of the error")
    return BisectOpsResult(culprits, rows, total, total64, error(ref64, all_ref) if ref64 is not None else None,
                           why, stand_ins, note, kernels, spelled, outputs, [s.to_dict() for s in swaps])


def bisect_ops_dump(dump: Any, specs: list[str], *, device: Any = None, trust_kernels: bool = False,
                    timeout: float | None = None, isolate: bool | None = None,
                    within: list[Bound] | list[str] | None = None) -> BisectOpsResult:
    """``bisect ops`` on a Dump, with the ``--swap`` pairs ``specs``; every run is in the
    sandboxed replay child, bounded by ``timeout`` (``isolate=False``: in this process, for a
    graph you trust); with ``trust_kernels`` its user Triton kernels run from the dump's source.
    ``within``: the bounds the captured graph is judged by against the all-reference graph."""
    bounds = as_bounds(within)
    if in_child_unless(isolate, trust_kernels):
        result = in_child(dump, {"kind": "bisect-ops", "swaps": list(specs), "within": [str(b) for b in bounds]},
                          device, timeout, trust_kernels)
        result.pop("culprit", None)
        return BisectOpsResult(**result)
    case = dump.case(device)
    return bisect_ops(case, builtin_swaps(case.gm, parse_swaps(specs, case.gm, case_kernel_names(case))), bounds)


def bisect_ops_job(case: Case, job: dict[str, Any]) -> dict[str, Any]:
    """``bisect ops`` in the replay child (``execution/jobs.py``'s ``JOB_KINDS``)."""
    swaps = builtin_swaps(case.gm, parse_swaps(job.get("swaps") or [], case.gm, case_kernel_names(case)))
    return bisect_ops(case, swaps, as_bounds(job.get("within"))).to_dict()


__all__ = ["BisectOpsResult", "bisect_ops", "bisect_ops_dump", "bisect_ops_job"]
