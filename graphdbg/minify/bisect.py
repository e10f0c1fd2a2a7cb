"""Bisect a failure: which pass, which node, which rank.

    >>> bisect_passes(case, "eager", "mypkg:good,mypkg:buggy").culprit
    'mypkg:buggy'
    >>> d = bisect_nodes(dump, "eager", passes="mypkg:fast_rsqrt")
    >>> d.node, d.source, d.module          # first value off the reference, and where it came from
    ('mul', 'programs.py:31', 'norm1')
    >>> bisect_ranks("dumps/").odd          # ranks whose graph, inputs or error differ

``bisect_nodes`` compares per-node values, recorded by ``ValueRecorder`` (an fx.Interpreter),
between the reference (the graph as captured, in float64 where it can) and the candidate:
the graph after the passes, or, when the backend hands back a GraphModule's own ``forward``
(backends that rewrite the FX graph and run it), the graph the backend actually runs. A
backend whose compiled code is opaque (Inductor) can't show its intermediates; then the
search runs the backend on prefixes of the graph that return one node each and bisects for
the first prefix whose output is off, about log2(nodes) compiles.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from graphdbg.backends.compiler_config import applied_config, replay_settings
from graphdbg.backends.resolve import resolve_backend
from graphdbg.case import Case
from graphdbg.display import Displayed
from graphdbg.dump import natural_key
from graphdbg.errors import GraphdbgError
from graphdbg.execution.world import graph_key, is_captured, printed_worlds, rank_dumps
from graphdbg.formats import load as load_dump
from graphdbg.graph.allow_list import check_graph_module
from graphdbg.graph.hashing import target_name
from graphdbg.judge.accuracy import Tolerance, judge_outputs
from graphdbg.judge.difference import describe_difference
from graphdbg.judge.rate import RateTest
from graphdbg.minify.candidates import Candidate, OriginalGraph
from graphdbg.minify.shrinker import as_case
from graphdbg.outcome import DIFFERENT_FAILURE, Outcome
from graphdbg.rebuild.inputs import clone_values
from graphdbg.replay.backend_setup import backend_callable, inductor_patch
from graphdbg.replay.crash import set_crash, set_pass_crash, unwrap
from graphdbg.replay.divergence import NodeDivergence, describe_node, graph_divergence, graph_it_runs, references
from graphdbg.replay.graph_meta import with_dynamo_meta
from graphdbg.replay.options import ReplayOptions
from graphdbg.replay.passes import PassFailed, PassSpec, apply_passes, inductor_post_grad_patch, resolve_passes
from graphdbg.replay.run import replay_case
from graphdbg.replay.values import ValueRecorder
from graphdbg.store.manifest import find_dumps
from graphdbg.store.safe_files import inside
from graphdbg.store.tensor_file import read_tensors


# Passes -------------------------------------------------------------------------------
@dataclass
class PassBisection(Displayed):
    """The first pass after which the outcome goes bad; for a pattern matcher, which pattern
    (and which of its matches)."""

    culprit: str | None
    index: int | None
    outcome: Outcome | None  # the first bad outcome
    good_outcome: Outcome | None  # with the passes before the culprit
    pattern: str | None = None
    pattern_index: int | None = None
    match_index: int | None = None  # 0-based: the first match whose replacement breaks it
    runs: int = 0
    note: str = ""
    fails_differently: bool = False  # with the culprit the outcome fails, but not as the dump recorded
    captured: str | None = None  # the dump's recorded failure, named when the culprit's differs

    @property
    def exit_code(self) -> int:
        """``bisect passes``' exit code: 0 no culprit, 1 one, 4 one whose failure is not the captured one."""
        return 0 if self.culprit is None else DIFFERENT_FAILURE if self.fails_differently else 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.to_dict() if self.outcome else None
        d["good_outcome"] = self.good_outcome.to_dict() if self.good_outcome else None
        return d


def bisect_passes(case_or_dump: Any, backend: Any = "eager", passes: Any = None,
                  options: ReplayOptions | None = None, failure_rate: float | None = None) -> PassBisection:
    """Binary search over pipeline prefixes for the first pass that makes the outcome go bad.

        >>> r = bisect_passes(dump, "eager", "passes:gelu_to_relu,passes:broken")
        >>> r.culprit, r.outcome.summary()

    Assumes the pipeline is good with no passes and bad with all of them (both checked). For a
    ``PatternMatcherPass`` culprit, its patterns are then tried one at a time (in-process), and
    the bad pattern's matches are bisected by letting only the first k of them apply.
    ``options``: how each replay runs (by default in this process, calling the backend directly).
    ``failure_rate`` (default: the dump's counted calls, else 1): each prefix runs until the
    sequential test of ``judge.rate`` decides whether it fails, as minify's candidates do.
    """
    opts = options or ReplayOptions()
    opts = opts.but(direct=True) if opts.direct is None else opts
    isolate = bool(opts.isolate)
    case = as_case(case_or_dump)
    specs = resolve_passes(passes)
    if not specs:
        raise GraphdbgError("bisect passes needs a pipeline (--passes a:f,b:g)")
    runs = 0
    rate = RateTest.of(case.dump.manifest if case.dump is not None else None, failure_rate)

    def run(fns: list[Any]) -> Outcome:  # judge.rate decides whether it fails: a failing run's Outcome if so
        return rate.decide(lambda: run_once(fns), lambda o: o.failed).outcome

    def run_once(fns: list[Any]) -> Outcome:
        nonlocal runs
        runs += 1
        # PassSpecs, not bare functions: a pass's stage (pre, post_grad_pre, post_grad) must survive
        ps = [(s.name if "@" in s.name else f"{s.name}@{s.stage}") if isolate else s for s in fns] if fns else None
        return replay_case(case, backend, opts.but(passes=ps))

    base = run([])
    if base.failed:
        return PassBisection(None, None, base, None, runs=runs, note="fails without any pass: the backend, not the passes")
    full = run(specs)
    if not full.failed:
        return PassBisection(None, None, None, base, runs=runs, note="the whole pipeline passes")
    lo, hi, outcomes = 0, len(specs), {0: base, len(specs): full}  # prefix lo good, prefix hi bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        outcomes[mid] = run(specs[:mid])
        if outcomes[mid].failed:
            hi = mid
        else:
            lo = mid
    result = PassBisection(specs[hi - 1].name, hi - 1, outcomes[hi], outcomes[lo], runs=runs)
    _compare_with_captured(result, case.dump)
    culprit = specs[hi - 1]
    if _is_pattern_pass(culprit.fn) and not isolate:
        _bisect_patterns(result, culprit, specs[:hi - 1], run)
    result.runs = runs
    return result


def _compare_with_captured(result: PassBisection, dump: Any) -> None:
    """Mark ``result`` as failing differently when its culprit's failure is not the one ``dump``
    recorded (another signature; a mismatch of another kind or size; a crash for a mismatch)."""
    captured = captured_failure(dump)
    if captured is None or result.outcome is None or result.outcome.reproduces(dump):
        return
    result.fails_differently, result.captured = True, captured
    result.note = f"fails differently: with it {result.outcome.summary()}; captured: {captured}"


def _is_pattern_pass(fn: Any) -> bool:
    obj = getattr(fn, "__self__", fn)  # resolve_passes hands a PatternMatcherPass over as its bound `apply`
    return any(c.__name__ == "PatternMatcherPass" for c in type(obj).__mro__)


def _bisect_patterns(result: PassBisection, culprit: Any, before: list[Any], run: Any) -> None:
    pmp = getattr(culprit.fn, "__self__", culprit.fn)
    entries = [(key, e) for key, es in pmp.patterns.items() for e in es]

    def only(key: Any, entry: Any, limit: int | None = None) -> Any:
        one = type(pmp)(pass_name=f"{pmp.pass_name or 'patterns'}[{len(entries)}]")
        if limit is not None:
            entry = copy.copy(entry)
            check, seen = entry.extra_check, {"n": 0}

            def limited(match: Any) -> bool:
                if not check(match):
                    return False
                seen["n"] += 1
                return seen["n"] <= limit

            entry.extra_check = limited
        one.patterns[key].append(entry)
        return PassSpec(culprit.name, one.apply, culprit.stage)  # as resolve_passes hands a PatternMatcherPass over

    for i, (key, entry) in enumerate(entries):
        outcome = run(before + [only(key, entry)])
        if outcome.failed:
            result.pattern_index, result.pattern = i, _describe_entry(entry)
            lo, hi = 0, None
            for k in (1, 2, 4, 8, 16, 32, 64, 128, 256):  # grow until bad, then bisect
                if run(before + [only(key, entry, k)]).failed:
                    hi = k
                    break
                lo = k
            if hi is not None:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if run(before + [only(key, entry, mid)]).failed:
                        hi = mid
                    else:
                        lo = mid
                result.match_index = hi - 1
            return
    result.note = "no single pattern breaks it alone: patterns interact"


def _describe_entry(entry: Any) -> str:
    handler = getattr(entry, "handler", None)
    name = getattr(handler, "__name__", None) or type(entry).__name__
    return f"{name}: {entry.pattern!s}"[:300]


# Nodes --------------------------------------------------------------------------------
def bisect_nodes(case_or_dump: Any, backend: Any = "eager", passes: Any = None,
                 options: ReplayOptions | None = None, failure_rate: float | None = None) -> NodeDivergence:
    """The first node whose value diverges from the reference beyond ``options``' tolerance;
    a prefix compiled by an opaque backend is run until ``judge.rate``'s test decides (``failure_rate``)."""
    case = as_case(case_or_dump)
    check_graph_module(case.gm, case.inputs)  # what a replay checks before it runs (an index backward's indices)
    rate = RateTest.of(case.dump.manifest if case.dump is not None else None, failure_rate)
    # the backend runs under the compiler settings of the captured run, as in a replay
    with applied_config(replay_settings(case.dump.manifest_data if case.dump is not None else None)):
        return _bisect_nodes(case, backend, passes, (options or ReplayOptions()).tolerance, rate)


def _bisect_nodes(case: Case, backend: Any, passes: Any, tol: Tolerance, rate: RateTest = RateTest()) -> NodeDivergence:
    grad = case.dump is not None and case.dump.manifest.grad_enabled
    ref, ref64 = references(case, grad)
    specs = resolve_passes(passes)
    # the graph as Dynamo hands it over, node meta and all (``replay.graph_meta``), before the passes read it
    try:
        gm, _ = apply_passes(with_dynamo_meta(copy.deepcopy(case.gm), case.inputs, case.dump), specs)
    except PassFailed as failed:  # no node ran: the answer is the pass's failure (``bisect passes`` names the pass)
        return _pass_fails(case, failed)
    runs_gm = gm if backend in (None, "eager") else graph_it_runs(gm, case.inputs, backend_callable(resolve_backend(backend)[1]), case.dump)
    if runs_gm is None and any(p.stage == "pre" for p in specs):
        # An opaque backend after graph passes: what the passes did is visible by running the
        # rewritten graph itself; only if that agrees is the backend's own code to blame.
        found = graph_divergence(case, gm, ref, ref64, grad, tol)
        if found.node is not None:
            found.method = "interpreter, graph after passes"
            return found
    if runs_gm is None:
        return _bisect_opaque(case, backend, gm, ref, ref64, tol, [p for p in specs if p.stage != "pre"], rate)
    return graph_divergence(case, runs_gm, ref, ref64, grad, tol)


def _bisect_opaque(case: Case, backend: Any, gm: fx.GraphModule, ref: ValueRecorder, ref64: ValueRecorder,
                   tol: Tolerance, inductor_passes: list[Any] = (), rate: RateTest = RateTest()) -> NodeDivergence:
    """Compile prefixes that return one node with the backend (with the passes that run inside
    Inductor hooked in, each prefix with Dynamo's node meta, ``replay.graph_meta``); bisect for
    the first that shows the dump's failure (about log2(n) compiles): a value off the
    reference's value of that node, or, on a crash dump, the captured crash. When no prefix
    shows it but some fail otherwise, the first of those is found and said to fail differently."""
    patch = inductor_post_grad_patch(list(inductor_passes), []) if inductor_passes else {}

    pass_case = Case(gm=gm, inputs=case.inputs, device=case.device, stand_ins=case.stand_ins, dump=case.dump, modified=True)
    original = OriginalGraph.of(pass_case)
    names = [n for n in original.compute if isinstance(original.values.get(n), torch.Tensor) and n in ref.values]
    backend_fn = backend_callable(resolve_backend(backend)[1])
    captured = captured_failure(case.dump)
    crash_dump = _is_crash_dump(case.dump)
    errors: dict[int, list[Any]] = {}
    failures: dict[int, Outcome] = {}
    seen: dict[int, str] = {}  # prefix -> "captured", "different" or "agrees", as its last run said

    def run_once(i: int) -> str:
        sub = original.build(Candidate(keep=frozenset(original.compute[: original.compute.index(names[i]) + 1]), outputs=(names[i],)))
        if sub is None:
            return "agrees"
        handed = clone_values(sub.inputs)
        try:
            with inductor_patch(patch):
                out = backend_fn(with_dynamo_meta(copy.deepcopy(sub.gm), handed, case.dump, original.values), handed)(*handed)
        except Exception as e:
            failures[i] = crashed = Outcome(status="pass", backend=str(backend))
            set_crash(crashed, unwrap(e), "compile")
            return "captured" if crash_dump is None or (crash_dump and crashed.reproduces(case.dump)) else "different"
        value = out[0] if isinstance(out, (list, tuple)) else out
        errors[i] = judge_outputs(ref.values[names[i]], value, ref64=ref64.values.get(names[i]), tol=tol)
        if not errors[i]:
            return "agrees"
        return "different" if crash_dump else "captured"  # a crash dump's failure is its crash, not a value

    def shows(i: int, wanted: tuple[str, ...]) -> bool:  # judge.rate decides: once for a failure seen every time
        return rate.decide(lambda: seen.__setitem__(i, run_once(i)) or seen[i], lambda k: k in wanted).keep

    wanted: tuple[str, ...] = ("captured",)
    if not names or not shows(len(names) - 1, wanted):
        if seen.get(len(names) - 1) != "different":
            return _nothing_found(len(seen))
        wanted = ("captured", "different")  # the whole graph fails, not as captured: where that starts
    lo, hi = -1, len(names) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if shows(mid, wanted):
            hi = mid
        else:
            lo = mid
    ref_nodes = {n.name: n for n in case.gm.graph.nodes}
    node = ref_nodes.get(names[hi]) or next(n for n in gm.graph.nodes if n.name == names[hi])
    found = describe_node(case, node, errors.get(hi) or [], len(seen), "prefix-bisect")
    if hi in failures:
        found.failure = failures[hi].signature
        found.note = f"the backend fails on the prefix that ends here: {failures[hi].error_type}: {_first_line(failures[hi].message)}"
    if seen.get(hi) == "different" and captured is not None:
        found.fails_differently, found.captured = True, captured
        found.note = f"fails differently from the captured failure ({captured}); " + (found.note or "its value is off the reference")
    return found


def _pass_fails(case: Case, failed: PassFailed) -> NodeDivergence:
    """``bisect nodes``' answer when a ``pre`` pass raises: no node, the pass's failure, and
    whether that is the failure the dump recorded."""
    crashed = Outcome(status="pass", backend="")
    set_pass_crash(crashed, failed)
    found = NodeDivergence(None, method="passes", failure=crashed.signature,
                           note=f"the pass {failed.report.name} fails before any node runs: {crashed.signature}")
    captured = captured_failure(case.dump)
    if captured is not None and not crashed.reproduces(case.dump):
        found.fails_differently, found.captured = True, captured
        found.note += f"; captured: {captured}"
    return found


def _nothing_found(compared: int) -> NodeDivergence:
    if compared == 0:
        return NodeDivergence(None, method="prefix-bisect", compared=0,
                              note="nothing was compared: the graph has no node with a tensor value to bisect")
    return NodeDivergence(None, method="prefix-bisect", compared=compared, note="the backend agrees on every prefix")


def _first_line(text: str | None) -> str:
    return ((text or "").strip().splitlines() or [""])[0][:200]


def _is_crash_dump(dump: Any) -> bool | None:
    """True for a dump that recorded a crash, False for one that recorded another failure
    (accuracy), None for one that recorded none (a printed graph: any failure is the one)."""
    kind = dump.failure_kind if dump is not None else None
    if kind in ("compile_error", "runtime_error", "crash"):
        return True
    return False if kind == "accuracy" else None


def captured_failure(dump: Any) -> str | None:
    """The failure a dump recorded, in words: its signature, or how its outputs were off."""
    crash = _is_crash_dump(dump)
    if crash:
        return dump.signature
    if crash is False:
        mismatches = (dump.manifest_data.get("failure") or {}).get("mismatches") or []
        return "; ".join(describe_difference(m) for m in mismatches[:3]) or "a mismatch"
    return None


# Ranks --------------------------------------------------------------------------------
@dataclass
class RankReport(Displayed):
    """Per rank: what differs from the majority of ranks (graph, input specs, input values, error)."""

    ranks: list[int]
    graphs: dict[int, str]
    signatures: dict[int, str | None]
    differences: dict[int, list[str]]  # rank -> human-readable differences from the majority
    notes: list[str] = field(default_factory=list)  # what differs everywhere, so flags no rank

    @property
    def odd(self) -> list[int]:
        return sorted(r for r, d in self.differences.items() if d)

    @property
    def exit_code(self) -> int:
        """``bisect ranks``' exit code: 1 when some rank differs from the others, else 0."""
        return 1 if self.odd else 0

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "odd": self.odd, "graphs": self.graphs, "signatures": self.signatures,
                "differences": {str(k): v for k, v in self.differences.items()}, "notes": self.notes}


def bisect_ranks(paths: Any, graph: str | None = None) -> RankReport:
    """Compare one dump per rank: a folder holding them all, or a list of dump folders; or a
    folder of printed graph files (``rank<R>_<G>.py``), each graph across its ranks.

        >>> report = bisect_ranks("dumps/")
        >>> report.odd, report.differences[3]
        ([3], ['graph: hash 1a2b3c4d vs 9f8e7d6c (majority); ops Tensor.relu +1, torch._C._nn.gelu -1'])
        >>> bisect_ranks("corpus/Qwen3-0.6B", graph="0").differences[2]
        ['Qwen3-0.6B/0: literal 113000 in thunder_0.lt, where ranks 0, 1, 3 follow 37984 * rank + 37984 (rank 2: 113952)']
    """
    if isinstance(paths, (str, Path)):
        folders = find_dumps(Path(paths)) if Path(paths).is_dir() else []
        if not folders:
            return _printed_rank_report(Path(paths), graph)
    else:
        folders = [load_dump(p).path for p in paths]
    by_rank = _one_graph_per_rank(folders, graph)
    if len(by_rank) < 2:
        raise GraphdbgError(f"bisect ranks needs dumps of at least two ranks (found {sorted(by_rank)})")
    facts = {r: _rank_facts(d) for r, d in by_rank.items()}
    # A rank whose error is a peer gone away (its collective was cut off) failed because of
    # another rank: with two ranks, the one that failed on its own is the odd one.
    own = {r for r, f in facts.items() if f["signature"] is not None and not waits_on_peer(f["signature"])}
    normal = next((r for r in facts if r not in own), None) if own and len(own) < len(facts) else None
    diffs: dict[int, list[str]] = {r: [] for r in by_rank}
    notes: list[str] = []
    for key in ("graph", "specs", "values", "signature"):
        values = [facts[r][key] for r in by_rank]
        if key == "signature" and normal is not None:
            for r in own:
                diffs[r].append(_explain(key, facts[r], facts[normal], by_rank[r], f"rank {normal}"))
            continue
        if len(by_rank) > 2 and len({repr(v) for v in values}) == len(values):
            # No two ranks agree: that is the design (tensor-parallel shards hold different
            # weights), not one rank gone wrong; flagging all but one would point nowhere.
            notes.append(f"{key}: different on every rank")
            continue
        if len(by_rank) == 2 and values[0] != values[1]:
            # two ranks, two answers: only a rank that failed on its own tells which is odd
            if normal is None:
                notes.append(f"{key}: differs between ranks {' and '.join(map(str, by_rank))}")
                continue
            majority, label = facts[normal][key], f"rank {normal}"
        else:
            majority, label = _majority(values), "majority"
        for r in by_rank:
            if facts[r][key] != majority:
                diffs[r].append(_explain(key, facts[r], _majority_facts(facts, key, majority), by_rank[r], label))
    return RankReport(ranks=sorted(by_rank), graphs={r: d.graph_hash for r, d in by_rank.items()},
                      signatures={r: d.signature for r, d in by_rank.items()}, differences=diffs, notes=notes)


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "TorchrunEnded", "Broken pipe",
              "NCCL communicator was aborted", "remote process exited", "Timed out", "Timeout after")


def waits_on_peer(signature: str) -> bool:
    """Does this error say a peer went away or never answered (gloo's closed connection, NCCL's
    abort, a timeout in a collective), rather than this rank failing on its own?"""
    return any(p in signature for p in _PEER_GONE)


def _one_graph_per_rank(folders: list[Path], graph: str | None) -> dict[int, Any]:
    """Each rank's dump of one graph: ``graph`` when given; else the first graph that failed
    somewhere, each rank's failure of it or what ``mode="always"`` captured of it there (so a
    rank on which it did not fail is compared too); else each rank's first graph."""
    if graph is None:
        failed = sorted({graph_key(f) for f in folders if not is_captured(f)}, key=natural_key)
        graph = failed[0] if failed else None
    if graph is not None:
        return {r: load_dump(p) for r, p in rank_dumps(folders, graph).items()}
    by_rank: dict[int, Any] = {}
    for d in sorted((load_dump(f) for f in folders), key=lambda d: (d.rank, d.id)):
        by_rank.setdefault(d.rank, d)  # the first graph of each rank
    return by_rank


def _rank_facts(d: Any) -> dict[str, Any]:
    specs = tuple((i.get("name") or i.get("node"), i.get("kind"), i.get("dtype"), str(i.get("shape")), str(i.get("value")))
                  for i in d.manifest_data["inputs"])
    stored = {i["stored"]: (i.get("name") or i.get("node")) for i in d.manifest_data["inputs"] if i.get("stored")}
    tensors = read_tensors(inside(d.path, d.manifest.inputs_file), list(stored)) if stored else {}
    values = tuple(sorted((stored[k], hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()
                                                    if t.numel() else b"").hexdigest()[:16]) for k, t in tensors.items()))
    unstored = tuple(sorted((i.get("name") or i.get("node"), str(i.get("stats"))) for i in d.manifest_data["inputs"] if i.get("stats")))
    return {"graph": d.graph_hash, "specs": specs, "values": values + unstored, "signature": d.signature,
            "ops": d.manifest_data["graph"].get("ops", {})}


def _majority(values: list[Any]) -> Any:
    counts: dict[str, tuple[int, Any]] = {}
    for v in values:
        k = repr(v)
        counts[k] = (counts.get(k, (0, v))[0] + 1, v)
    return max(counts.values(), key=lambda c: c[0])[1]


def _majority_facts(facts: dict[int, dict[str, Any]], key: str, value: Any) -> dict[str, Any]:
    return next(f for f in facts.values() if f[key] == value)


def _explain(key: str, mine: dict[str, Any], major: dict[str, Any], dump: Any, label: str = "majority") -> str:
    if key == "graph":
        ops = {k: mine["ops"].get(k, 0) - major["ops"].get(k, 0) for k in set(mine["ops"]) | set(major["ops"])}
        delta = ", ".join(f"{k} {v:+d}" for k, v in sorted(ops.items()) if v)
        return f"graph: hash {mine['graph'][:8]} vs {major['graph'][:8]} ({label})" + (f"; ops {delta}" if delta else "")
    if key == "specs":
        changed = [f"{a[0]} {a[2]}{a[3]} vs {b[2]}{b[3]}" if a[1] == "tensor" else f"{a[0]} {a[4]} vs {b[4]}"
                   for a, b in zip(mine["specs"], major["specs"]) if a != b]
        if len(mine["specs"]) != len(major["specs"]):
            changed.append(f"{len(mine['specs'])} inputs vs {len(major['specs'])}")
        return "input specs: " + "; ".join(changed)
    if key == "values":
        theirs = dict(major["values"])
        changed = [name for name, h in mine["values"] if theirs.get(name) != h]
        return "input values: " + ", ".join(changed[:10]) + (" ..." if len(changed) > 10 else "")
    return f"error: {mine['signature']} vs {major['signature']} ({label})"


# Ranks of a printed graph ------------------------------------------------------------------
def _printed_rank_report(root: Path, graph: str | None) -> RankReport:
    """Each printed graph across the ranks that printed it: which rank's structure, input
    annotations or literals differ. A literal is judged against the pattern the other ranks
    follow (``offset + step * rank``: device indices, vocab-shard bounds, constants), so what
    differs on every rank by design flags no one."""
    worlds = {k: v for k, v in printed_worlds(root).items() if len(v) >= 2}
    if graph is not None:
        worlds = {k: v for k, v in worlds.items() if k == graph or k.rsplit("/", 1)[1] == graph.removeprefix("g")}
    if not worlds:
        raise GraphdbgError(f"bisect ranks needs dumps, or printed graphs of at least two ranks, under {root}"
                            + (f" (graph {graph})" if graph else ""))
    ranks = sorted({r for members in worlds.values() for r in members})
    diffs: dict[int, list[str]] = {r: [] for r in ranks}
    notes: list[str] = []
    hashes: dict[int, list[str]] = {r: [] for r in ranks}
    for key, members in sorted(worlds.items()):
        facts = {r: _printed_facts(d) for r, d in sorted(members.items())}
        for r, d in members.items():
            hashes[r].append(d.manifest.printed.group_hash)
        for what in ("structure", "inputs"):
            values = [f[what] for f in facts.values()]
            if len({repr(v) for v in values}) == 1:
                continue
            if len(values) > 2 and len({repr(v) for v in values}) == len(values):
                notes.append(f"{key}: {what} different on every rank")
                continue
            majority = _majority(values)
            for r, f in facts.items():
                if f[what] != majority:
                    diffs[r].append(f"{key}: " + _first_difference(what, f[what], majority))
        lengths = {len(f["literals"]) for f in facts.values()}
        if len(lengths) == 1:
            odd, by_rank = _odd_literals(facts)
            for r, text in odd:
                diffs[r].append(f"{key}: {text}")
            if by_rank:
                notes.append(f"{key}: {by_rank} literal{'s' if by_rank > 1 else ''} follow the rank (device index, "
                             "shard offset): expected to differ, not counted")
    graphs = {r: hashlib.sha256(" ".join(h).encode()).hexdigest() if len(h) > 1 else (h[0] if h else "")
              for r, h in hashes.items()}
    return RankReport(ranks=ranks, graphs=graphs, signatures={r: None for r in ranks}, differences=diffs, notes=notes)


def _printed_facts(d: Any) -> dict[str, Any]:
    """The graph with its integer literals taken out (structure), its input annotations, and
    those literals with where they are."""
    structure: list[tuple] = []
    literals: list[tuple[str, int]] = []
    inputs: list[tuple] = []

    def mask(value: Any, where: str) -> Any:
        if isinstance(value, fx.Node):
            return "%" + value.name
        if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
            return value
        if isinstance(value, int):
            literals.append((where, value))
            return "#"
        if isinstance(value, torch.device):
            if value.index is not None:
                literals.append((where, value.index))
            return f"device:{value.type}"
        if isinstance(value, (list, tuple)):
            return tuple(mask(v, where) for v in value)
        if isinstance(value, dict):
            return tuple((k, mask(v, where)) for k, v in value.items())
        if isinstance(value, slice):
            return ("slice", mask(value.start, where), mask(value.stop, where), mask(value.step, where))
        return str(value)

    def walk(pg: Any, prefix: str) -> None:
        for node in pg.graph.nodes:
            spec = node.meta.get("graphdbg_spec")
            note = spec.annotation() if spec is not None else None
            where = prefix + node.name
            if node.op == "placeholder":
                if not prefix:
                    inputs.append((node.name, note))
                continue
            target = target_name(node) if node.op != "output" else "output"
            structure.append((where, node.op, target, mask(node.args, where), mask(dict(node.kwargs), where), note))
        for name in sorted(pg.submodules):
            walk(pg.submodules[name], f"{prefix}{name}.")

    walk(d.printed, "")
    return {"structure": tuple(structure), "inputs": tuple(inputs), "literals": literals}


def _first_difference(what: str, mine: tuple, major: tuple) -> str:
    for a, b in zip(mine, major):
        if a != b:
            if what == "inputs":
                return f"input {a[0]} {a[1]} vs {b[1]} (majority)"
            return f"graph: node {a[0]} {a[2]} {a[5] or ''} vs {b[0]} {b[2]} {b[5] or ''} (majority)".replace("  ", " ")
    return f"{what}: {len(mine)} vs {len(major)} (majority)" if what == "inputs" else f"graph: {len(mine)} nodes vs {len(major)} (majority)"


def _odd_literals(facts: dict[int, dict[str, Any]]) -> tuple[list[tuple[int, str]], int]:
    """Per literal position, the line ``offset + step * rank`` most ranks are on; a rank off a
    line that a strict majority follows is odd. Two ranks always fit a line: nothing to say.
    Returns the odd ones, and how many positions follow the rank on every rank."""
    ranks = list(facts)
    found: list[tuple[int, str]] = []
    by_rank = 0
    if len(ranks) < 3:
        return found, by_rank
    count = len(next(iter(facts.values()))["literals"])
    for i in range(count):
        values = {r: facts[r]["literals"][i][1] for r in ranks}
        best: tuple[int, int, int] | None = None  # (ranks on it, offset, step)
        for a in range(len(ranks)):
            for b in range(a + 1, len(ranks)):
                ra, rb = ranks[a], ranks[b]
                step, rem = divmod(values[rb] - values[ra], rb - ra)
                if rem:
                    continue
                offset = values[ra] - step * ra
                on = sum(values[r] == offset + step * r for r in ranks)
                if best is None or on > best[0]:
                    best = (on, offset, step)
        if best is not None and best[0] == len(ranks) and best[2] != 0:
            by_rank += 1
        if best is None or best[0] == len(ranks) or best[0] * 2 <= len(ranks):
            continue
        _, offset, step = best
        followers = [r for r in ranks if values[r] == offset + step * r]
        rule = str(offset) if step == 0 else f"{step} * rank + {offset}" if offset else f"{step} * rank"
        for r in ranks:
            if r not in followers:
                where = facts[r]["literals"][i][0]
                found.append((r, f"literal {values[r]} in {where}, where ranks {', '.join(map(str, followers))} "
                                 f"follow {rule} (rank {r}: {offset + step * r})"))
    return found, by_rank
