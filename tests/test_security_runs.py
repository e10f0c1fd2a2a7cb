"""Every run of a dump's graph is in the sandbox, and bounded (issue 42).

``minify`` (the first runs, the recording of every node's value, each candidate) and ``bisect
nodes`` run an untrusted graph in a sandboxed worker (``graphdbg.execution.worker``), ended past
``--timeout`` and capped in memory as a replay child is: a graph that never returns from a C
loop, or allocates past the cap, ends in one line and a non-zero exit within the bound; a
refused op anywhere in the graph is refused before anything runs. What the parent reads of a
worker goes through the gate: a FIFO swapped in for an answer never blocks it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphdbg.errors import GraphdbgError

PRINTED = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 8][8, 1]cpu", L_i_: "i64[3][1]cpu"):
        l_x_ = L_x_
        l_i_ = L_i_
        relu: "f32[4, 8][8, 1]cpu" = torch.relu(l_x_)
        mul: "f32[4, 8][8, 1]cpu" = relu * 2
        sum_1: "f32[][]cpu" = mul.sum()
{lines}
        return (add,)
'''
# Attacks of this test's own: a C loop that SIGTERM can't stop in the process (min over a range
# of 10**17, written as a sum of literals the parser folds nowhere), a 32 GiB allocation under a
# 3 GiB cap, each after a few honest nodes so that minify has candidates to cut.
HANG = ["n = min(range(100000000000000000, 200000000000000000))", 'add: "f32[4, 8][8, 1]cpu" = mul + n']
GREEDY = ['big: "f32[8589934592][1]cpu" = torch.full([8589934592], 1.0)', 'add: "f32[][]cpu" = sum_1 + big.sum()']
REFUSED_LATE = ['pwn: "f32[4096][1]cpu" = torch.ops.aten._reshape_alias_copy.default(mul, [4096], [4096])',
                'add: "f32[][]cpu" = sum_1 + pwn.sum()']


def printed(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines="\n".join(" " * 8 + ln for ln in lines)))
    return path


def graphdbg(*args: str, cwd: Path, limit: float, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """The real console script, in its own process (a run that hung would hang this test)."""
    script = Path(sys.executable).parent / "graphdbg"
    started = time.monotonic()
    r = subprocess.run([str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=limit,
                       env={**os.environ, "COLUMNS": "200", **(env or {})})
    return r.returncode, r.stderr, time.monotonic() - started


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("graphdbg: minify: writing")]
    assert len(lines) == 1 and lines[0].startswith("graphdbg: error: "), err[-3000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
def test_minify_of_a_graph_stuck_in_a_c_loop_ends_within_its_timeout(tmp_path):
    path = printed(tmp_path, HANG)
    code, err, took = graphdbg("minify", str(path), "--backend", "eager", "--timeout", "6", "-o", "min", cwd=tmp_path,
                               limit=240)
    line = one_error_line(err)
    assert code == 2 and "no result after 6s (--timeout)" in line, err
    assert took < 200


@pytest.mark.slow
def test_bisect_nodes_of_a_graph_stuck_in_a_c_loop_ends_within_its_timeout(tmp_path):
    path = printed(tmp_path, HANG)
    code, err, took = graphdbg("bisect", "nodes", str(path), "--backend", "eager", "--timeout", "8", cwd=tmp_path,
                               limit=240)
    assert code == 2 and one_error_line(err) == "graphdbg: error: bisect nodes: no result after 8s (--timeout)", err
    assert took < 200


@pytest.mark.slow
def test_a_graph_that_allocates_past_the_memory_cap_fails_in_the_worker_not_here(tmp_path):
    """32 GiB of ones under a 3 GiB cap: the worker's allocation fails at once (in this process
    it would fill memory); minify and bisect nodes say so in one line."""
    path = printed(tmp_path, GREEDY)
    env = {"GRAPHDBG_MEMORY_LIMIT_GB": "3"}
    code, err, _ = graphdbg("minify", str(path), "--backend", "eager", "--timeout", "60", "-o", "min", cwd=tmp_path,
                            limit=240, env=env)
    assert code == 2 and "can't allocate memory" in one_error_line(err), err
    code, err, _ = graphdbg("bisect", "nodes", str(path), "--backend", "eager", "--timeout", "60", cwd=tmp_path,
                            limit=240, env=env)
    assert code == 2 and "can't allocate memory" in one_error_line(err), err


@pytest.mark.parametrize("command", [["minify", "{path}", "-o", "min"], ["bisect", "nodes", "{path}"]])
def test_a_refused_op_late_in_the_graph_is_refused_before_anything_runs(command, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = printed(tmp_path, REFUSED_LATE)
    r = cli(*[a.format(path=path) for a in command], "--backend", "eager", "--timeout", "30")
    line = one_error_line(r.err)
    assert r.code == 2 and "refusing" in line and "_reshape_alias_copy" in line, r
    assert not (tmp_path / "min").exists()


def test_minify_records_values_and_runs_candidates_in_a_sandboxed_worker(monkeypatch):
    """The API's default for a dump: the graph runs in a worker (this process records nothing),
    one worker for the whole search, and it says what sandbox it ran in."""
    from conftest import FIXTURES

    from graphdbg.execution import worker
    from graphdbg.minify import minify
    from graphdbg.minify.candidates import OriginalGraph

    started = []
    real_init = worker.Worker.__init__

    def counting(self, *args, **kwargs):
        started.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(worker.Worker, "__init__", counting)
    real_of = OriginalGraph.of.__func__

    def no_local_recording(cls, case, values=None):
        assert values is not None, "every node's value was recorded in this process"
        return real_of(cls, case, values)

    monkeypatch.setattr(OriginalGraph, "of", classmethod(no_local_recording))
    worker.close_spares()
    result = minify(FIXTURES / "block_runtime_error")
    assert result.final_nodes < result.start_nodes and result.queries > 1
    assert len(started) == 1
    assert result.outcome.isolated and result.outcome.sandbox, result.outcome
    if result.outcome.sandbox.startswith("landlock"):  # it writes under its own work/ (and the dump's compile cache) alone
        writable = result.outcome.sandbox.split("writes: ")[1].split(", character devices")[0].split(", ")
        assert writable[0].endswith("/work") and all(w.endswith("/work") or "/compile/" in w for w in writable), writable


def test_what_a_worker_left_is_read_through_the_gate(tmp_path):
    """A worker that swapped its answer and its output for FIFOs and died: the parent neither
    blocks nor follows them, and says so in one line."""
    from graphdbg.execution.isolation import tail_of
    from graphdbg.execution.worker_tasks import _answer

    os.mkfifo(tmp_path / "answer.json")
    os.mkfifo(tmp_path / "stderr.txt")
    started = time.monotonic()
    assert tail_of(tmp_path / "stderr.txt") == ""
    with pytest.raises(GraphdbgError, match="not a regular file"):
        _answer(tmp_path, "recording every node's value")
    assert time.monotonic() - started < 5


@pytest.mark.gpu
def test_gpu_bisect_nodes_runs_a_cuda_graph_in_the_sandboxed_worker(tmp_path, cli, monkeypatch):
    """On the GPU machine: the worker starts CUDA under the sandbox (its UNIX socket allowed),
    bisect nodes answers from it, and a CUDA graph stuck in a C loop still ends at --timeout."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "rank0_0.py"
    path.write_text(PRINTED.format(lines=" " * 8 + 'add: "f32[][]cpu" = sum_1 + 1').replace("cpu", "cuda:0"))
    r = cli("bisect", "nodes", path, "--backend", "eager", "--timeout", "300", "--json")
    assert r.code == 0 and '"node": null' in r.out, r
    path.write_text(PRINTED.format(lines="\n".join(" " * 8 + ln for ln in HANG)).replace("cpu", "cuda:0"))
    started = time.monotonic()
    r = cli("bisect", "nodes", path, "--backend", "eager", "--timeout", "20")
    assert r.code == 2 and "no result after 20s (--timeout)" in r.err and time.monotonic() - started < 200, r


SWAPPABLE_HANG = '''class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 8][8, 1]cpu", L_w_: "f32[8][1]cpu"):
        l_x_ = L_x_
        l_w_ = L_w_
        norm: "f32[4, 8][8, 1]cpu" = torch.ops.kt_norm.rms_norm.default(l_x_, l_w_, 1e-06)
        n = min(range(100000000000000000, 200000000000000000))
        add: "f32[4, 8][8, 1]cpu" = norm + n
        return (add,)
'''


@pytest.mark.slow
@pytest.mark.parametrize("command, options", [(["compare"], ["--swap", "kt_norm::rms_norm=rms_norm"]), (["bisect", "ops"], [])])
def test_swaps_and_bisect_ops_run_the_graph_in_the_sandboxed_child_within_its_timeout(tmp_path, command, options):
    """compare --swap and bisect ops run a dump's graph as a replay does: in the sandboxed child,
    ended past --timeout (a C loop after a custom op with a reference), one line, exit 2."""
    path = tmp_path / "rank0_0.py"
    path.write_text(SWAPPABLE_HANG)
    helpers = Path(__file__).parent / "helpers"
    code, err, took = graphdbg(*command, str(path), *options, "--ops", "kernel_programs", "--timeout", "5", cwd=tmp_path, limit=200,
                               env={"PYTHONPATH": str(helpers)})
    line = one_error_line(err)
    assert code == 2 and "in the replay child: no result after 5s (--timeout)" in line, err
    assert took < 150
