"""minify, repro.py and export-test on real graphs: the fixture dumps and programs.stack."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import child_env

import graphdbg
from fixtures import programs as P
from graphdbg.minify import MinifyInterrupted, export_test, minify
from graphdbg.minify.oracle import case_key

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
TESTS = Path(__file__).resolve().parent


pytestmark = pytest.mark.usefixtures("child_pythonpath")


def ops(case):
    return [getattr(n.target, "__name__", str(n.target)) for n in case.gm.graph.nodes if n.op not in ("placeholder", "output")]


def captured_stack(tmp_path, layers, backend):
    """A dump captured from programs.stack(layers) failing under ``backend``."""
    model, x = P.stack(layers)
    compiled = torch.compile(model, backend=graphdbg.capture(backend, dump_dir=tmp_path / "dumps"))
    with pytest.raises(Exception):
        compiled(x)
    torch._dynamo.reset()
    return graphdbg.load(tmp_path / "dumps")


def test_compile_error_shrinks_to_the_gelu():
    seen = []
    result = minify(FIXTURES / "block_compile_error", progress=lambda queries, nodes, line: seen.append((queries, nodes, line)))
    assert seen and seen[-1][1] == 3 and [line for _, _, line in seen if line] == result.log
    assert ops(result.case) == ["gelu"]
    assert result.final_nodes == 3 and result.start_nodes == 50
    assert result.outcome.signature == "NotImplementedError: no lowering for gelu"
    # no more queries than a bisection of each end needs, far fewer than one per node
    assert result.queries <= 20
    assert any(line.startswith(("truncate_suffix", "cut_prefix")) for line in result.log)


def test_runtime_error_shrinks_to_the_non_square_linear():
    result = minify(FIXTURES / "block_runtime_error")
    assert ops(result.case) == ["linear"]
    weight = [v for v in result.case.inputs if v.dim() == 2 and v.shape[0] != v.shape[1]]
    assert weight, "the failure needs a non-square weight"
    assert result.outcome.stage == "run" and "cannot be multiplied" in result.outcome.signature


def test_accuracy_shrinks_to_the_rsqrt():
    result = minify(FIXTURES / "block_accuracy")
    assert result.accuracy
    assert ops(result.case) == ["rsqrt"]
    assert result.outcome.status == "mismatch"


@pytest.mark.slow
def test_two_nodes_together_on_a_stack(tmp_path):
    from backends_for_tests import refuses_rsqrt_with_gelu

    dump = captured_stack(tmp_path, 4, refuses_rsqrt_with_gelu)
    assert dump.node_count > 150
    result = minify(dump, refuses_rsqrt_with_gelu)
    assert sorted(ops(result.case)) == ["gelu", "rsqrt"]
    assert result.queries < 60


def test_cache_hits_and_no_candidate_twice():
    keys = []
    result = minify(FIXTURES / "block_runtime_error", on_query=lambda oracle, outcome: keys.append(oracle.tested[-1]))
    assert result.cache_hits > 0
    # every query ran a graph never run before (the dump says how the original failed: no baseline run)
    assert len(keys) == len(set(keys)) == result.queries


def test_oracle_never_runs_a_key_twice():
    from graphdbg.minify.candidates import Candidate, OriginalGraph
    from graphdbg.minify.oracle import Oracle

    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    target = case.run(P.refuses_gelu, direct=True)
    oracle = Oracle(target, P.refuses_gelu)
    origin = OriginalGraph.of(case)
    gelu = origin.build(Candidate(keep=frozenset({"gelu"})))
    again = origin.build(Candidate(keep=frozenset({"gelu"}), outputs=("gelu",)))
    assert case_key(gelu) == case_key(again)
    assert oracle.test_many([gelu, again]) == [True, True]
    assert oracle.queries == 1 and oracle.cache_hits == 1
    assert oracle(gelu) and oracle.queries == 1 and oracle.cache_hits == 2
    assert len(oracle.tested) == len(set(oracle.tested))


@pytest.mark.slow
def test_segfault_during_minify_costs_one_candidate():
    from backends_for_tests import segfault_on_softmax_refuses_gelu

    outcomes = []
    result = minify(FIXTURES / "block_compile_error", "backends_for_tests:segfault_on_softmax_refuses_gelu",
                    isolate=True, jobs=2, timeout=60, on_query=lambda o, out: outcomes.append(out))
    sigs = [o.signature for o in outcomes]
    assert "Signal SIGSEGV" in sigs, sigs
    assert ops(result.case) == ["gelu"]
    assert result.outcome.signature == "NotImplementedError: no lowering for gelu"
    assert segfault_on_softmax_refuses_gelu  # importable here and in the children


def test_ctrl_c_leaves_the_best_graph_on_disk(tmp_path):
    def interrupt_after(n):
        def on_query(oracle, outcome):
            if oracle.queries >= n:
                raise KeyboardInterrupt

        return on_query

    with pytest.raises(MinifyInterrupted) as info:
        minify(FIXTURES / "block_runtime_error", out=tmp_path / "min", on_query=interrupt_after(3))
    partial = info.value.result
    assert partial.interrupted and isinstance(info.value, KeyboardInterrupt)
    assert partial.queries == 3
    saved = graphdbg.load(tmp_path / "min")
    assert 4 < saved.node_count < 50  # shrunk, not finished
    assert saved.node_count == partial.final_nodes
    outcome = saved.case().run(P.broken_transpose_backend, direct=True)
    assert outcome.reproduces(saved)


def _run_without_graphdbg(script: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` with the venv's python from its own folder, with graphdbg made unimportable."""
    blocker = ("import sys, runpy\n"
               "class NoGraphdbg:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'graphdbg' or name.startswith('graphdbg.'):\n"
               "            raise ImportError('graphdbg is not available to a standalone repro')\n"
               "sys.meta_path.insert(0, NoGraphdbg())\n"
               "sys.path.insert(0, '.')\n"
               f"sys.argv = [{script.name!r}, *sys.argv[1:]]\n"
               f"runpy.run_path({script.name!r}, run_name='__main__')\n")
    env = child_env(graphdbg=False)
    return subprocess.run([sys.executable, "-c", blocker, *args], cwd=script.parent, env=env,
                          capture_output=True, text=True, timeout=240)


def _imports_graphdbg(source: str) -> bool:
    """Does ``source`` import graphdbg or one of its modules (its comments may name graphdbg freely)?"""
    names = [a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module]
    return any(name == "graphdbg" or name.startswith("graphdbg.") for name in names)


@pytest.mark.slow
def test_repro_runs_standalone_and_exits_1_until_fixed(tmp_path):
    import backends_for_tests

    result = minify(FIXTURES / "block_compile_error", "backends_for_tests:refuses_rsqrt_with_gelu", any_failure=True)
    assert sorted(ops(result.case)) == ["gelu", "rsqrt"]
    out = tmp_path / "bug"
    result.save(out)
    shutil.copy(backends_for_tests.__file__, out / "backends_for_tests.py")  # the backend ships with the repro
    assert not _imports_graphdbg((out / "repro.py").read_text())
    buggy = _run_without_graphdbg(out / "repro.py")
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "REPRODUCED: NotImplementedError" in buggy.stdout
    fixed = _run_without_graphdbg(out / "repro.py", "--backend", "backends_for_tests:fixed")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


@pytest.mark.slow
def test_repro_for_an_accuracy_bug(tmp_path):
    from graphdbg.minify import write_repro

    result = minify(FIXTURES / "block_accuracy")
    path = write_repro(result.case, P.bad_rewrite_backend, tmp_path / "repro.py", outcome=result.outcome)
    env = child_env()  # graphdbg's folder only for the backend, which lives in fixtures
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1 and "REPRODUCED: output 0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_export_test_fails_while_the_bug_is_there(tmp_path):
    minify(FIXTURES / "block_compile_error", "backends_for_tests:refuses_rsqrt_with_gelu", out=tmp_path / "min", any_failure=True)
    test_file = export_test(tmp_path / "min", tmp_path / "regress" / "test_rsqrt_gelu.py")
    assert (test_file.parent / "test_rsqrt_gelu_data" / "manifest.json").exists()
    env = child_env(tests=True)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no fused lowering for rsqrt feeding gelu" in proc.stdout
    # the same test passes against a fixed backend
    text = test_file.read_text().replace("backends_for_tests:refuses_rsqrt_with_gelu", "backends_for_tests:fixed")
    test_file.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_save_writes_one_dump_that_reproduces(tmp_path):
    result = minify(FIXTURES / "block_runtime_error", out=tmp_path / "min")
    saved = graphdbg.load(tmp_path / "min")
    assert saved.node_count == result.final_nodes
    assert saved.manifest_data["minified"]["start_nodes"] == 50
    assert (tmp_path / "min" / "repro.py").exists() and (tmp_path / "min" / "repro_inputs.pt").exists()
    assert saved.case().run(P.broken_transpose_backend, direct=True).reproduces(saved)
    summary = result.to_dict()
    assert {"start_nodes", "final_nodes", "oracle_queries", "cache_hits", "seconds"} <= set(summary)


def test_a_node_kept_for_its_effect_survives_minification(tmp_path):
    """copy_ into a buffer is read by no node; the failure is about it, so minify keeps it."""
    import torch

    import graphdbg
    from graphdbg.minify import minify
    from graphdbg.store.manifest import find_dumps

    def program(x, buf):
        buf.copy_(x.sin() * 3)
        h = x.cos()
        for _ in range(6):
            h = torch.tanh(h) + x
        return h

    torch._dynamo.reset()
    try:
        from backends_for_tests import refuses_copy_

        torch.compile(program, backend=graphdbg.capture(refuses_copy_, dump_dir=tmp_path))(torch.randn(8), torch.zeros(8))
    except Exception:
        pass
    (path,) = find_dumps(tmp_path)
    result = minify(path, "backends_for_tests:refuses_copy_")
    targets = [str(n.target) for n in result.case.gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert "copy_" in targets and not any("tanh" in t for t in targets)
    assert result.final_nodes < result.start_nodes / 2
