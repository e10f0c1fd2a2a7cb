"""bisect passes / nodes / ranks on real graphs (the fixture dumps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.fx as fx
from meta_cc import capture_user_cc, write_user_cc

import graphdbg
from fixtures import programs as P
from graphdbg.case import save_case
from graphdbg.minify import bisect_nodes, bisect_passes, bisect_ranks

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


pytestmark = pytest.mark.usefixtures("child_pythonpath")


def fast_rsqrt(gm: fx.GraphModule) -> None:
    """bad_rewrite_backend's rewrite, as a pass: rsqrt(x) -> 1/sqrt(x + 1e-2)."""
    P.bad_rewrite_backend(gm, [])


def test_bisect_passes_names_the_buggy_pass():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, "eager", "passes_for_tests:count_nodes,passes_for_tests:clone_output,passes_for_tests:gelu_to_relu")
    assert r.culprit == "passes_for_tests:gelu_to_relu" and r.index == 2
    assert r.outcome.status == "mismatch" and r.good_outcome.status == "pass"
    assert r.runs <= 4  # none, all, then a binary search over three


def test_bisect_passes_says_when_the_backend_is_at_fault():
    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, P.refuses_gelu, "passes_for_tests:count_nodes")
    assert r.culprit is None and "without any pass" in r.note


def test_bisect_passes_finds_the_pattern_and_match_in_a_pattern_matcher_pass():
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, PatternMatcherPass, register_graph_pattern

    pmp = PatternMatcherPass(pass_name="test_patterns")
    harmless = CallFunction(torch.ops.aten.relu.default, KeywordArg("x"))

    @register_graph_pattern(harmless, pass_dict=pmp)
    def relu_noop(match, x):  # matches nothing in this graph
        pass

    @register_graph_pattern(CallFunction(torch.rsqrt, KeywordArg("x")), pass_dict=pmp)
    def rsqrt_fast(match, x):
        node = match.nodes[0]
        graph = node.graph
        with graph.inserting_before(node):
            new = graph.call_function(torch.reciprocal, (graph.call_function(torch.sqrt, (graph.call_function(torch.add, (x, 1e-2)),)),))
        node.replace_all_uses_with(new)
        graph.erase_node(node)

    case = graphdbg.load(FIXTURES / "block_compile_error").case()
    r = bisect_passes(case, "eager", ["passes_for_tests:count_nodes", pmp])
    assert r.index == 1
    assert r.pattern is not None and "rsqrt_fast" in r.pattern
    assert r.match_index is not None  # a block has two rsqrts; the first replacement already breaks it


def test_bisect_nodes_names_the_rewritten_rsqrt_with_its_source_line():
    d = bisect_nodes(FIXTURES / "block_accuracy", "eager", passes=[fast_rsqrt])
    assert d.replaced == "rsqrt"
    assert d.node == "mul"  # the first reference node whose value is off reads the rewrite
    # the committed fixture was captured in another checkout: its source paths are that checkout's
    assert d.source.endswith("fixtures/programs.py:31") and "torch.rsqrt" in d.code
    assert d.module == "norm1"
    assert set(d.new_nodes) >= {"reciprocal", "sqrt"}
    assert d.max_abs_error > 1e-3


def test_bisect_nodes_through_a_backend_that_rewrites_its_graph():
    d = bisect_nodes(FIXTURES / "block_accuracy", P.bad_rewrite_backend)
    assert d.method == "interpreter" and d.replaced == "rsqrt" and d.source.endswith("programs.py:31")


def test_bisect_nodes_on_an_opaque_backend_bisects_prefixes():
    def opaque(gm, example_inputs):  # hides its graph behind a plain function
        P.bad_rewrite_backend(gm, example_inputs)
        return lambda *args: gm(*args)

    d = bisect_nodes(FIXTURES / "block_accuracy", opaque)
    assert d.method == "prefix-bisect"
    assert d.node == "rsqrt" and d.source.endswith("programs.py:31")
    assert d.compared <= 8  # log2 of the graph, not one compile per node


def test_bisect_nodes_when_nothing_diverges():
    d = bisect_nodes(FIXTURES / "block_accuracy", "eager")
    assert d.node is None and d.compared > 20


def test_bisect_nodes_on_a_crash_dump_names_the_node_the_graph_crashes_at(cli):
    # the backend rewrites the graph (transposes every linear weight): the first node that can't run is the answer
    r = cli("bisect", "nodes", FIXTURES / "block_runtime_error", "--trust-backend", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["node"] == "linear" and found["source"].endswith("programs.py:43")
    assert found["note"].startswith("the graph crashes here: RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def _rank_dumps(tmp_path, monkeypatch, change):
    """Three ranks of the same block; ``change(case)`` alters rank 2's copy."""
    root = tmp_path / "dumps"
    for rank in range(3):
        case = graphdbg.load(FIXTURES / "block_compile_error").case()
        if rank == 2:
            change(case)
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        save_case(case, root)
    return root


def test_bisect_ranks_finds_the_rank_with_other_input_values(tmp_path, monkeypatch):
    def nan_input(case):
        case.inputs[0] = case.inputs[0].clone()
        case.inputs[0][0, 0, 0] = float("nan")

    report = bisect_ranks(_rank_dumps(tmp_path, monkeypatch, nan_input))
    assert report.ranks == [0, 1, 2] and report.odd == [2]
    assert report.differences[2] == ["input values: L_x_"]


def test_bisect_ranks_finds_the_rank_with_another_graph(tmp_path, monkeypatch):
    from passes_for_tests import gelu_to_relu

    def other_graph(case):
        gelu_to_relu(case.gm)
        case.gm.recompile()

    report = bisect_ranks(_rank_dumps(tmp_path, monkeypatch, other_graph))
    assert report.odd == [2]
    (diff,) = report.differences[2]
    assert diff.startswith("graph: hash") and "torch.relu +1" in diff and "gelu -1" in diff


# A user's compiler whose FX passes read the node meta Dynamo gives ---------------------------
# (issue 53: bisect handed backends and passes a graph without it, and agreed on everything)
@pytest.fixture(scope="module")
def user_cc(tmp_path_factory):
    """``cc_{mode}_{key}`` modules in a folder of their own, and one dump per mode captured under
    the ``example_value`` ones: {"mods": folder, "crash": dump, "acc": dump}."""
    root = tmp_path_factory.mktemp("user_cc")
    mods = root / "mods"
    mods.mkdir()
    write_user_cc(mods)
    found = {"mods": mods, **{mode: capture_user_cc(mods, root / mode, mode) for mode in ("crash", "acc")}}
    assert found["crash"].name.startswith("g0-compile_error") and found["acc"].name.startswith("g0-accuracy")
    return found


@pytest.fixture
def cc(cli, user_cc, monkeypatch):
    """The CLI, with the user's modules importable here and in graphdbg's children."""
    import os

    monkeypatch.syspath_prepend(str(user_cc["mods"]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(user_cc["mods"]), os.environ.get("PYTHONPATH", "")]))
    return cli


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["crash", "acc"])
def test_bisect_nodes_finds_the_node_a_meta_reading_pass_breaks(cc, user_cc, mode):
    r = cc("bisect", "nodes", user_cc[mode], "--trust-backend", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["node"] == "h" and found["method"] == "prefix-bisect" and found["compared"] > 0
    assert not found["fails_differently"]
    if mode == "crash":
        assert found["failure"].startswith("IndexError: tuple index out of range")
    else:
        assert found["max_abs_error"] == pytest.approx(1.01, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("mode,key", [("crash", "example_value"), ("crash", "val"), ("acc", "example_value"), ("acc", "val")])
def test_bisect_passes_blames_the_pass_with_the_captured_failure(cc, user_cc, mode, key):
    m = f"cc_{mode}_{key}"
    r = cc("bisect", "passes", user_cc[mode], "--backend", "eager", "--passes", f"{m}:count_meta,{m}:widen_tanh,{m}:tidy", "--json")
    assert r.code == 1, r
    found = json.loads(r.out)
    assert found["culprit"] == f"{m}:widen_tanh" and not found["fails_differently"], found["note"]
    if mode == "crash":
        assert found["outcome"]["signature"].startswith("IndexError: tuple index out of range")
    else:
        assert found["outcome"]["max_abs_error"] == pytest.approx(2.02, rel=1e-3)  # h * 2: 1.01 twice


@pytest.mark.slow
def test_bisect_passes_says_when_the_culprit_fails_differently(cc, user_cc):
    m = "cc_crash_example_value"
    r = cc("bisect", "passes", user_cc["crash"], "--backend", "eager", "--passes", f"{m}:count_meta,{m}:strict_tanh,{m}:tidy")
    assert r.code == 4, r
    assert "fails differently" in r.out and "NotImplementedError" in r.out and "IndexError" in r.out
    r = cc("bisect", "passes", user_cc["crash"], "--backend", "eager", "--passes", f"{m}:count_meta,{m}:strict_tanh", "--json")
    found = json.loads(r.out)
    assert found["culprit"] == f"{m}:strict_tanh" and found["fails_differently"]
    assert found["captured"].startswith("IndexError") and found["outcome"]["signature"].startswith("NotImplementedError")


RENAMING = '''
import torch.fx as fx


def backend(gm, example_inputs):
    """Lowers the graph into nodes of its own names (k0, k1, ...), as a lowering backend does."""
    g, env = fx.Graph(), {}
    for i, n in enumerate(gm.graph.nodes):
        if n.op == "output":
            g.output(fx.map_arg(n.args[0], env.__getitem__))
        else:
            env[n] = g.create_node(n.op, n.target, fx.map_arg(n.args, env.__getitem__),
                                   fx.map_arg(n.kwargs, env.__getitem__), name=f"k{i}")
    return fx.GraphModule(gm, g).forward
'''


def test_bisect_nodes_that_compared_nothing_says_so_and_exits_5(cli, tmp_path, monkeypatch):
    (tmp_path / "renaming_cc.py").write_text(RENAMING)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = cli("bisect", "nodes", FIXTURES / "block_accuracy", "--backend", "renaming_cc:backend", "--no-isolate", "--json")
    assert r.code == 5, r
    found = json.loads(r.out)
    assert found["node"] is None and found["compared"] == 0 and found["note"].startswith("nothing was compared")


RECORDING = '''
import json
import torch

KEYS = {keys!r}
LOG = {log!r}


def backend(gm, example_inputs):
    """Records the meta keys of the graph it is handed, then refuses tanh (a failure to minify)."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    fake = all(type(n.meta.get("example_value")).__name__ == "FakeTensor" for n in nodes
               if isinstance(n.meta.get("example_value"), torch.Tensor))
    modes = {{id(getattr(n.meta.get("val"), "fake_mode", None)) for n in nodes}}
    with open(LOG, "a") as f:
        f.write(json.dumps({{"keys": sorted({{k for n in nodes for k in n.meta if k in KEYS}}),
                            "every": sorted(set.intersection(*[{{k for k in n.meta if k in KEYS}} for n in nodes]) if nodes else []),
                            "fake": fake, "one_mode": len(modes) == 1}}) + "\\n")
    if any(n.target is torch.tanh for n in nodes):
        raise NotImplementedError("no tanh here")
    return gm.forward
'''


@pytest.mark.slow
def test_graphs_handed_to_a_backend_carry_the_same_meta_on_every_path(cc, user_cc, tmp_path):
    from graphdbg.replay.graph_meta import DYNAMO_META_KEYS

    log = tmp_path / "seen.jsonl"
    (tmp_path / "recording_cc.py").write_text(RECORDING.format(keys=list(DYNAMO_META_KEYS), log=str(log)))
    import os
    import sys

    sys.path.insert(0, str(tmp_path))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])
    try:
        seen = {}
        commands = {
            "replay": ["replay", user_cc["crash"], "--backend", "recording_cc:backend", "--no-isolate"],
            "replay --direct": ["replay", user_cc["crash"], "--backend", "recording_cc:backend", "--no-isolate", "--direct"],
            "bisect nodes": ["bisect", "nodes", user_cc["crash"], "--backend", "recording_cc:backend", "--no-isolate"],
            "bisect passes": ["bisect", "passes", user_cc["crash"], "--backend", "recording_cc:backend",
                              "--passes", "cc_crash_example_value:tidy"],
            "minify": ["minify", user_cc["crash"], "--backend", "recording_cc:backend", "--no-isolate", "--no-self-check",
                       "-o", tmp_path / "min"],
        }
        for path, command in commands.items():
            log.write_text("")
            cc(*command)
            seen[path] = [json.loads(line) for line in log.read_text().splitlines()]
            assert seen[path], path
    finally:
        sys.path.remove(str(tmp_path))
    want = {"example_value", "val", "tensor_meta", "stack_trace", "source_fn_stack"}
    for path, records in seen.items():
        for rec in records:
            assert set(rec["every"]) >= want, (path, rec)
            assert rec["fake"] and rec["one_mode"], (path, rec)
    assert len({tuple(rec["keys"]) for records in seen.values() for rec in records}) == 1, seen


@pytest.mark.slow
def test_compare_says_when_the_dumps_own_backend_is_not_among_the_backends(cc, user_cc):
    r = cc("compare", user_cc["crash"], "--backends", "eager", "--no-isolate")
    assert r.code == 0, r
    assert "the dump's own backend, cc_crash_example_value:backend" in r.out and "is not among these" in r.out
    r = cc("compare", user_cc["crash"], "--backends", "eager", "--no-isolate", "--json")
    assert "cc_crash_example_value:backend" in json.loads(r.out)["own_backend_missing"]
    r = cc("compare", user_cc["crash"], "--backends", "eager,dump", "--trust-backend", "--no-isolate", "--json")
    assert r.code == 1 and json.loads(r.out)["own_backend_missing"] is None


@pytest.mark.slow
@pytest.mark.parametrize("bad,code", [("widen_tanh", 1), ("strict_tanh", 4)])
def test_bisect_nodes_with_a_pass_that_fails_names_its_failure(cc, user_cc, bad, code):
    m = "cc_crash_example_value"
    r = cc("bisect", "nodes", user_cc["crash"], "--backend", "eager", "--passes", f"{m}:count_meta,{m}:{bad}", "--json")
    assert r.code == code, r  # 1: the captured IndexError; 4: another failure, said to differ
    found = json.loads(r.out)
    assert found["node"] is None and found["method"] == "passes" and f"{m}:{bad}" in found["note"]
    assert found["failure"].startswith("IndexError" if code == 1 else "NotImplementedError")
    assert found["fails_differently"] == (code == 4)


MODULE_READER = '''
import json

LOG = {log!r}


def record(gm):
    """Writes what Dynamo's meta says of rsqrt: its module, its source line, its fake value."""
    n = next(n for n in gm.graph.nodes if n.name == "rsqrt")
    stack = n.meta.get("nn_module_stack") or {{}}
    with open(LOG, "w") as f:
        json.dump({{"modules": [list(v) for v in stack.values()], "trace": n.meta.get("stack_trace"),
                   "val": type(n.meta.get("val")).__name__, "shape": list(n.meta["tensor_meta"].shape)}}, f)
    return gm
'''


@pytest.mark.slow
def test_a_pass_reads_the_module_and_source_line_the_dump_recorded(cli, tmp_path, monkeypatch):
    log = tmp_path / "seen.json"
    (tmp_path / "module_reader.py").write_text(MODULE_READER.format(log=str(log)))
    monkeypatch.syspath_prepend(str(tmp_path))
    r = cli("bisect", "passes", FIXTURES / "block_accuracy", "--backend", "eager", "--passes", "module_reader:record", "--json")
    assert r.code == 0, r
    seen = json.loads(log.read_text())
    assert seen["modules"] == [["norm1", "fixtures.programs.RMSNorm"]]  # the type by name: a dump's classes are never imported
    assert "programs.py\", line 31" in seen["trace"] and "torch.rsqrt" in seen["trace"]
    assert seen["val"] == "FakeTensor" and seen["shape"] == [2, 8, 1]
