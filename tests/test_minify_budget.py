"""minify's parts: shrinking with a predicate of one's own, passes that keep statistics, and the
budget (--max-queries, --time-budget) ending a minify with the best graph so far, through the CLI."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

import graphdbg
from fixtures import programs as P
from graphdbg.minify.shrink_passes import ShrinkPass, default_passes, truncate_suffix
from graphdbg.minify.shrinker import Budget, Predicate, shrink


def _calls(case, name: str) -> bool:
    return any(name in str(getattr(n.target, "__name__", n.target)) for n in case.gm.graph.nodes if n.op == "call_function")


def test_shrink_takes_its_failure_predicate_as_an_argument():
    """No backend at all: 'the graph still calls gelu' is the failure, as with fx_minifier."""
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    predicate = Predicate(lambda c: _calls(c, "gelu"))
    s = shrink(case, predicate)
    assert [n.op for n in s.best_case.gm.graph.nodes] == ["placeholder", "call_function", "output"]
    assert _calls(s.best_case, "gelu") and s.stopped is None
    stats = {p.name: p.stats() for p in s.passes}
    assert list(stats) == [p.name for p in default_passes()]
    assert sum(st["queries"] for st in stats.values()) == predicate.queries  # every query is some pass's
    assert sum(st["accepted"] for st in stats.values()) >= len(s.steps) >= 1
    assert all(st["runs"] >= 1 for st in stats.values())
    assert [step.pass_name for step in s.steps] and all(stats[step.pass_name]["accepted"] for step in s.steps)


def test_a_pass_object_keeps_its_statistics_and_a_budget_stops_mid_pass():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    predicate = Predicate(lambda c: _calls(c, "gelu"))
    p = ShrinkPass(truncate_suffix)
    s = shrink(case, predicate, passes=[p], budget=Budget(max_queries=2, seconds=None))
    assert predicate.queries == 2 and s.stopped == "2 queries of a budget of 2"
    assert p.runs == 1 and p.queries == 2
    assert len(s.best_case.gm.graph.nodes) <= len(case.gm.graph.nodes)  # the best so far, whatever it is


@pytest.mark.slow
def test_cli_max_queries_saves_the_best_graph_so_far_and_says_so(tmp_path, cli):
    out = tmp_path / "min"
    r = cli("minify", "--no-self-check", FIXTURES / "block_runtime_error", "-o", out, "--trust-backend", "--max-queries", "3", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["budget_ended"] is True and data["stopped"].startswith("3 queries")
    assert data["oracle_queries"] == 3 and 3 < data["final_nodes"] < data["start_nodes"]
    saved = graphdbg.load(data["out"])
    assert saved.node_count == data["final_nodes"]
    assert saved.manifest_data["minified"]["budget_ended"] is True  # the dump says it is not the end
    assert saved.case().run(P.broken_transpose_backend, direct=True).reproduces(saved)
    assert {s["name"] for s in data["pass_stats"]} >= {"truncate_suffix"}

    text = cli("minify", "--no-self-check", FIXTURES / "block_runtime_error", "-o", tmp_path / "min2", "--trust-backend", "--max-queries", "3")
    assert text.code == 0 and "budget ended after 3 queries" in text.out and "best graph so far" in text.out


@pytest.mark.slow
def test_cli_time_budget_spent_before_any_candidate_keeps_the_original(tmp_path, cli):
    r = cli("minify", "--no-self-check", FIXTURES / "block_compile_error", "-o", tmp_path / "min", "--trust-backend",
            "--time-budget", "0.001", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["budget_ended"] and "time budget" in data["stopped"]
    assert data["final_nodes"] == data["start_nodes"] and data["oracle_queries"] == 0
    assert graphdbg.load(data["out"]).node_count == data["start_nodes"]


def test_cli_refuses_a_negative_budget(cli):
    r = cli("minify", FIXTURES / "block_compile_error", "--trust-backend", "--max-queries", "-1")
    assert r.code == 2
