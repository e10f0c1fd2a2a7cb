"""A failure seen on some runs only (issue 41): `replay --repeat` in one child, minify and bisect
deciding each candidate at the captured rate (judge.rate)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import environment_backends as backends
import pytest

from graphdbg.judge.rate import RateTest
from graphdbg.store.manifest import find_dumps
from graphdbg.store.schema import Manifest


def _flaky_compile_dump(tmp_path):
    return backends.captured_flaky_dump(tmp_path / "dumps")


def test_the_rate_test_asks_a_failure_seen_every_time_once_and_a_flaky_one_until_it_is_sure():
    calls = []

    def run(result):
        def once():
            calls.append(result)
            return result
        return once

    every = RateTest(1.0)
    assert every.decide(run(True), bool).runs == 1 and every.decide(run(False), bool).runs == 1
    flaky = RateTest(0.3)
    kept = flaky.decide(run(True), bool)
    dropped = flaky.decide(run(False), bool)
    assert (kept.keep, kept.runs) == (True, 1)  # one showing of the captured failure is evidence enough
    assert (dropped.keep, dropped.runs) == (False, flaky.runs_to_drop()) and dropped.runs == 9  # 0.7**9 = 4%
    def manifest(**failure):
        return Manifest.model_validate({"schema": "graphdbg.dump", "id": "d", "graph": {}, "inputs": [],
                                        "failure": {"kind": "runtime_error", **failure}})

    assert RateTest.of(manifest(calls={"failed": 3, "passed": 7})).rate == 0.3
    assert RateTest.of(manifest(kind="compile_error")).rate == 1.0  # not counted: every time
    assert RateTest.of(manifest(calls={"failed": 0, "passed": 7})).rate == 1.0


@pytest.mark.slow
def test_repeat_runs_every_run_in_one_isolated_child(cli, tmp_path, monkeypatch):
    dump = _flaky_compile_dump(tmp_path)
    monkeypatch.setenv(backends.DRAWS_SEED, "1")  # the child's draws: one stream, known (.xx.xxxx....)

    r = cli("replay", dump, "--trust-backend", "--repeat", "8", "--json")
    rep = json.loads(r.out)["repeat"]
    assert r.code == 1 and rep["ran"] == "in one child", r
    # one child draws on: a child per run would have drawn the stream's first value each time
    assert 0 < rep["failed"] < 8 and rep["signatures"][0]["signature"] == "RuntimeError: lost a race in the scheduler"


@pytest.mark.slow
def test_repeat_goes_on_in_a_child_per_run_after_a_run_kills_the_child(cli, tmp_path, monkeypatch):
    dump = _flaky_compile_dump(tmp_path)
    monkeypatch.setenv(backends.DRAWS_SEED, "2")  # ....x.......: the fifth draw aborts, every child's first passes
    # (a run of its own is a fresh child, which draws the stream's first value again)

    r = cli("replay", dump, "--backend", "environment_backends:aborts_on_30_percent", "--repeat", "7", "--json")
    rep = json.loads(r.out)["repeat"]
    assert re.fullmatch(r"runs 1 to (\d) in one child, run \1 ended it \(Signal SIGABRT\): the other \d in a child each",
                        rep["ran"]), rep
    assert rep["failed"] == 1 and rep["signatures"] == [{"signature": "Signal SIGABRT", "count": 1, "reproduces": False}]


@pytest.mark.slow
def test_bisect_passes_decides_each_prefix_at_the_failure_rate(cli):
    from conftest import FIXTURES

    pipeline = "passes_for_tests:count_nodes,passes_for_tests:clone_output,passes_for_tests:count_nodes"
    args = ("bisect", "passes", FIXTURES / "block_compile_error", "--backend", "environment_backends:clone_fails_on_30_percent",
            "--passes", pipeline, "--json")
    backends.reseed(5)  # ......x....x: the whole pipeline passes its first run
    r = cli(*args, "--failure-rate", "1")
    assert r.code == 0 and json.loads(r.out)["note"] == "the whole pipeline passes", r  # asked once: the failure is lost

    backends.reseed(5)
    r = cli(*args, "--failure-rate", "0.3")
    result = json.loads(r.out)
    # 4: the backend's race is not the failure the dump captured, and bisect says so
    assert r.code == 4 and result["culprit"] == "passes_for_tests:clone_output" and result["fails_differently"], r
    assert result["outcome"]["signature"] == "RuntimeError: clone lowering raced its allocator" and result["runs"] > 3


@pytest.mark.slow
def test_minify_keeps_a_failure_seen_on_30_percent_of_calls(cli, tmp_path, monkeypatch):
    from conftest import HELPERS, child_env

    run = subprocess.run([sys.executable, str(HELPERS / "environment_backends.py"), str(tmp_path / "dumps")],
                         capture_output=True, text=True, timeout=300, env=child_env(tests=True))
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    (dump,) = find_dumps(tmp_path / "dumps")
    backends.reseed(5)  # the candidates' draws, in this process
    monkeypatch.setenv(backends.DRAWS_SEED, "21")  # repro.py's, in a fresh interpreter: xx..., it shows the failure

    r = cli("minify", dump, "--trust-backend", "-o", tmp_path / "min", "--json")
    assert r.code == 0, r  # repro.py, run on its own, showed the captured failure
    result = json.loads(r.out)
    assert result["failure_rate"] == pytest.approx(seen["failed"] / 20)
    assert result["signature"] == "RuntimeError: lost a race in the compiled code"
    assert result["final_nodes"] < result["start_nodes"] and result["oracle_queries"] >= len(result["steps"])
