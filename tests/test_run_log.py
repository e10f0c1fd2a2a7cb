"""The run's log: failures per rank, as signatures, attached to the printed graphs beside it.

The logs under fixtures/corpus are byte-for-byte copies of the corpus's ``log.txt`` files
(SGLang + ThunderFX runs, fixtures/sglang-thunderfx/README.md). Another log comes from a real torchrun run of a program
whose backend prints each graph it is given (as Thunder's debug branch did) and then refuses
it. Every test goes through the CLI but one (a line's graph names, found two ways).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SGLANG_CORPUS, child_env

ROOT = Path(__file__).resolve().parent.parent
CORPUS_FIXTURES = ROOT / "fixtures" / "corpus"
NEXT = CORPUS_FIXTURES / "Qwen3-Next-80B-A3B-Instruct"
LLAMA = CORPUS_FIXTURES / "Llama-4-Maverick-17B-128E-Instruct"
QWEN_SMALL = CORPUS_FIXTURES / "Qwen3-0.6B"

STREAM_SIGNATURE = "NotImplementedError: argument of type: <class 'torch.cuda.streams.Stream'>"
THUNDER = "thunder.dynamo.compiler:ThunderCompiler"


def _ls(cli, *args):
    r = cli("ls", *map(str, args), "--json")
    assert r.code == 0, r
    return json.loads(r.out)


def _group(data, *files):
    return next(g for g in data["groups"] if sorted(g["files"]) == sorted(files))


# The corpus: SGLang + ThunderFX on 8 and 4 GPUs ---------------------------------------------

def test_qwen3_next_log_is_one_stream_failure_on_eight_ranks_attached_by_what_it_names(cli):
    data = _ls(cli, NEXT)
    (log,) = data["logs"]
    assert log["path"].endswith("log.txt") and log["ranks"] == list(range(8)) and not log["truncated"]
    # 16 tracebacks (Dynamo's BackendCompilerFailed, SGLang's wrapper around it), interleaved
    # line by line by 8 processes without rank prefixes: one failure
    (f,) = log["failures"]
    assert (f["signature"], f["backend"], f["kind"]) == (STREAM_SIGNATURE, THUNDER, "compile_error")
    assert f["ranks"] == list(range(8)) and f["rank_source"] == "instances" and f["occurrences"] == 16
    assert "8 distinct backend objects" in f["rank_how"]

    streams = _group(data, "graph_module_170076.py", "graph_module_956955.py")
    assert (streams["kind"], streams["signature"], streams["backend"], streams["error_type"]) == (
        "compile_error", STREAM_SIGNATURE, THUNDER, "NotImplementedError")
    assert streams["log"] == log["path"] and streams["log_line"] == f["first_line"] == 259
    assert streams["log_inferred"] is True and "torch.cuda.streams.Stream" in streams["log_how"]
    # the graphs that hold no stream keep "no error recorded"
    for files in (("graph_module_216725.py", "graph_module_765413.py"), ("rank0_0.py", "rank3_0.py")):
        g = _group(data, *files)
        assert g["kind"] == "printed_graph" and g["signature"] is None and g["log"] is None
    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    assert rows["graph_module_956955.py"]["signature"] == STREAM_SIGNATURE
    assert rows["rank0_0.py"]["log"] is None

    r = cli("ls", NEXT)
    assert r.code == 0 and "from log, inferred" in r.out and "attached to graph_module_" in r.out, r


def test_show_a_printed_graph_beside_its_log(cli):
    r = cli("show", NEXT / "graph_module_170076.py", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert (data["kind"], data["signature"], data["backend"]) == ("compile_error", STREAM_SIGNATURE, THUNDER)
    assert data["message"] == "argument of type: <class 'torch.cuda.streams.Stream'>"
    assert data["log"].endswith("log.txt") and data["log_inferred"] is True and data["log_line"] == 259
    r = cli("show", NEXT / "graph_module_170076.py")
    assert r.code == 0, r
    assert "ThunderCompiler" in r.out and "from the run's log" in r.out and "inferred" in r.out
    # a graph of the same folder that the failure isn't about stays as it was
    data = json.loads(cli("show", NEXT / "rank3_0.py", "--json").out)
    assert data["kind"] == "printed_graph" and data["log"] is None


def test_a_load_failure_is_split_by_process_and_attached_to_no_graph(cli):
    data = _ls(cli, LLAMA)
    (log,) = data["logs"]
    (f,) = log["failures"]  # four tracebacks, one after the other, each under "Process Process-N:"
    assert f["type"] == "AttributeError" and f["signature"] == (
        "AttributeError: module 'triton.language' has no attribute 'constexpr_function'")
    assert f["ranks"] == [0, 1, 2, 3] and f["rank_source"] == "process" and f["occurrences"] == 4
    assert f["kind"] == "error" and f["backend"] is None and log["attached"] == []
    assert all(g["kind"] == "printed_graph" for g in data["groups"])
    r = cli("ls", LLAMA)
    assert r.code == 0 and "outside compiling or running a graph" in r.out, r


def test_a_log_without_failures_changes_nothing(cli):
    data = _ls(cli, QWEN_SMALL)
    (log,) = data["logs"]
    assert log["failures"] == [] and log["ranks"] == [0, 1, 2, 3]  # from "[...TP3]" and "[rank0]:" prefixes
    assert all(d["kind"] == "printed_graph" and d["log"] is None for d in data["dumps"])


def test_the_whole_qwen3_next_folder_is_one_group_of_eight_ranks_with_the_stream_failure(cli):
    data = _ls(cli, SGLANG_CORPUS / "Qwen" / "Qwen3-Next-80B-A3B-Instruct")  # how fast: benchmarks/log_scan.py
    failed = [g for g in data["groups"] if g["signature"]]
    (g,) = failed
    assert g["ranks"] == list(range(8)) and len(g["files"]) == 8
    assert (g["signature"], g["backend"], g["log_inferred"]) == (STREAM_SIGNATURE, THUNDER, True)


# A real run: torchrun, two ranks, a backend that prints its graphs and refuses one ----------

PROGRAM = """
import os, sys
import torch
from fixtures.programs import tiny_block, unsupported_op_backend

rank = int(os.environ.get("RANK", "0"))
out = sys.argv[1]
refuse = unsupported_op_backend("gelu" if rank == 0 else "add")
printed = []


def printing_backend(gm, example_inputs):
    # what SGLang's ThunderFX debug branch does: every graph to rank{R}_{G}.py, then compile
    path = os.path.join(out, f"rank{rank}_{len(printed)}.py")
    with open(path, "w") as f:
        f.write(f"# Rank: {rank}, Graph {len(printed)}\\n" + gm.print_readable(print_output=False))
    printed.append(path)
    if rank == 1:  # rank 1 says which file it compiles; rank 0 doesn't
        print(f"compiling {os.path.basename(path)}", file=sys.stderr)
    return refuse(gm, example_inputs)


block, x = tiny_block()


def layer(x):
    y = x + block.attn(block.norm1(x))
    torch._dynamo.graph_break()
    return y + block.mlp(block.norm2(y))


torch.compile(layer, backend=printing_backend)(x)
"""


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> Path:
    """A folder of printed graphs with torchrun's log.txt beside them (rank 0 fails on its
    second graph, rank 1 on its first)."""
    tmp = tmp_path_factory.mktemp("torchrun")
    program = tmp / "program.py"
    program.write_text(PROGRAM)
    run = tmp / "run"
    run.mkdir()
    env = child_env()
    with (run / "log.txt").open("wb") as f:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--tee", "3",
                               "--log-dir", str(tmp / "torchrun_logs"), str(program), str(run)],
                              stdout=f, stderr=subprocess.STDOUT, env=env, timeout=300, cwd=tmp)
    assert proc.returncode != 0, (run / "log.txt").read_text()[-3000:]
    return run


@pytest.mark.slow
def test_torchrun_log_splits_by_rank_prefix_and_attaches_each_failure_to_its_graph(cli, torchrun_run):
    run = torchrun_run
    assert sorted(p.name for p in run.glob("rank*.py")) == ["rank0_0.py", "rank0_1.py", "rank1_0.py"]
    data = _ls(cli, run)
    (log,) = data["logs"]
    assert log["ranks"] == [0, 1]  # torchrun's "[default0]:" / "[default1]:" prefixes
    by_sig = {f["signature"]: f for f in log["failures"]}
    gelu, add = by_sig["NotImplementedError: no lowering for gelu"], by_sig["NotImplementedError: no lowering for add"]
    assert gelu["ranks"] == [0] and add["ranks"] == [1]
    assert gelu["rank_source"] == add["rank_source"] == "prefix"
    assert gelu["backend"] == add["backend"] == "printing_backend" and gelu["kind"] == "compile_error"
    # torchrun's own ChildFailedError is in the log too, but is no graph's failure
    assert any(f["type"] == "ChildFailedError" and f["kind"] == "error" for f in log["failures"])

    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    assert rows["rank0_1.py"]["signature"] == gelu["signature"] and rows["rank1_0.py"]["signature"] == add["signature"]
    assert rows["rank0_0.py"]["kind"] == "printed_graph"  # graph 0 of rank 0 compiled
    assert rows["rank0_1.py"]["backend"] == "printing_backend"
    # rank 0 never names its files: its last graph; rank 1 names the file it compiles
    assert rows["rank0_1.py"]["log_inferred"] is True and "last graph (Graph 1)" in rows["rank0_1.py"]["log_how"]
    assert "names before the failure (rank1_0.py" in rows["rank1_0.py"]["log_how"]


def test_torchruns_per_rank_log_files_give_the_rank_by_folder(cli, torchrun_run, tmp_path):
    # the same run as torchrun's --log-dir wrote it: RUN/attempt_0/<local rank>/stderr.log, no prefixes
    run = tmp_path / "run"
    run.mkdir()
    for graph in torchrun_run.glob("rank*.py"):
        shutil.copy(graph, run)
    shutil.copytree(torchrun_run.parent / "torchrun_logs", run / "logs")
    data = _ls(cli, run)
    assert sorted(Path(log["path"]).parent.name for log in data["logs"] if "stderr" in log["path"]) == ["0", "1"]
    failures = {f["signature"]: f for log in data["logs"] for f in log["failures"]}
    gelu, add = failures["NotImplementedError: no lowering for gelu"], failures["NotImplementedError: no lowering for add"]
    assert gelu["ranks"] == [0] and add["ranks"] == [1] and gelu["rank_source"] == add["rank_source"] == "file_name"
    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    assert rows["rank0_1.py"]["signature"] == gelu["signature"] and rows["rank1_0.py"]["signature"] == add["signature"]
    assert rows["rank0_0.py"]["kind"] == "printed_graph"


def test_explicit_log_from_elsewhere(cli, torchrun_run, tmp_path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    for p in torchrun_run.glob("rank*.py"):
        shutil.copy(p, graphs / p.name)
    elsewhere = tmp_path / "logs" / "server.out"  # not beside the graphs, not named like a log
    elsewhere.parent.mkdir()
    shutil.copy(torchrun_run / "log.txt", elsewhere)
    data = _ls(cli, graphs)
    assert "logs" not in data and all(d["kind"] == "printed_graph" and d["log"] is None for d in data["dumps"])

    data = _ls(cli, graphs, "--log", elsewhere)
    assert data["logs"][0]["path"] == str(elsewhere)
    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    assert rows["rank0_1.py"]["signature"] == "NotImplementedError: no lowering for gelu"
    assert rows["rank1_0.py"]["signature"] == "NotImplementedError: no lowering for add"
    assert rows["rank0_0.py"]["signature"] is None

    r = cli("show", graphs / "rank1_0.py", "--log", elsewhere, "--json")
    assert r.code == 0, r
    shown = json.loads(r.out)
    assert shown["signature"] == "NotImplementedError: no lowering for add" and shown["log"] == str(elsewhere)
    assert shown["backend"] == "printing_backend" and shown["kind"] == "compile_error"


# Odd and hostile logs ----------------------------------------------------------------------

@pytest.fixture
def stream_graphs(tmp_path):
    """The two ranks' stream graphs and the small graphs, in a folder of their own."""
    folder = tmp_path / "next"
    folder.mkdir()
    for p in NEXT.glob("graph_module_*.py"):
        shutil.copy(p, folder / p.name)
    return folder


def test_a_binary_log_is_one_line_and_exit_2_when_given_and_skipped_when_found(cli, stream_graphs, tmp_path):
    junk = tmp_path / "core.log"
    junk.write_bytes(bytes(range(256)) * 4096)
    r = cli("ls", stream_graphs, "--log", junk)
    assert r.code == 2 and r.err.count("\n") == 1 and "not a text log" in r.err and "Traceback" not in r.err, r
    r = cli("show", stream_graphs / "graph_module_170076.py", "--log", junk)
    assert r.code == 2 and "not a text log" in r.err and r.err.count("\n") == 1, r
    r = cli("ls", stream_graphs, "--log", tmp_path / "missing.log")
    assert r.code == 2 and "missing.log" in r.err and r.err.count("\n") == 1, r
    r = cli("ls", ROOT / "fixtures" / "block_compile_error", "--log", junk)  # captured dumps only: still checked
    assert r.code == 2 and "not a text log" in r.err, r

    shutil.copy(junk, stream_graphs / "core.log")  # found beside the graphs: noted, not fatal
    data = _ls(cli, stream_graphs)
    (entry,) = data["logs"]
    assert "not a text log" in entry["error"] and all(d["kind"] == "printed_graph" for d in data["dumps"])


def test_a_log_with_no_exceptions_and_a_gigantic_line(cli, stream_graphs):
    real = (NEXT / "log.txt").read_bytes()
    with (stream_graphs / "log.txt").open("wb") as f:
        f.write(b"loading...\n" + b"x" * (48 << 20))  # 48 MB without a newline (a progress bar gone wrong)
        f.write(b"\nRuntimeError: a line that looks like an error, outside any traceback\n")
        f.write(b"Traceback (most recent call last):\n" + b"  File \"y.py\", line 1, in f\n" * 3)  # never closed
    data = _ls(cli, stream_graphs)  # how fast: benchmarks/log_scan.py
    (log,) = data["logs"]
    assert log["failures"] == [] and log["lines"] == 7
    assert all(d["kind"] == "printed_graph" for d in data["dumps"])

    # the same giant line, then the real log: its failure is still found
    with (stream_graphs / "log.txt").open("wb") as f:
        f.write(b"z" * (48 << 20) + b"\n" + real)
    data = _ls(cli, stream_graphs)
    (f,) = data["logs"][0]["failures"]
    assert f["signature"] == STREAM_SIGNATURE and f["first_line"] == 260


@pytest.mark.parametrize("style", ["[rank{r}]:", "[default{r}]:", "(VllmWorker rank={r} pid=4242) ", "(Worker_TP{r} pid=77) ",
                                   "[2025-10-21 19:07:51 TP{r}] ", "[1,{r}]<stderr>:", "rank={r} ", "[rank: {r}] "])
def test_rank_prefixes_of_common_launchers(cli, stream_graphs, style):
    """The real log's first BackendCompilerFailed traceback, written by two ranks with each launcher's prefix."""
    lines = (NEXT / "log.txt").read_text().splitlines()
    block = lines[lines.index("Traceback (most recent call last):", 190):260]  # lines 253-260
    assert block[-1].startswith("NotImplementedError")
    text = "".join(style.format(r=r) + line + "\n" for r in (2, 5) for line in block)
    (stream_graphs / "log.txt").write_text(text)
    data = _ls(cli, stream_graphs)
    (f,) = data["logs"][0]["failures"]
    assert f["signature"] == STREAM_SIGNATURE and f["ranks"] == [2, 5] and f["rank_source"] == "prefix"
    assert f["occurrences"] == 2


def test_a_logger_that_prefixes_only_a_tracebacks_first_line(cli, stream_graphs):
    """SGLang's scheduler logs "[... TP3] Scheduler hit an exception: Traceback ..." and the rest bare."""
    lines = (NEXT / "log.txt").read_text().splitlines()
    first = lines.index("Traceback (most recent call last):", 190)
    block = lines[first + 1:260]  # lines 254-260, ending in the BackendCompilerFailed
    # "During handling ...", then SGLang's wrapper traceback (lines 266-290), less line 288: a
    # "Traceback (most recent call last):" that another process interleaved there
    chained = lines[265:287] + lines[288:290]
    assert chained[0].startswith("During handling") and chained[-1].startswith("NotImplementedError")
    text = "".join(f"[2025-10-21 19:07:51 TP{r}] Scheduler hit an exception: Traceback (most recent call last):\n"
                   + "\n".join(block + [""] + chained) + "\n" for r in (1, 6))
    (stream_graphs / "log.txt").write_text(text)
    data = _ls(cli, stream_graphs)
    (f,) = data["logs"][0]["failures"]  # the wrapper's traceback is the same rank's, the same failure
    assert f["signature"] == STREAM_SIGNATURE and f["ranks"] == [1, 6] and f["rank_source"] == "prefix"
    assert f["occurrences"] == 4


def test_a_chained_traceback_keeps_the_rank_of_the_one_before(cli, stream_graphs):
    """Python prints "During handling of the above exception ..." and the next traceback bare."""
    (stream_graphs / "worker.log").write_text(
        "[2025-10-21 19:07:51 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
        "KeyError: 'req_42'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 12, in event_loop\n'
        "RuntimeError: scheduler died\n")
    data = _ls(cli, stream_graphs)
    failures = {f["type"]: f for f in data["logs"][0]["failures"]}
    assert failures["KeyError"]["ranks"] == failures["RuntimeError"]["ranks"] == [3]
    assert data["logs"][0]["attached"] == []  # neither is a graph's failure


def test_a_traceback_through_a_graph_file_names_it(cli, stream_graphs):
    """Someone ran a printed graph and it crashed: the traceback goes through the file itself."""
    (stream_graphs / "log.txt").write_text(
        "Traceback (most recent call last):\n"
        '  File "/home/me/run_graph.py", line 9, in <module>\n'
        "    out = gm(*inputs)\n"
        '  File "/home/me/gm/graph_module_216725.py", line 30, in forward\n'
        "    sglang_inplace_all_reduce = torch.ops.sglang.inplace_all_reduce(x, group_name = 'tp:0')\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error\n")
    data = _ls(cli, stream_graphs)
    (f,) = data["logs"][0]["failures"]
    assert f["kind"] == "runtime_error" and f["ranks"] is None  # no ranks in this log
    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    named = rows["graph_module_216725.py"]
    assert named["kind"] == "runtime_error" and named["signature"] == f["signature"]
    assert named["log_inferred"] is False and "names graph_module_216725.py" in named["log_how"]
    assert sum(1 for d in data["dumps"] if d["log"]) == 1


def test_a_log_too_big_to_scan_is_read_from_its_tail(cli, stream_graphs, monkeypatch):
    from graphdbg.formats import run_log

    shutil.copy(NEXT / "log.txt", stream_graphs / "log.txt")
    monkeypatch.setattr(run_log, "MAX_SCAN", 64 << 10)  # the real log is 93 KB; its failures are in the last 64 KB
    data = _ls(cli, stream_graphs)
    (log,) = data["logs"]
    assert log["truncated"] is True
    (f,) = log["failures"]
    assert f["signature"] == STREAM_SIGNATURE and f["backend"] == THUNDER
    # the tail holds fewer distinct backend objects than ranks: which ranks failed is unknown, so
    # the failure goes to every rank's graph that holds a Stream, as inferred
    assert f["ranks"] is None and f["rank_source"] == "unknown" and f["occurrences"] < 16
    rows = {Path(d["path"]).name: d for d in data["dumps"]}
    assert {n for n, d in rows.items() if d["signature"]} == {"graph_module_170076.py", "graph_module_956955.py"}
    assert rows["graph_module_170076.py"]["log_inferred"] is True


# Graphs printed inside a log (TORCH_LOGS=graph_code,aot_graphs) ------------------------------

TORCH_LOGS_PROGRAM = """
import torch
def f(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1)
torch.compile(f, backend="aot_eager")(torch.randn(4, 8), torch.randn(8, 8))
"""


@pytest.mark.slow
def test_graphs_printed_in_a_log_are_extracted_per_rank_and_replay(cli, tmp_path):
    env = {**os.environ, "TORCH_LOGS": "graph_code,aot_graphs"}
    run = subprocess.run([sys.executable, "-c", TORCH_LOGS_PROGRAM], capture_output=True, text=True, env=env, timeout=300)
    assert "[__graph_code]" in run.stderr, run.stderr[-2000:]
    # two ranks of a launcher that prefixes lines, their records interleaved line by line
    lines = run.stderr.splitlines()
    (tmp_path / "log.txt").write_text("".join(f"[rank{r}]:{line}\n" for line in lines for r in (0, 1)))
    r = cli("extract", tmp_path / "log.txt", "-o", tmp_path / "graphs", "--json")
    assert r.code == 0, r
    names = sorted(Path(p).name for p in json.loads(r.out)["files"])
    assert names == ["rank0_0.py", "rank0_1_aot_graphs.py", "rank1_0.py", "rank1_1_aot_graphs.py"]
    dynamo = (tmp_path / "graphs" / "rank1_0.py").read_text()
    assert dynamo.startswith("# Rank: 1, Graph 0\n# extracted by graphdbg from log.txt line ")
    assert "class GraphModule(torch.nn.Module):\n    def forward(self, L_x_: " in dynamo
    data = _ls(cli, tmp_path / "graphs")
    assert sorted(d["rank"] for d in data["dumps"]) == [0, 0, 1, 1]
    for name in ("rank0_0.py", "rank0_1_aot_graphs.py"):  # the Dynamo graph, and AOT's aten forward graph
        r = cli("replay", tmp_path / "graphs" / name, "--backend", "aot_eager", "--no-isolate", "--json")
        assert r.code == 0 and json.loads(r.out)["status"] == "pass", r
    # again into the same folder: refused, nothing overwritten; a log without graphs: one line, exit 2
    assert cli("extract", tmp_path / "log.txt", "-o", tmp_path / "graphs").code == 2
    (tmp_path / "plain.log").write_text("nothing to see\n")
    r = cli("extract", tmp_path / "plain.log", "-o", tmp_path / "none")
    assert r.code == 2 and "no printed graphs" in r.err and not (tmp_path / "none").exists()


def test_a_second_ls_takes_the_parsed_log_from_the_cache_until_the_log_changes(tmp_path, monkeypatch):
    """A cached ls doesn't scan the run's log again (a third of a cached listing at scale): the
    log's parse is kept beside the manifests, for the same graph names, while the log is as it was."""
    from graphdbg import listing
    from graphdbg.listing import logs

    monkeypatch.setenv("GRAPHDBG_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "next"
    shutil.copytree(NEXT, folder)  # mtimes kept: older than the cache's racy window
    scans = []
    real = logs.read_log
    monkeypatch.setattr(logs, "read_log", lambda *a, **k: scans.append(a[0]) or real(*a, **k))

    first = listing.list_dumps(folder).to_json()
    again = listing.list_dumps(folder).to_json()
    assert len(scans) == 1 and again == first
    assert first["logs"][0]["failures"][0]["signature"] == STREAM_SIGNATURE and first["logs"][0]["attached"]

    log = folder / "log.txt"
    text = log.read_text()
    log.write_text(text.replace("NotImplementedError: argument of type", "NotImplementedError: argument of kind"))
    os.utime(log, (log.stat().st_atime, log.stat().st_mtime - 60))  # edited, and out of the racy window
    changed = listing.list_dumps(folder).to_json()
    assert len(scans) == 2 and "argument of kind" in changed["logs"][0]["failures"][0]["signature"]
    assert listing.list_dumps(folder, cache=False).to_json() == changed and len(scans) == 3


def test_copies_of_a_run_each_attach_their_own_log(tmp_path):
    """A folder holding copies of one run (the same log.txt beside the same graphs): each copy's
    log attaches to its own copy's graphs; a copy whose log has other bytes, or whose name gives
    it a rank, says so in its own entry."""
    from graphdbg import listing

    for name in ("a", "b", "c", "d"):
        shutil.copytree(NEXT, tmp_path / name)
    (tmp_path / "c" / "log.txt").rename(tmp_path / "c" / "rank3.log")  # same bytes, a rank by its name
    log = tmp_path / "d" / "log.txt"
    log.write_text(log.read_text().replace("argument of type", "argument of kind"))
    shared = listing.list_dumps(tmp_path, cache=False).to_json()
    logs = {Path(entry["path"]).parent.name: entry for entry in shared["logs"]}
    assert logs["b"]["path"] == str(tmp_path / "b" / "log.txt") and logs["b"]["attached"]
    assert all(a["path"].startswith(str(tmp_path / "b")) for a in logs["b"]["attached"])
    assert logs["a"]["failures"][0]["ranks"] == list(range(8)) and logs["c"]["failures"][0]["ranks"] == [3]
    assert "argument of kind" in logs["d"]["failures"][0]["signature"]
    assert "argument of type" in logs["a"]["failures"][0]["signature"]


def test_graph_names_in_a_line_are_found_the_same_with_or_without_a_regex_of_every_name(tmp_path):
    """Names of word characters and dots are found from the line's runs of them (no alternation
    of every name compiled per log); other names by the regex. Both find the same names: whole,
    longest first, not inside a longer word or dotted name."""
    from graphdbg.formats.run_log import _Scanner

    names = ["rank0_0.py", "rank0_0", "rank10_0.py", "rank10_0", "graph_module_3.py", "graph_module_3"]
    lines = ['File "/x/rank0_0.py", line 3, in forward', "rank0_0.pyc rank10_0 xrank0_0.py a.rank0_0.py rank0_0_1",
             "graph_module_3.py: graph_module_3. (rank0_0)", "rank0_0.py.bak rank10_0.pyx.py", "résumé_rank0_0 rank0_0é"]
    plain = _Scanner(tmp_path / "log.txt", names)
    regex = _Scanner(tmp_path / "log.txt", [*names, "my-model_0.py"])  # a dash: the regex
    assert plain.names_re is None and regex.names_re is not None
    found = [plain._names_in(line) for line in lines]
    assert found == [regex._names_in(line) for line in lines]
    assert found[:3] == [["rank0_0.py"], ["rank0_0", "rank10_0"], ["graph_module_3.py", "graph_module_3", "rank0_0"]]
