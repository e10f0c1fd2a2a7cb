"""Where a graph runs is one door (``graphdbg.execution.executor``), chosen once and passed as
``ReplayOptions.executor``: never sent to a child, never read from a module global, and the
self-check launcher's mark can't turn isolation off outside a sandbox."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import graphdbg
from graphdbg.errors import GraphdbgError
from graphdbg.execution.executor import FreshChild, InProcess, Job, SandboxedWorkers, executor_for
from graphdbg.execution.jobs import JOB_KINDS, job_function
from graphdbg.execution.sandbox import FOLDER_ENV, HERE_ENV
from graphdbg.replay.options import ReplayOptions


def test_the_executor_stays_in_this_process_and_out_of_equality():
    workers = SandboxedWorkers(None)
    opts = ReplayOptions(isolate=True, rtol=1e-3, executor=workers)
    assert "executor" not in opts.for_child()
    assert opts == ReplayOptions(isolate=True, rtol=1e-3) and hash(opts) == hash(ReplayOptions(isolate=True, rtol=1e-3))
    assert executor_for(opts) is workers and executor_for(opts.but(rtol=1e-2)) is workers  # ``but`` keeps it
    workers.close()


def test_the_default_is_a_fresh_child_when_isolated_and_this_process_otherwise(monkeypatch):
    monkeypatch.delenv(HERE_ENV, raising=False)
    assert isinstance(executor_for(ReplayOptions(isolate=True)), FreshChild)
    assert isinstance(executor_for(ReplayOptions()), InProcess)
    assert isinstance(executor_for(ReplayOptions(isolate=False)), InProcess)
    with SandboxedWorkers(None) as workers:  # --no-isolate wins over any executor: a graph you trust runs here
        assert isinstance(executor_for(ReplayOptions(isolate=False, executor=workers)), InProcess)


def test_the_launchers_mark_runs_an_isolated_replay_here_only_inside_a_sandbox(monkeypatch, tmp_path):
    """The self-check's sandboxed launcher marks its environment so that the exported test's replay
    runs in it; the same variable in a user's shell, outside any sandbox, changes nothing."""
    monkeypatch.setenv(HERE_ENV, "1")
    monkeypatch.delenv(FOLDER_ENV, raising=False)
    assert isinstance(executor_for(ReplayOptions(isolate=True)), FreshChild)
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path))
    assert isinstance(executor_for(ReplayOptions(isolate=True)), InProcess)


def test_one_table_names_every_job_kind_and_each_runs_only_as_what_it_takes():
    assert set(JOB_KINDS) == {"replay", "values", "bisect_nodes", "swap", "bisect-ops"}
    assert callable(job_function("swap", "case"))
    for kind, takes in (("swap", "request"), ("replay", "case"), ("rm -rf", "request"), (None, "case")):
        with pytest.raises(GraphdbgError, match="no job of kind"):
            job_function(kind, takes)


def test_a_case_kind_does_not_run_in_this_process():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    with pytest.raises(GraphdbgError, match="sandboxed replay child only"):
        InProcess().submit(Job("swap", case))


def test_in_process_replays_and_records_through_the_same_door():
    dump = graphdbg.load(FIXTURES / "block_compile_error")
    outcome = InProcess().submit(Job("replay", dump, "eager", ReplayOptions(isolate=True)))
    assert outcome.status == "pass" and not outcome.isolated
    case = dump.case()
    values = InProcess().submit(Job("values", case))
    assert {n.name for n in case.gm.graph.nodes if n.op in ("placeholder", "call_function")} <= set(values)


@pytest.mark.slow
def test_replays_given_warm_workers_run_in_one_sandboxed_worker(replay_children):
    """Two isolated replays through the public API with ``SandboxedWorkers`` as their executor:
    both run sandboxed, in the one worker the pool started, and no one-shot child."""
    dump = graphdbg.load(FIXTURES / "block_compile_error")
    with SandboxedWorkers(dump.path, specs=["eager", None]) as workers:
        opts = ReplayOptions(executor=workers)
        outcomes = [dump.case().run("eager", isolate=True, options=opts) for _ in range(2)]
        case = dump.case()
        values = workers.submit(Job("values", case, opts=opts))
    assert [o.status for o in outcomes] == ["pass", "pass"] and all(o.isolated for o in outcomes)
    assert all(o.sandbox for o in outcomes)
    assert workers.pool.started == 1 and replay_children == []
    here = InProcess().submit(Job("values", case))  # every node's value came back from the worker, as recorded here
    assert set(values) == set(here) and all(not hasattr(v, "shape") or v.shape == here[k].shape for k, v in values.items())
